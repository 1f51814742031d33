// The exported environment against DeepSpeed's documented rule (reference §5, runner.py main()):
// variables named NCCL*/PYTHON*/MV2*/UCX*/MLFLOW* go to every node, PYTHONPATH gets the working
// directory prepended, `.deepspeed_env` (DS_ENV_FILE) lines are read from home then the working
// directory with the later value winning, values split at the first '=' and stripped.
#include "zt/launcher/env_export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace zt::launcher {
namespace {

namespace fs = std::filesystem;

class EnvExport : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("zt_env_export_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "home");
    fs::create_directories(root_ / "work");
    home_ = (root_ / "home").string();
    cwd_ = (root_ / "work").string();
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  static std::map<std::string, std::string> as_map(const std::vector<ExportedVar>& vars) {
    std::map<std::string, std::string> m;
    for (const ExportedVar& v : vars) {
      EXPECT_TRUE(m.emplace(v.key, v.value).second) << "key twice: " << v.key;
    }
    return m;
  }

  fs::path root_;
  std::string home_, cwd_;
};

TEST_F(EnvExport, PrefixRuleAsDeepSpeed) {
  std::vector<std::string> base = {"NCCL_DEBUG=INFO",
                                   "NCCL_SOCKET_IFNAME=eth1",
                                   "PYTHONHASHSEED=0",
                                   "MV2_USE_CUDA=1",
                                   "UCX_TLS=rc",
                                   "MLFLOW_TRACKING_URI=http://x:5000/a=b",
                                   "ZT_COMM_TIMEOUT_S=30",
                                   "ZT_LAUNCH_GRACE_S=2",
                                   "ZT_HEARTBEAT_FD=7",
                                   "ZT_JOB_TOKEN=stale",
                                   "HOME=/root",
                                   "PATH=/usr/bin",
                                   "CUDA_VISIBLE_DEVICES=0,1",
                                   "MY_NCCL=1",
                                   "ZTX=1",
                                   "OMPI_COMM_WORLD_RANK=0"};
  Result<std::vector<ExportedVar>> got = exported_env(base, cwd_, home_);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  std::map<std::string, std::string> expected = {
      {"NCCL_DEBUG", "INFO"},      {"NCCL_SOCKET_IFNAME", "eth1"},
      {"PYTHONHASHSEED", "0"},     {"MV2_USE_CUDA", "1"},
      {"UCX_TLS", "rc"},           {"MLFLOW_TRACKING_URI", "http://x:5000/a=b"},
      {"ZT_COMM_TIMEOUT_S", "30"}, {"ZT_LAUNCH_GRACE_S", "2"},
      {"PYTHONPATH", cwd_},  // DeepSpeed sets it to the working directory when unset
  };
  EXPECT_EQ(as_map(*got), expected);
}

TEST_F(EnvExport, PythonPathGetsTheWorkingDirectoryFirst) {
  Result<std::vector<ExportedVar>> got = exported_env({"PYTHONPATH=/opt/lib:/x"}, cwd_, home_);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(as_map(*got).at("PYTHONPATH"), cwd_ + ":/opt/lib:/x");
}

TEST_F(EnvExport, AiscJobsKeepPerNodeVariables) {
  Result<std::vector<ExportedVar>> got = exported_env(
      {"AISC_JOB_NAME=j", "NCCL_IB_HCA=mlx5", "UCX_NET_DEVICES=mlx5_0:1", "NCCL_DEBUG=WARN"}, cwd_,
      home_);
  ASSERT_TRUE(got.is_ok());
  std::map<std::string, std::string> m = as_map(*got);
  EXPECT_EQ(m.count("NCCL_IB_HCA"), 0u);
  EXPECT_EQ(m.count("UCX_NET_DEVICES"), 0u);
  EXPECT_EQ(m.at("NCCL_DEBUG"), "WARN");
}

TEST_F(EnvExport, EnvFilesFromHomeThenWorkingDirectoryLaterWins) {
  write(fs::path(home_) / ".deepspeed_env", "A=home\nB=home\nNCCL_DEBUG=file\n");
  write(fs::path(cwd_) / ".deepspeed_env", "B=cwd\nC = spaced value \nD=x=y==\n");
  std::vector<std::string> read;
  Result<std::vector<ExportedVar>> got =
      exported_env({"NCCL_DEBUG=env", "UNRELATED=1"}, cwd_, home_, &read);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  std::map<std::string, std::string> m = as_map(*got);
  EXPECT_EQ(m.at("A"), "home");
  EXPECT_EQ(m.at("B"), "cwd");
  EXPECT_EQ(m.at("C"), "spaced value");   // DeepSpeed strips key and value
  EXPECT_EQ(m.at("D"), "x=y==");          // split at the first '='
  EXPECT_EQ(m.at("NCCL_DEBUG"), "file");  // the file wins over the environment
  EXPECT_EQ(m.count("UNRELATED"), 0u);
  std::vector<std::string> expected_read = {home_ + "/.deepspeed_env", cwd_ + "/.deepspeed_env"};
  EXPECT_EQ(read, expected_read);
}

TEST_F(EnvExport, DsEnvFileNamesTheFile) {
  write(fs::path(cwd_) / ".deepspeed_env", "A=default\n");
  write(fs::path(cwd_) / "custom.env", "A=custom\n");
  Result<std::vector<ExportedVar>> got = exported_env({"DS_ENV_FILE=custom.env"}, cwd_, home_);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(as_map(*got).at("A"), "custom");
}

TEST_F(EnvExport, ValuesAreTakenLiterally) {
  write(fs::path(cwd_) / ".deepspeed_env",
        "Q=\"a b\"\nS='$(id)'\nU=\xc3\xa9\nCR=win\r\n\n   \n# a comment\n  # another\n");
  Result<std::vector<ExportedVar>> got = exported_env({}, cwd_, "");
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  std::map<std::string, std::string> m = as_map(*got);
  EXPECT_EQ(m.at("Q"), "\"a b\"");
  EXPECT_EQ(m.at("S"), "'$(id)'");
  EXPECT_EQ(m.at("U"), "\xc3\xa9");
  EXPECT_EQ(m.at("CR"), "win");
}

TEST_F(EnvExport, BadLinesNameFileAndLine) {
  const std::string path = cwd_ + "/.deepspeed_env";
  struct Case {
    std::string text;
    std::string where;
  };
  const Case cases[] = {
      {"A=1\nnot an assignment\n", path + ":2:"},
      {"A=1\n\n1BAD=x\n", path + ":3:"},
      {"export A=1\n", path + ":1:"},
      {"A B=1\n", path + ":1:"},
      {"=x\n", path + ":1:"},
  };
  for (const Case& c : cases) {
    write(path, c.text);
    Result<std::vector<ExportedVar>> got = exported_env({}, cwd_, "");
    ASSERT_FALSE(got.is_ok()) << c.text;
    EXPECT_NE(got.status().message().find(c.where), std::string::npos) << got.status().message();
  }
}

TEST_F(EnvExport, UnreadableFileIsAnError) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  const std::string path = cwd_ + "/.deepspeed_env";
  write(path, "A=1\n");
  chmod(path.c_str(), 0);
  Result<std::vector<ExportedVar>> got = exported_env({}, cwd_, "");
  ASSERT_FALSE(got.is_ok());
  EXPECT_NE(got.status().message().find(path), std::string::npos);
}

TEST(EnvNameExported, PerProcessVariablesStay) {
  EXPECT_TRUE(env_name_exported("ZT_LOG_LEVEL"));
  EXPECT_TRUE(env_name_exported("NCCL"));
  EXPECT_FALSE(env_name_exported("ZT_HEARTBEAT_FD"));
  EXPECT_FALSE(env_name_exported("ZT_JOB_TOKEN"));
  EXPECT_FALSE(env_name_exported("RANK"));
  EXPECT_FALSE(env_name_exported("nccl_debug"));  // case matters, as str.startswith
}

}  // namespace
}  // namespace zt::launcher
