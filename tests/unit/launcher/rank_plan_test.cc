// The environment and arguments each rank gets, against DeepSpeed launch.py's formulas
// (reference §5): RANK counts slots host by host, LOCAL_RANK = RANK % LOCAL_SIZE, CROSS_RANK is
// the node index, CUDA_VISIBLE_DEVICES the node's whole slot list, `--local_rank=N` first. The
// spawned ranks print what they really received (a #! script running `env`).
#include "zt/launcher/rank_plan.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace zt::launcher {
namespace {

std::map<std::string, std::string> env_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const std::string& e : env) {
    size_t eq = e.find('=');
    if (eq != std::string::npos) m[e.substr(0, eq)] = e.substr(eq + 1);
  }
  return m;
}

TEST(LauncherRankPlan, SpawnedRanksSeeDeepSpeedsEnvironment) {
  char dir_template[] = "/tmp/zt_rank_plan_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string script = dir + "/show.sh";
  { std::ofstream(script) << "#!/bin/sh\necho \"ARGS $*\"\nenv\n"; }
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);

  LaunchOptions o;
  o.program = script;
  o.program_args = {"a", "b c"};
  o.master_port = 29511;
  WorldInfo world{
      .hosts = {{"localhost", {0, 2, 3}}}, .kind = SlotKind::kGpu, .master_addr = "127.0.0.1"};
  std::vector<std::string> base = environ_copy();
  env_set(base, "ZT_TEST_MARK", "kept");
  env_set(base, "CUDA_VISIBLE_DEVICES", "7");
  env_set(base, "OMP_NUM_THREADS", "untouched");
  const std::string token = job_token_new();
  NodePlanInputs in{.options = &o,
                    .world = &world,
                    .node_rank = 0,
                    .base_env = base,
                    .program = ProgramCommand{.exec_path = script, .argv = {o.program}},
                    .job_token = token,
                    .log_prefix = dir + "/20250101000000",
                    .rank_cpus = {}};
  std::vector<ProcessSpec> specs = node_process_specs(in);
  ASSERT_EQ(specs.size(), 3u);
  Result<std::unique_ptr<ProcessGroup>> group = ProcessGroup::start(specs, {});
  ASSERT_TRUE(group.is_ok()) << group.status().message();
  ASSERT_EQ((*group)->wait().exit_code, 0);

  for (int rank = 0; rank < 3; ++rank) {
    const std::string log = dir + "/20250101000000_rank" + std::to_string(rank) + ".log";
    EXPECT_EQ(specs[static_cast<size_t>(rank)].log_path, log);
    std::ifstream in_log(log);
    ASSERT_TRUE(in_log.good()) << log;
    std::string args_line;
    std::getline(in_log, args_line);
    EXPECT_EQ(args_line, "ARGS --local_rank=" + std::to_string(rank) + " a b c");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in_log, line);) lines.push_back(line);
    auto env = env_map(lines);
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_SIZE"], "3");
    EXPECT_EQ(env["CROSS_RANK"], "0");
    EXPECT_EQ(env["CROSS_SIZE"], "1");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "29511");
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "0,2,3");  // the whole list; LOCAL_RANK picks
    EXPECT_EQ(env["ZT_JOB_TOKEN"], token);
    EXPECT_EQ(env["ZT_TEST_MARK"], "kept");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "untouched");  // no core binding asked
  }
  std::filesystem::remove_all(dir);
}

TEST(LauncherRankPlan, CpuRanksKeepCudaVisibleDevicesAndNoLocalRankDropsTheFlag) {
  LaunchOptions o;
  o.program = "prog";
  o.program_args = {"--x"};
  o.no_local_rank = true;
  WorldInfo world{
      .hosts = {{"localhost", {0, 1}}}, .kind = SlotKind::kCpu, .master_addr = "127.0.0.1"};
  std::vector<std::string> base = {"CUDA_VISIBLE_DEVICES=5", "PATH=/bin"};
  NodePlanInputs in{.options = &o,
                    .world = &world,
                    .node_rank = 0,
                    .base_env = base,
                    .program = ProgramCommand{.exec_path = "/bin/prog", .argv = {o.program}},
                    .job_token = "t",
                    .log_prefix = "",
                    .rank_cpus = {{0, 1}, {2, 3}}};
  std::vector<ProcessSpec> specs = node_process_specs(in);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].argv, (std::vector<std::string>{"prog", "--x"}));
  EXPECT_EQ(specs[1].label, "rank 1");
  EXPECT_TRUE(specs[1].log_path.empty());
  EXPECT_EQ(specs[1].cpus, (std::vector<int>{2, 3}));
  auto env = env_map(specs[1].env);
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "5");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "2");
  EXPECT_EQ(env["RANK"], "1");
}

TEST(LauncherRankPlan, SecondNodeOfUnevenWorld) {
  // DeepSpeed launch.py: global ranks count host by host; LOCAL_RANK = RANK % LOCAL_SIZE, which
  // rotates on uneven nodes (ranks 3,4 on a 2-slot node get local ranks 1,0).
  LaunchOptions o;
  o.program = "p";
  WorldInfo world{.hosts = {{"a", {0, 1, 2}}, {"b", {4, 6}}},
                  .kind = SlotKind::kGpu,
                  .master_addr = "10.0.0.1"};
  NodePlanInputs in{.options = &o,
                    .world = &world,
                    .node_rank = 1,
                    .base_env = {},
                    .program = ProgramCommand{.exec_path = "/p", .argv = {o.program}},
                    .job_token = "t",
                    .log_prefix = "",
                    .rank_cpus = {}};
  std::vector<ProcessSpec> specs = node_process_specs(in);
  ASSERT_EQ(specs.size(), 2u);
  auto e0 = env_map(specs[0].env);
  auto e1 = env_map(specs[1].env);
  EXPECT_EQ(e0["RANK"], "3");
  EXPECT_EQ(e0["LOCAL_RANK"], "1");
  EXPECT_EQ(e1["RANK"], "4");
  EXPECT_EQ(e1["LOCAL_RANK"], "0");
  EXPECT_EQ(e0["WORLD_SIZE"], "5");
  EXPECT_EQ(e0["CROSS_RANK"], "1");
  EXPECT_EQ(e0["CROSS_SIZE"], "2");
  EXPECT_EQ(e0["LOCAL_SIZE"], "2");
  EXPECT_EQ(e0["CUDA_VISIBLE_DEVICES"], "4,6");
  EXPECT_EQ(specs[0].argv, (std::vector<std::string>{"p", "--local_rank=1"}));
}

TEST(LauncherRankPlan, JobTokensAreFreshHex) {
  std::string a = job_token_new();
  std::string b = job_token_new();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace zt::launcher
