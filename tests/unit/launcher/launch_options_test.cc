// `zt launch` flag parsing: DeepSpeed's runner flags (reference §5) with argparse's rules for
// values (`--f v`, `--f=v`, `-Hv`), flags before PROGRAM, and the rest passed on untouched.
#include "zt/launcher/launch_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zt::launcher {
namespace {

using Args = std::vector<std::string>;

LaunchOptions parse_ok(const Args& args) {
  Result<LaunchOptions> r = launch_options_parse(args);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : LaunchOptions{};
}

std::string parse_error(const Args& args) {
  Result<LaunchOptions> r = launch_options_parse(args);
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? "" : r.status().message();
}

TEST(LauncherOptions, Defaults) {
  LaunchOptions o = parse_ok({"./train"});
  EXPECT_EQ(o.hostfile, "/job/hostfile");
  EXPECT_FALSE(o.hostfile_given);
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.num_gpus, -1);
  EXPECT_EQ(o.num_nodes, -1);
  EXPECT_EQ(o.num_procs, -1);
  EXPECT_EQ(o.launcher, "local");
  EXPECT_FALSE(o.no_local_rank);
  EXPECT_EQ(o.program, "./train");
  EXPECT_TRUE(o.program_args.empty());
}

TEST(LauncherOptions, ValueForms) {
  LaunchOptions o = parse_ok({"-H", "hf", "--num_gpus=2", "--master_port", "1234", "-ilocalhost:0",
                              "--master_addr=10.0.0.1", "--enable_each_rank_log", "logs", "prog"});
  EXPECT_EQ(o.hostfile, "hf");
  EXPECT_TRUE(o.hostfile_given);
  EXPECT_EQ(o.num_gpus, 2);
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.include, "localhost:0");
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.each_rank_log_dir, "logs");
  EXPECT_EQ(parse_ok({"--num_accelerators", "3", "p"}).num_gpus, 3);
  EXPECT_EQ(parse_ok({"--hostfile=x", "p"}).hostfile, "x");
  EXPECT_EQ(parse_ok({"-e", "localhost:1", "p"}).exclude, "localhost:1");
  EXPECT_EQ(parse_ok({"--num_procs", "+4", "p"}).num_procs, 4);
  EXPECT_EQ(parse_ok({"--num_gpus", "-1", "p"}).num_gpus, -1);  // DeepSpeed's "not given"
}

TEST(LauncherOptions, Switches) {
  LaunchOptions o = parse_ok({"--no_local_rank", "--no_python", "--save_pid",
                              "--bind_cores_to_rank", "--bind_core_list", "0-3", "--no_ssh_check",
                              "--ssh_port", "22", "--launcher", "LOCAL", "p"});
  EXPECT_TRUE(o.no_local_rank);
  EXPECT_TRUE(o.no_python);
  EXPECT_TRUE(o.save_pid);
  EXPECT_TRUE(o.bind_cores_to_rank);
  EXPECT_EQ(o.bind_core_list, "0-3");
  EXPECT_EQ(o.launcher, "LOCAL");
  EXPECT_TRUE(o.launcher_given);
}

TEST(LauncherOptions, EverythingAfterProgramIsPassedOnUntouched) {
  LaunchOptions o = parse_ok({"--num_procs", "2", "./train", "--num_gpus", "8", "-H", "--", "x"});
  EXPECT_EQ(o.program, "./train");
  EXPECT_EQ(o.program_args, (Args{"--num_gpus", "8", "-H", "--", "x"}));
  EXPECT_EQ(o.num_gpus, -1);
  // "--" ends the flags, so PROGRAM may start with '-'.
  LaunchOptions dashed = parse_ok({"--num_procs", "1", "--", "-weird", "--help"});
  EXPECT_EQ(dashed.program, "-weird");
  EXPECT_EQ(dashed.program_args, (Args{"--help"}));
  EXPECT_FALSE(dashed.help);
}

TEST(LauncherOptions, Help) {
  EXPECT_TRUE(parse_ok({"--help"}).help);
  EXPECT_TRUE(parse_ok({"--num_gpus", "1", "-h"}).help);
  std::string usage = launch_usage();
  for (const char* flag :
       {"--hostfile", "--include", "--exclude", "--num_gpus", "--num_procs", "--master_port",
        "--no_local_rank", "--enable_each_rank_log", "--bind_cores_to_rank", "ZT_LAUNCH_GRACE_S"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << flag;
  }
}

TEST(LauncherOptions, Errors) {
  EXPECT_NE(parse_error({}).find("PROGRAM"), std::string::npos);
  EXPECT_NE(parse_error({"--num_gpus", "2"}).find("PROGRAM"), std::string::npos);
  EXPECT_NE(parse_error({"--bogus", "p"}).find("unrecognized argument: --bogus"),
            std::string::npos);
  EXPECT_NE(parse_error({"--num_gp", "2", "p"}).find("unrecognized"), std::string::npos);
  EXPECT_NE(parse_error({"--num_gpus"}).find("expected one argument"), std::string::npos);
  EXPECT_NE(parse_error({"--num_gpus", "two", "p"}).find("invalid int value: 'two'"),
            std::string::npos);
  EXPECT_NE(parse_error({"--num_gpus", "0", "p"}).find("--num_procs"), std::string::npos);
  EXPECT_NE(parse_error({"--master_port", "70000", "p"}).find("out of range"), std::string::npos);
  EXPECT_NE(parse_error({"--save_pid=1", "p"}).find("switch"), std::string::npos);
}

TEST(LauncherOptions, MultiNodeFlags) {
  // DeepSpeed's multi-node flags (reference §5); --launcher_args is split as shlex.split.
  LaunchOptions o = parse_ok({"--no_ssh", "--node_rank=1", "--force_multi", "--ssh_port", "2222",
                              "--launcher_args", "-F '/a b/cfg' -o \"X=1 2\"", "--module",
                              "pkg.train", "--lr", "1"});
  EXPECT_TRUE(o.no_ssh);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_TRUE(o.force_multi);
  EXPECT_EQ(o.ssh_port, 2222);
  EXPECT_EQ(o.launcher_args, (std::vector<std::string>{"-F", "/a b/cfg", "-o", "X=1 2"}));
  EXPECT_TRUE(o.module);
  EXPECT_EQ(o.program, "pkg.train");
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"--lr", "1"}));
  // --no_ssh needs --node_rank; --node_rank alone belongs to --no_ssh.
  EXPECT_NE(parse_error({"--no_ssh", "p"}).find("--node_rank"), std::string::npos);
  EXPECT_NE(parse_error({"--node_rank", "1", "p"}).find("--no_ssh"), std::string::npos);
  EXPECT_NE(parse_error({"--ssh_port", "0", "p"}).find("out of range"), std::string::npos);
  EXPECT_NE(parse_error({"--launcher_args", "'open", "p"}).find("--launcher_args"),
            std::string::npos);
  EXPECT_NE(parse_error({"--autotuning", "tune2", "p"}).find("invalid choice"), std::string::npos);
  EXPECT_NE(parse_error({"--elastic_training", "p"}).find("not supported"), std::string::npos);
}

TEST(LauncherOptions, NodeLauncherFlagsAreHiddenButParsed) {
  LaunchOptions o = parse_ok({"--node_rank=1", "--world_info=e30=", "--master_addr=10.0.0.1",
                              "--zt_job_token=ab", "--zt_slot_kind=cpu", "--zt_link_stdin",
                              "--zt_prefix_output", "--", "p"});
  EXPECT_EQ(o.world_info, "e30=");
  EXPECT_EQ(o.job_token, "ab");
  EXPECT_EQ(o.slot_kind, "cpu");
  EXPECT_TRUE(o.link_stdin);
  EXPECT_TRUE(o.prefix_output);
  EXPECT_EQ(o.program, "p");
  EXPECT_NE(parse_error({"--zt_slot_kind=tpu", "p"}).find("invalid choice"), std::string::npos);
  // The pre-flight responder needs no PROGRAM.
  EXPECT_EQ(parse_ok({"--zt_preflight=a,1,cpu,2,none"}).preflight, "a,1,cpu,2,none");
  const std::string usage = launch_usage();
  EXPECT_EQ(usage.find("--zt_"), std::string::npos);
  EXPECT_EQ(usage.find("--world_info"), std::string::npos);
  EXPECT_NE(usage.find("--launcher_args"), std::string::npos);
}

}  // namespace
}  // namespace zt::launcher
