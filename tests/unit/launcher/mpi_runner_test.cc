// The MPI and SLURM command lines against the ones DeepSpeed's multinode_runner.py builds
// (reference §5: `mpirun -n N -hostfile H --mca btl ^openib --mca btl_tcp_if_include eth0
// -x UCX_TLS=tcp -x K=V python -u script`, `srun -n N --export=ALL,...`, mpich/impi with -genv,
// -ppn and -hosts), with the documented deviations of mpi_runner.h, and DeepSpeed's refusals.
#include "zt/launcher/mpi_runner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "zt/launcher/process_group.h"

namespace zt::launcher {
namespace {

using Words = std::vector<std::string>;

WorldInfo two_hosts(int a_slots, int b_slots) {
  WorldInfo w;
  HostSlots a{"worker-0", {}};
  HostSlots b{"worker-1", {}};
  for (int i = 0; i < a_slots; ++i) a.slots.push_back(i);
  for (int i = 0; i < b_slots; ++i) b.slots.push_back(i);
  w.hosts = {a, b};
  w.kind = SlotKind::kGpu;
  w.master_addr = "10.0.0.1";
  return w;
}

MpiCommandInputs inputs(const std::string& runner, const LaunchOptions& o, const WorldInfo& w) {
  MpiCommandInputs in;
  in.runner = runner;
  in.options = &o;
  in.world = &w;
  in.exports = {{"NCCL_DEBUG", "INFO"}, {"PYTHONPATH", "/work"}};
  in.program_argv = {"python3", "-u", "train.py", "--deepspeed"};
  in.job_token = "secret-token";
  in.hostfile_path = "/tmp/hf";
  return in;
}

std::string value_of(const std::vector<ExportedVar>& vars, const std::string& key) {
  for (const ExportedVar& v : vars) {
    if (v.key == key) return v.value;
  }
  return "<unset>";
}

bool mentions(const Words& argv, const std::string& text) {
  for (const std::string& w : argv) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(MpiCommand, OpenMpiAsDeepSpeed) {
  LaunchOptions o;
  o.master_port = 29501;
  WorldInfo w = two_hosts(2, 2);
  Result<MpiCommand> c = mpi_command(inputs("openmpi", o, w));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Words expected = {"mpirun",
                    "-n",
                    "4",
                    "-hostfile",
                    "/tmp/hf",
                    "--mca",
                    "btl",
                    "^openib",
                    "--mca",
                    "btl_tcp_if_include",
                    "eth0",
                    "-x",
                    "UCX_TLS=tcp",
                    "-x",
                    "NCCL_DEBUG=INFO",
                    "-x",
                    "PYTHONPATH=/work",
                    "-x",
                    "MASTER_ADDR=10.0.0.1",
                    "-x",
                    "MASTER_PORT=29501",
                    "-x",
                    "ZT_JOB_TOKEN",
                    "python3",
                    "-u",
                    "train.py",
                    "--deepspeed"};
  EXPECT_EQ(c->argv, expected);
  EXPECT_EQ(c->hostfile_text, "worker-0 slots=2\nworker-1 slots=2\n");
  EXPECT_EQ(value_of(c->process_env, "ZT_JOB_TOKEN"), "secret-token");
  EXPECT_FALSE(mentions(c->argv, "secret-token"));
}

TEST(MpiCommand, OpenMpiLauncherArgsGoBeforeExportsAndMayReplaceEth0) {
  LaunchOptions o;
  o.launcher_args = {"--allow-run-as-root", "--mca", "btl_tcp_if_include", "lo"};
  WorldInfo w = two_hosts(1, 3);  // Open MPI takes uneven hosts
  MpiCommandInputs in = inputs("openmpi", o, w);
  in.exports = {{"UCX_TLS", "rc"}, {"V", "a b,$(x)"}};
  Result<MpiCommand> c = mpi_command(in);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Words expected = {"mpirun", "-n", "4", "-hostfile", "/tmp/hf", "--mca", "btl", "^openib",
                    "--allow-run-as-root", "--mca", "btl_tcp_if_include", "lo",
                    // the user's UCX_TLS replaces DeepSpeed's default; values stay one word
                    "-x", "UCX_TLS=rc", "-x", "V=a b,$(x)", "-x", "MASTER_ADDR=10.0.0.1", "-x",
                    "MASTER_PORT=29500", "-x", "ZT_JOB_TOKEN", "python3", "-u", "train.py",
                    "--deepspeed"};
  EXPECT_EQ(c->argv, expected);
  EXPECT_EQ(c->hostfile_text, "worker-0 slots=1\nworker-1 slots=3\n");
}

TEST(MpiCommand, MpichAsDeepSpeedWithHydraGenv) {
  LaunchOptions o;
  WorldInfo w = two_hosts(2, 2);
  Result<MpiCommand> c = mpi_command(inputs("mpich", o, w));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Words expected = {"mpirun",       "-n",       "4",
                    "-ppn",         "2",        "-genv",
                    "NCCL_DEBUG",   "INFO",     "-genv",
                    "PYTHONPATH",   "/work",    "-genv",
                    "MASTER_ADDR",  "10.0.0.1", "-genv",
                    "MASTER_PORT",  "29500",    "-genv",
                    "WORLD_SIZE",   "4",        "-genv",
                    "LOCAL_SIZE",   "2",        "-genvlist",
                    "ZT_JOB_TOKEN", "-hosts",   "worker-0,worker-1",
                    "python3",      "-u",       "train.py",
                    "--deepspeed"};
  EXPECT_EQ(c->argv, expected);
  EXPECT_EQ(c->hostfile_text, "");
}

TEST(MpiCommand, IntelMpiOneSegmentPerRank) {
  LaunchOptions o;
  o.launcher_args = {"-l"};
  WorldInfo w = two_hosts(2, 2);
  MpiCommandInputs in = inputs("impi", o, w);
  in.exports = {};
  in.program_argv = {"zt", "train"};
  Result<MpiCommand> c = mpi_command(in);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Words expected = {"mpirun",
                    "-ppn",
                    "2",
                    "-l",
                    "-genv",
                    "MASTER_ADDR",
                    "10.0.0.1",
                    "-genv",
                    "MASTER_PORT",
                    "29500",
                    "-genv",
                    "WORLD_SIZE",
                    "4",
                    "-genv",
                    "LOCAL_SIZE",
                    "2",
                    "-genvlist",
                    "ZT_JOB_TOKEN",
                    "-genv",
                    "I_MPI_PIN",
                    "0",
                    "-hosts",
                    "worker-0,worker-1",
                    "-n",
                    "1",
                    "-env",
                    "RANK",
                    "0",
                    "-env",
                    "LOCAL_RANK",
                    "0",
                    "zt",
                    "train",
                    ":",
                    "-n",
                    "1",
                    "-env",
                    "RANK",
                    "1",
                    "-env",
                    "LOCAL_RANK",
                    "1",
                    "zt",
                    "train",
                    ":",
                    "-n",
                    "1",
                    "-env",
                    "RANK",
                    "2",
                    "-env",
                    "LOCAL_RANK",
                    "0",
                    "zt",
                    "train",
                    ":",
                    "-n",
                    "1",
                    "-env",
                    "RANK",
                    "3",
                    "-env",
                    "LOCAL_RANK",
                    "1",
                    "zt",
                    "train"};
  EXPECT_EQ(c->argv, expected);
}

TEST(MpiCommand, MvapichWithItsDefaults) {
  LaunchOptions o;
  WorldInfo w = two_hosts(1, 1);
  MpiCommandInputs in = inputs("mvapich", o, w);
  in.exports = {{"MV2_ENABLE_AFFINITY", "1"}};
  in.program_argv = {"zt"};
  Result<MpiCommand> c = mpi_command(in);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Words expected = {"mpirun",
                    "-np",
                    "2",
                    "-ppn",
                    "1",
                    "--hostfile",
                    "/tmp/hf",
                    "-env",
                    "MV2_SMP_USE_CMA",
                    "0",
                    "-env",
                    "MV2_DEBUG_SHOW_BACKTRACE",
                    "1",
                    "-env",
                    "MV2_USE_CUDA",
                    "1",
                    "-env",
                    "MV2_SUPPORT_DL",
                    "1",
                    "-env",
                    "MV2_ENABLE_AFFINITY",
                    "1",  // the user's value wins
                    "-env",
                    "MV2_INTER_ALLGATHER_TUNING",
                    "5",
                    "-env",
                    "MV2_CUDA_USE_NAIVE",
                    "0",
                    "-env",
                    "MASTER_ADDR",
                    "10.0.0.1",
                    "-env",
                    "MASTER_PORT",
                    "29500",
                    "-genvlist",
                    "ZT_JOB_TOKEN",
                    "zt"};
  EXPECT_EQ(c->argv, expected);
  EXPECT_EQ(c->hostfile_text, "worker-0\nworker-1\n");
}

TEST(MpiCommand, SlurmAsDeepSpeed) {
  LaunchOptions o;
  o.launcher_args = {"--partition", "gpu"};
  WorldInfo w = two_hosts(2, 2);
  MpiCommandInputs in = inputs("slurm", o, w);
  in.exports = {{"NCCL_DEBUG", "INFO"}, {"UCX_NET_DEVICES", "mlx5_0:1,mlx5_1:1"}};
  Result<MpiCommand> c = mpi_command(in);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Words expected = {
      "srun",        "-n",  "4",
      "--partition", "gpu", "--export=ALL,NCCL_DEBUG=INFO,MASTER_ADDR=10.0.0.1,MASTER_PORT=29500",
      "python3",     "-u",  "train.py",
      "--deepspeed"};
  EXPECT_EQ(c->argv, expected);
  // The value with a ',' and the token travel in srun's environment (--export=ALL).
  EXPECT_EQ(value_of(c->process_env, "UCX_NET_DEVICES"), "mlx5_0:1,mlx5_1:1");
  EXPECT_EQ(value_of(c->process_env, "ZT_JOB_TOKEN"), "secret-token");
}

TEST(MpiCommand, SlurmFiltersBecomeTheFilteredNodeList) {
  LaunchOptions o;
  o.include = "worker-1";
  WorldInfo w = two_hosts(2, 2);
  w.hosts.erase(w.hosts.begin());  // what --include worker-1 leaves
  Result<MpiCommand> c = mpi_command(inputs("slurm", o, w));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  Words head(c->argv.begin(), c->argv.begin() + 6);
  EXPECT_EQ(head,
            (Words{"srun", "-n", "2", "--nodelist=worker-1", "--nodes=1", "--ntasks-per-node=2"}));
}

TEST(MpiOptionsCheck, DeepSpeedRefusals) {
  WorldInfo even = two_hosts(2, 2);
  WorldInfo uneven = two_hosts(2, 1);
  for (const char* runner : {"openmpi", "mpich", "impi", "mvapich"}) {
    LaunchOptions inc;
    inc.include = "worker-0";
    Status s = mpi_options_check(runner, inc, even);
    ASSERT_FALSE(s.is_ok()) << runner;
    EXPECT_NE(s.message().find(std::string(runner) +
                               " backend does not support worker include/exclusion"),
              std::string::npos)
        << s.message();
    LaunchOptions exc;
    exc.exclude = "worker-1:0";
    EXPECT_FALSE(mpi_options_check(runner, exc, even).is_ok()) << runner;
    LaunchOptions nodes;
    nodes.num_nodes = 1;
    s = mpi_options_check(runner, nodes, even);
    ASSERT_FALSE(s.is_ok()) << runner;
    EXPECT_NE(s.message().find("does not support limiting num nodes/gpus"), std::string::npos);
    LaunchOptions gpus;
    gpus.num_gpus = 1;
    EXPECT_FALSE(mpi_options_check(runner, gpus, even).is_ok()) << runner;
    EXPECT_TRUE(mpi_options_check(runner, LaunchOptions{}, even).is_ok()) << runner;
  }
  EXPECT_TRUE(mpi_options_check("openmpi", LaunchOptions{}, uneven).is_ok());
  EXPECT_NE(mpi_options_check("mpich", LaunchOptions{}, uneven)
                .message()
                .find("MPICH requires same number of devices per node"),
            std::string::npos);
  EXPECT_NE(mpi_options_check("impi", LaunchOptions{}, uneven)
                .message()
                .find("Intel MPI requires same number of devices per node"),
            std::string::npos);
  EXPECT_NE(mpi_options_check("mvapich", LaunchOptions{}, uneven)
                .message()
                .find("mvapich requires same number of devices per node"),
            std::string::npos);
  LaunchOptions inc;
  inc.include = "worker-0";
  EXPECT_TRUE(mpi_options_check("slurm", inc, uneven).is_ok());
  WorldInfo hostile = two_hosts(1, 1);
  hostile.hosts[1].host = "-oProxyCommand=touch /tmp/x";
  Status bad_host = mpi_options_check("openmpi", LaunchOptions{}, hostile);
  ASSERT_FALSE(bad_host.is_ok());
  EXPECT_NE(bad_host.message().find("-oProxyCommand"), std::string::npos) << bad_host.message();
  LaunchOptions bind;
  bind.bind_cores_to_rank = true;
  EXPECT_FALSE(mpi_options_check("openmpi", bind, even).is_ok());
}

TEST(MpiCommand, NoMasterAddressIsAnError) {
  LaunchOptions o;
  WorldInfo w = two_hosts(1, 1);
  w.master_addr.clear();
  Result<MpiCommand> c = mpi_command(inputs("openmpi", o, w));
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("--master_addr"), std::string::npos);
}

TEST(MpiRunnerCreate, KnowsTheFiveNames) {
  for (const char* n : {"openmpi", "mpich", "impi", "mvapich", "slurm"}) {
    EXPECT_TRUE(is_mpi_runner(n)) << n;
    Result<std::unique_ptr<Runner>> r = mpi_runner_create(n);
    ASSERT_TRUE(r.is_ok()) << n;
    EXPECT_EQ((*r)->name(), n);
  }
  EXPECT_FALSE(is_mpi_runner("pdsh"));
  EXPECT_FALSE(mpi_runner_create("ssh").is_ok());
}

// A real MPI, when installed (Debian's openmpi-bin, mpich): two ranks on this machine get the
// exported environment byte for byte from mpirun (the oracle is what the rank processes see in
// /proc/self/environ, and the MPI's own rank variables), and a failing rank's exit code comes
// back as the launcher's.
class RealMpiRun : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    runner_ = GetParam();
    Result<std::string> mpirun = mpi_backend_resolve(runner_, environ_copy());
    if (!mpirun) GTEST_SKIP() << mpirun.status().message();
    dir_ = std::filesystem::temp_directory_path() /
           ("zt_mpi_run_" + std::to_string(getpid()) + "_" + runner_ + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_ / "");
    std::filesystem::create_directories(dir_);
    world_.hosts = {HostSlots{"localhost", {0, 1}}};
    world_.kind = SlotKind::kCpu;
    world_.master_addr = "127.0.0.1";
    options_.launcher = runner_;
    options_.master_port = 29555;
    if (runner_ == "openmpi") {
      // Open MPI's own rule for root, which the runner leaves to the user (mpi_runner.h).
      if (geteuid() == 0) options_.launcher_args = {"--allow-run-as-root"};
      options_.launcher_args.insert(options_.launcher_args.end(),
                                    {"--mca", "btl_tcp_if_include", "lo"});
    }
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // The variable holding the rank's number under this MPI.
  std::string rank_var() const {
    return runner_ == "openmpi" ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK";
  }
  LaunchJob job(std::vector<std::string> base_env) {
    LaunchJob j;
    j.options = &options_;
    j.world = &world_;
    j.base_env = std::move(base_env);
    j.cwd = dir_.string();
    j.home = "";
    j.job_token = "tok-123";
    j.group_options.grace = std::chrono::milliseconds(2000);
    return j;
  }
  static std::map<std::string, std::string> environ_of(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    std::string text = s.str();
    std::map<std::string, std::string> m;
    size_t start = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '\0') continue;
      std::string kv = text.substr(start, i - start);
      size_t eq = kv.find('=');
      if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
      start = i + 1;
    }
    return m;
  }
  std::string runner_;
  std::filesystem::path dir_;
  WorldInfo world_;
  LaunchOptions options_;
};

TEST_P(RealMpiRun, RanksGetTheExportedEnvironment) {
  const std::string hostile = "a b\"'$(touch pwned),;`x`";
  std::ofstream(dir_ / ".deepspeed_env") << "FROM_FILE=" << hostile << "\n";
  options_.program = "sh";
  options_.program_args = {"-c", "cat /proc/self/environ > env.$" + rank_var()};
  std::vector<std::string> env = environ_copy();
  env_set(env, "NCCL_ZT_TEST", "x y");
  env_set(env, "NOT_EXPORTED_ZT_TEST", "1");
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir_);  // where mpirun starts the ranks
  Result<std::unique_ptr<Runner>> runner = mpi_runner_create(runner_);
  ASSERT_TRUE(runner.is_ok());
  Result<JobOutcome> out = (*runner)->run(job(env));
  std::filesystem::current_path(before);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(out->exit_code, 0) << out->message;
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, std::string> m = environ_of(dir_ / ("env." + std::to_string(r)));
    ASSERT_FALSE(m.empty()) << "rank " << r << " wrote no environment";
    EXPECT_EQ(m[rank_var()], std::to_string(r));
    EXPECT_EQ(m["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(m["MASTER_PORT"], "29555");
    EXPECT_EQ(m["ZT_JOB_TOKEN"], "tok-123");
    EXPECT_EQ(m["NCCL_ZT_TEST"], "x y");
    EXPECT_EQ(m["FROM_FILE"], hostile);
    EXPECT_EQ(m["PYTHONPATH"].substr(0, dir_.string().size()), dir_.string());
    if (runner_ == "openmpi") {
      EXPECT_EQ(m["UCX_TLS"], "tcp");
    }
    if (runner_ == "mpich") {
      EXPECT_EQ(m["WORLD_SIZE"], "2");
      EXPECT_EQ(m["LOCAL_SIZE"], "2");
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "pwned"));
}

TEST_P(RealMpiRun, FailingRankCodeIsTheLaunchersCode) {
  options_.program = "sh";
  // Open MPI's mpirun stops the job at the first non-zero exit; MPICH's hydra only at a rank
  // killed by a signal and otherwise waits for the others (mpi_runner.h), so there the other
  // rank ends by itself.
  const bool stops_others = runner_ == "openmpi";
  options_.program_args = {"-c", "[ $" + rank_var() + " = 1 ] && exit 7; sleep " +
                                     std::string(stops_others ? "30" : "1")};
  Result<std::unique_ptr<Runner>> runner = mpi_runner_create(runner_);
  ASSERT_TRUE(runner.is_ok());
  auto t0 = std::chrono::steady_clock::now();
  Result<JobOutcome> out = (*runner)->run(job(environ_copy()));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  EXPECT_EQ(out->exit_code, 7) << out->message;
  EXPECT_NE(out->message.find(runner_), std::string::npos) << out->message;
  if (stops_others) {
    EXPECT_LT(took, 20.0) << "mpirun did not stop the other rank";
  }
}

INSTANTIATE_TEST_SUITE_P(Installed, RealMpiRun, ::testing::Values("openmpi", "mpich"));

TEST(OpenMpiRoot, WithoutAllowRunAsRootIsRefusedBeforeStarting) {
  if (geteuid() != 0) GTEST_SKIP() << "only root is refused";
  WorldInfo world;
  world.hosts = {HostSlots{"localhost", {0, 1}}};
  world.kind = SlotKind::kCpu;
  world.master_addr = "127.0.0.1";
  LaunchOptions options;
  options.program = "true";
  LaunchJob job;
  job.options = &options;
  job.world = &world;
  job.base_env = environ_copy();
  std::erase_if(job.base_env,
                [](const std::string& kv) { return kv.starts_with("OMPI_ALLOW_RUN_AS_ROOT"); });
  if (!mpi_backend_resolve("openmpi", job.base_env)) GTEST_SKIP() << "Open MPI is not installed";
  Result<JobOutcome> out = (*mpi_runner_create("openmpi"))->run(job);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("--allow-run-as-root"), std::string::npos);
}

TEST(MpiBackendResolve, MissingProgramNamesTheDebianPackage) {
  Result<std::string> r = mpi_backend_resolve("slurm", {"PATH=/nonexistent"});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("slurm-client"), std::string::npos) << r.status().message();
  r = mpi_backend_resolve("openmpi", {"PATH=/nonexistent"});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("openmpi-bin"), std::string::npos);
}

}  // namespace
}  // namespace zt::launcher
