// Tests of the launcher-environment parser (src/zt/comm/env.h): the variables each launcher sets
// (deepspeed/torchrun, Open MPI's, MVAPICH's and MPICH/Intel MPI hydra's mpirun, srun), as their
// documentation lists them, and the errors that name the variable at fault.
#include "zt/comm/env.h"

#include <gtest/gtest.h>

#include <map>

namespace zt {
namespace {

using Vars = std::map<std::string, std::string>;

Result<DistEnv> parse(const Vars& vars) {
  return dist_env_from([&](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

TEST(DistEnv, NothingSetIsOneProcess) {
  Result<DistEnv> env = parse({});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->source, DistSource::kSingleProcess);
  EXPECT_EQ(env->timeout, std::chrono::minutes(30));  // DeepSpeed's default
}

TEST(DistEnv, DeepSpeedLauncherVariables) {
  // deepspeed/launcher/launch.py sets these for each child.
  Result<DistEnv> env = parse({{"RANK", "5"},
                               {"WORLD_SIZE", "8"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_SIZE", "4"},
                               {"CROSS_RANK", "1"},
                               {"MASTER_ADDR", "10.1.2.3"},
                               {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_size, 4);
  EXPECT_EQ(env->master_addr, "10.1.2.3");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->source, DistSource::kRankEnv);
}

TEST(DistEnv, TorchrunLocalWorldSize) {
  Result<DistEnv> env = parse({{"RANK", "2"},
                               {"WORLD_SIZE", "4"},
                               {"LOCAL_RANK", "0"},
                               {"LOCAL_WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "node1"},
                               {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->local_size, 2);
}

TEST(DistEnv, OpenMpiVariables) {
  Result<DistEnv> env = parse({{"OMPI_COMM_WORLD_RANK", "3"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                               {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 3);
  EXPECT_EQ(env->source, DistSource::kOpenMpi);
  EXPECT_EQ(env->master_addr, "127.0.0.1");  // every rank on one host
}

TEST(DistEnv, OpenMpiOnSeveralHostsNeedsMasterAddr) {
  Result<DistEnv> env = parse({{"OMPI_COMM_WORLD_RANK", "3"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                               {"MASTER_PORT", "29500"}});
  ASSERT_FALSE(env.is_ok());
  EXPECT_NE(env.status().message().find("MASTER_ADDR"), std::string::npos);
}

TEST(DistEnv, SlurmVariablesWithSingleHostNodeList) {
  Result<DistEnv> env = parse({{"SLURM_PROCID", "1"},
                               {"SLURM_NTASKS", "2"},
                               {"SLURM_LOCALID", "1"},
                               {"SLURM_NODEID", "0"},
                               {"SLURM_TASKS_PER_NODE", "2"},
                               {"SLURM_NODELIST", "gpu017"},
                               {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 2);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_size, 2);
  EXPECT_EQ(env->master_addr, "gpu017");
  EXPECT_EQ(env->source, DistSource::kSlurm);
}

TEST(DistEnv, SlurmTasksPerNodeRunLengths) {
  // "3(x2),1": nodes 0 and 1 run 3 tasks, node 2 runs 1.
  Result<DistEnv> env = parse({{"SLURM_PROCID", "6"},
                               {"SLURM_NTASKS", "7"},
                               {"SLURM_LOCALID", "0"},
                               {"SLURM_NODEID", "2"},
                               {"SLURM_TASKS_PER_NODE", "3(x2),1"},
                               {"MASTER_ADDR", "n0"},
                               {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->local_size, 1);
  env = parse({{"SLURM_PROCID", "4"},
               {"SLURM_NTASKS", "7"},
               {"SLURM_LOCALID", "1"},
               {"SLURM_NODEID", "1"},
               {"SLURM_TASKS_PER_NODE", "3(x2),1"},
               {"MASTER_ADDR", "n0"},
               {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->local_size, 3);
}

TEST(DistEnv, SlurmSeveralHostsNeedMasterAddr) {
  Result<DistEnv> env = parse({{"SLURM_PROCID", "0"},
                               {"SLURM_NTASKS", "4"},
                               {"SLURM_LOCALID", "0"},
                               {"SLURM_NTASKS_PER_NODE", "2"},
                               {"SLURM_NODELIST", "gpu[017-018]"},
                               {"MASTER_PORT", "29500"}});
  ASSERT_FALSE(env.is_ok());
  EXPECT_NE(env.status().message().find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(env.status().message().find("gpu[017-018]"), std::string::npos);
}

TEST(DistEnv, RankEnvWinsOverSlurm) {
  // `zt launch --launcher slurm` sets RANK itself inside the srun step.
  Result<DistEnv> env = parse({{"SLURM_PROCID", "0"},
                               {"SLURM_NTASKS", "1"},
                               {"RANK", "1"},
                               {"WORLD_SIZE", "2"},
                               {"LOCAL_RANK", "1"},
                               {"MASTER_ADDR", "a"},
                               {"MASTER_PORT", "2"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->source, DistSource::kRankEnv);
}

// Each inconsistent environment is refused with a message naming the variable at fault.
struct BadCase {
  Vars vars;
  std::string must_name;
};

TEST(DistEnv, InconsistentEnvironmentsNameTheVariable) {
  const Vars ok = {{"RANK", "0"},
                   {"WORLD_SIZE", "2"},
                   {"LOCAL_RANK", "0"},
                   {"MASTER_ADDR", "h"},
                   {"MASTER_PORT", "5"}};
  auto with = [&](std::initializer_list<std::pair<const std::string, std::string>> changes,
                  std::initializer_list<std::string> removed = {}) {
    Vars v = ok;
    for (const auto& [k, val] : changes) v[k] = val;
    for (const std::string& k : removed) v.erase(k);
    return v;
  };
  const std::vector<BadCase> cases = {
      {with({{"RANK", "2"}}), "RANK=2"},
      {with({{"RANK", "-1"}}), "RANK=-1"},
      {with({{"RANK", "one"}}), "RANK='one'"},
      {with({{"WORLD_SIZE", "0"}}), "WORLD_SIZE=0"},
      {with({}, {"WORLD_SIZE"}), "WORLD_SIZE"},
      {with({}, {"RANK"}), "RANK"},
      {with({}, {"MASTER_PORT"}), "MASTER_PORT"},
      {with({{"MASTER_PORT", "70000"}}), "MASTER_PORT=70000"},
      {with({}, {"MASTER_ADDR"}), "MASTER_ADDR"},
      {with({}, {"LOCAL_RANK"}), "LOCAL_RANK"},
      {with({{"LOCAL_RANK", "2"}}), "LOCAL_RANK=2"},
      {with({{"ZT_COMM_TIMEOUT_S", "soon"}}), "ZT_COMM_TIMEOUT_S"},
      {with({{"DEEPSPEED_TIMEOUT", "-3"}}), "DEEPSPEED_TIMEOUT"},
  };
  for (const BadCase& c : cases) {
    Result<DistEnv> env = parse(c.vars);
    ASSERT_FALSE(env.is_ok()) << "accepted an environment that should name " << c.must_name;
    EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(env.status().message().find(c.must_name), std::string::npos)
        << "message '" << env.status().message() << "' does not name " << c.must_name;
  }
}

TEST(DistEnv, TimeoutVariables) {
  Result<DistEnv> env = parse({{"DEEPSPEED_TIMEOUT", "5"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->timeout, std::chrono::minutes(5));
  // ZT_COMM_TIMEOUT_S (seconds) wins over DEEPSPEED_TIMEOUT (minutes).
  env = parse({{"DEEPSPEED_TIMEOUT", "5"}, {"ZT_COMM_TIMEOUT_S", "2.5"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->timeout, std::chrono::milliseconds(2500));
}

TEST(DistEnv, JobToken) {
  Result<DistEnv> a = parse({{"RANK", "0"},
                             {"WORLD_SIZE", "2"},
                             {"LOCAL_RANK", "0"},
                             {"MASTER_ADDR", "h"},
                             {"MASTER_PORT", "5"}});
  Result<DistEnv> b = parse({{"RANK", "0"},
                             {"WORLD_SIZE", "2"},
                             {"LOCAL_RANK", "0"},
                             {"MASTER_ADDR", "h"},
                             {"MASTER_PORT", "6"}});
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE(a->job_token, b->job_token);  // derived from the port when the launcher set none
  Result<DistEnv> c = parse({{"ZT_JOB_TOKEN", "job-42"}});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->job_token, "job-42");
}

// MPICH's and Intel MPI's hydra give every rank PMI_RANK, PMI_SIZE, MPI_LOCALRANKID and
// MPI_LOCALNRANKS; DeepSpeed's mpich runner adds -genv
// MASTER_ADDR/MASTER_PORT/WORLD_SIZE/LOCAL_SIZE.
TEST(DistEnv, MpichHydraVariables) {
  Result<DistEnv> env = parse({{"PMI_RANK", "3"},
                               {"PMI_SIZE", "4"},
                               {"MPI_LOCALRANKID", "1"},
                               {"MPI_LOCALNRANKS", "2"},
                               {"WORLD_SIZE", "4"},
                               {"LOCAL_SIZE", "2"},
                               {"MASTER_ADDR", "10.0.0.1"},
                               {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_size, 2);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->source, DistSource::kPmi);
}

TEST(DistEnv, MvapichVariables) {
  Result<DistEnv> env = parse({{"MV2_COMM_WORLD_RANK", "2"},
                               {"MV2_COMM_WORLD_SIZE", "4"},
                               {"MV2_COMM_WORLD_LOCAL_RANK", "0"},
                               {"MV2_COMM_WORLD_LOCAL_SIZE", "2"},
                               // MVAPICH's hydra sets these too; MV2_* win
                               {"PMI_RANK", "2"},
                               {"PMI_SIZE", "4"},
                               {"MASTER_ADDR", "n0"},
                               {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_size, 2);
  EXPECT_EQ(env->source, DistSource::kMvapich);
}

TEST(DistEnv, MpiRanksNeedMasterAddrAndPortNamed) {
  const Vars pmi = {
      {"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}};
  Vars no_addr = pmi;
  no_addr["MASTER_PORT"] = "29500";
  Result<DistEnv> env = parse(no_addr);
  ASSERT_FALSE(env.is_ok());
  EXPECT_NE(env.status().message().find("MASTER_ADDR is not set"), std::string::npos)
      << env.status().message();
  Vars no_port = pmi;
  no_port["MASTER_ADDR"] = "h";
  env = parse(no_port);
  ASSERT_FALSE(env.is_ok());
  EXPECT_NE(env.status().message().find("MASTER_PORT is not set"), std::string::npos);
  Vars mv2 = {{"MV2_COMM_WORLD_RANK", "1"},
              {"MV2_COMM_WORLD_SIZE", "2"},
              {"MV2_COMM_WORLD_LOCAL_RANK", "1"},
              {"MV2_COMM_WORLD_LOCAL_SIZE", "2"},
              {"MASTER_PORT", "1"}};
  env = parse(mv2);
  ASSERT_FALSE(env.is_ok());
  EXPECT_NE(env.status().message().find("MASTER_ADDR"), std::string::npos);
  // A world of one needs neither.
  env = parse(
      {{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "1"}});
  ASSERT_TRUE(env.is_ok()) << env.status().message();
  EXPECT_EQ(env->world_size, 1);
}

TEST(DistEnv, ExportedWorldSizeMustAgreeWithTheMpi) {
  Result<DistEnv> env = parse({{"PMI_RANK", "0"},
                               {"PMI_SIZE", "4"},
                               {"MPI_LOCALRANKID", "0"},
                               {"MPI_LOCALNRANKS", "2"},
                               {"WORLD_SIZE", "8"},
                               {"MASTER_ADDR", "h"},
                               {"MASTER_PORT", "1"}});
  ASSERT_FALSE(env.is_ok());
  EXPECT_NE(env.status().message().find("WORLD_SIZE=8"), std::string::npos);
  EXPECT_NE(env.status().message().find("PMI_SIZE=4"), std::string::npos);
}

// srun's PMI plugins set PMI_RANK without hydra's MPI_LOCALRANKID: SLURM's numbering is read.
// Under hydra inside a SLURM allocation the proxies are srun tasks, so hydra's numbering wins.
TEST(DistEnv, PmiUnderSrunAndHydraUnderSlurm) {
  Result<DistEnv> srun = parse({{"PMI_RANK", "1"},
                                {"PMI_SIZE", "2"},
                                {"SLURM_PROCID", "1"},
                                {"SLURM_NTASKS", "2"},
                                {"SLURM_LOCALID", "1"},
                                {"SLURM_NTASKS_PER_NODE", "2"},
                                {"SLURM_NODELIST", "n1"},
                                {"MASTER_PORT", "1"}});
  ASSERT_TRUE(srun.is_ok()) << srun.status().message();
  EXPECT_EQ(srun->source, DistSource::kSlurm);
  Result<DistEnv> hydra = parse({{"PMI_RANK", "3"},
                                 {"PMI_SIZE", "4"},
                                 {"MPI_LOCALRANKID", "1"},
                                 {"MPI_LOCALNRANKS", "2"},
                                 {"SLURM_PROCID", "1"},
                                 {"SLURM_NTASKS", "2"},
                                 {"SLURM_LOCALID", "0"},
                                 {"SLURM_NTASKS_PER_NODE", "1"},
                                 {"MASTER_ADDR", "n0"},
                                 {"MASTER_PORT", "1"}});
  ASSERT_TRUE(hydra.is_ok()) << hydra.status().message();
  EXPECT_EQ(hydra->source, DistSource::kPmi);
  EXPECT_EQ(hydra->rank, 3);
}

TEST(DistEnv, SlurmSingleHost) {
  EXPECT_EQ(slurm_single_host("node07"), "node07");
  EXPECT_EQ(slurm_single_host("node[07-09]"), "");
  EXPECT_EQ(slurm_single_host("a,b"), "");
  EXPECT_EQ(slurm_single_host(""), "");
}

}  // namespace
}  // namespace zt
