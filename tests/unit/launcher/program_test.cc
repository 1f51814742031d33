// PROGRAM's command line against DeepSpeed's launch.py (reference §5): `python -u SCRIPT
// --local_rank=N ARGS`, `python -u -m MODULE --local_rank=N ARGS`, --no_python runs the program
// itself, and --module with --no_python is refused. Paths are real files in a temp directory.
#include "zt/launcher/program.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace zt::launcher {
namespace {

namespace fs = std::filesystem;

class Program : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("zt_program_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "bin");
    fs::create_directories(dir_ / "work");
    // A fake python3 and a tool on a PATH of our own, so the test needs no Python.
    make(dir_ / "bin" / "python3", true);
    make(dir_ / "bin" / "tool", true);
    make(dir_ / "work" / "train.py", false);
    make(dir_ / "work" / "run.py", true);
    path_ = (dir_ / "bin").string();
    cwd_ = (dir_ / "work").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  static void make(const fs::path& p, bool executable) {
    std::ofstream(p) << "#!/bin/sh\n";
    chmod(p.c_str(), executable ? 0755 : 0644);
  }
  fs::path dir_;
  std::string path_, cwd_;
};

TEST_F(Program, PyScriptRunsUnderPython3Unbuffered) {
  Result<ProgramCommand> c = program_command("train.py", ProgramMode::kDefault, path_, cwd_);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->exec_path, path_ + "/python3");
  EXPECT_EQ(c->argv, (std::vector<std::string>{"python3", "-u", "train.py"}));
  EXPECT_TRUE(c->python);
  // DeepSpeed: [python, -u, script, --local_rank=N, args...]
  EXPECT_EQ(program_rank_argv(*c, 1, {"--deepspeed", "--x=1"}),
            (std::vector<std::string>{"python3", "-u", "train.py", "--local_rank=1", "--deepspeed",
                                      "--x=1"}));
  EXPECT_EQ(program_rank_argv(*c, -1, {"a"}),
            (std::vector<std::string>{"python3", "-u", "train.py", "a"}));
}

TEST_F(Program, ModuleRunsUnderPython3DashM) {
  Result<ProgramCommand> c = program_command("pkg.train", ProgramMode::kModule, path_, cwd_);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->exec_path, path_ + "/python3");
  EXPECT_EQ(program_rank_argv(*c, 0, {"x"}),
            (std::vector<std::string>{"python3", "-u", "-m", "pkg.train", "--local_rank=0", "x"}));
}

TEST_F(Program, NoPythonRunsTheFileItself) {
  // executable_resolve checks "./run.py" against this process's working directory.
  const fs::path before = fs::current_path();
  ASSERT_EQ(chdir(cwd_.c_str()), 0);
  Result<ProgramCommand> c = program_command("./run.py", ProgramMode::kNoPython, path_, cwd_);
  fs::current_path(before);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->argv, std::vector<std::string>{"./run.py"});
  EXPECT_FALSE(c->python);
  Result<ProgramCommand> not_exec =
      program_command((fs::path(cwd_) / "train.py").string(), ProgramMode::kNoPython, path_, cwd_);
  ASSERT_FALSE(not_exec.is_ok());
  EXPECT_NE(not_exec.status().message().find("--no_python"), std::string::npos);
}

TEST_F(Program, ExecutablesRunDirectlyFromPath) {
  Result<ProgramCommand> c = program_command("tool", ProgramMode::kDefault, path_, cwd_);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->exec_path, path_ + "/tool");
  EXPECT_EQ(program_rank_argv(*c, 2, {"train"}),
            (std::vector<std::string>{"tool", "--local_rank=2", "train"}));
}

TEST_F(Program, MissingScriptOrPythonAreClearErrors) {
  Result<ProgramCommand> c = program_command("nope.py", ProgramMode::kDefault, path_, cwd_);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("nope.py"), std::string::npos);
  EXPECT_NE(c.status().message().find(cwd_), std::string::npos);

  c = program_command("train.py", ProgramMode::kDefault, "/nonexistent", cwd_);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("python3"), std::string::npos) << c.status().message();

  c = program_command("-x.py", ProgramMode::kDefault, path_, cwd_);
  EXPECT_FALSE(c.is_ok());
  c = program_command("-m", ProgramMode::kModule, path_, cwd_);
  EXPECT_FALSE(c.is_ok());
}

TEST(ProgramMode, ModuleWithNoPythonIsRefused) {
  EXPECT_FALSE(program_mode(true, true).is_ok());
  EXPECT_EQ(*program_mode(true, false), ProgramMode::kModule);
  EXPECT_EQ(*program_mode(false, true), ProgramMode::kNoPython);
  EXPECT_EQ(*program_mode(false, false), ProgramMode::kDefault);
}

}  // namespace
}  // namespace zt::launcher
