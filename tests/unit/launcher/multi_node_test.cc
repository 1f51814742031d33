// What travels between machines in a multi-node job. Oracles: DeepSpeed's --world_info (a string
// Python's base64.urlsafe_b64encode(json.dumps(...)) produced), a real /bin/sh that must split the
// remote command back into exactly the words and values given (hostile characters included, none
// executed), and the line relay read back through a pipe.
#include "zt/launcher/multi_node.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "zt/launcher/output_relay.h"

namespace zt::launcher {
namespace {

// Runs `sh -c COMMAND` and returns its stdout.
std::string sh_output(const std::string& command) {
  std::string quoted;
  FILE* p = popen(("/bin/sh -c '" + [&] {
                    for (char c : command) {
                      if (c == '\'') quoted += "'\\''";
                      else quoted += c;
                    }
                    return quoted;
                  }() + "'").c_str(),
                  "r");
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(LauncherMultiNode, WorldInfoReadsDeepSpeedsEncodingAndKeepsHostOrder) {
  // base64.urlsafe_b64encode(json.dumps({'worker-1': [0, 2], 'a': [1]})), from Python.
  Result<Resources> r = world_info_decode("eyJ3b3JrZXItMSI6IFswLCAyXSwgImEiOiBbMV19");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r, (Resources{{"worker-1", {0, 2}}, {"a", {1}}}));
  const Resources hosts = {{"z-last-alphabetically", {0, 1}}, {"a", {3}}, {"m", {0}}};
  Result<Resources> back = world_info_decode(world_info_encode(hosts));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, hosts);
  EXPECT_EQ(world_info_encode(hosts).find_first_of("+/ "), std::string::npos);  // shell-safe
  EXPECT_FALSE(world_info_decode("!!!").is_ok());
  EXPECT_FALSE(world_info_decode("e30=").is_ok());  // {}
}

TEST(LauncherMultiNode, FailureMarkerRoundTrips) {
  NodeFailure f{.rank = 3, .code = 137, .what = "was killed by signal 9 (SIGKILL)"};
  const std::string line = node_failure_marker(f);
  EXPECT_TRUE(line.starts_with(kNodeFailureMarker));
  EXPECT_EQ(node_failure_parse(line), f);
  EXPECT_FALSE(node_failure_parse("[rank 3] zt-launch-node-failure rank=3 code=1 what=x"));
  EXPECT_FALSE(node_failure_parse("zt-launch-node-failure rank=x code=1 what=x"));
}

TEST(LauncherMultiNode, RemoteCommandSurvivesTheRemoteShellByteForByte) {
  const std::vector<std::string> hostile = {
      "a b", "$(touch /tmp/zt_pwned_by_arg)", "`id`", "'single'", "\"double\"", "x;y|z&",
      "*", "~", "back\\slash", "new\nline", "", "--flag=v a l", "ünï", "$HOME"};
  char dir_template[] = "/tmp/zt mn dir 'q' XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::vector<std::string> argv = {"/usr/bin/printf", "<%s>\\n"};
  argv.insert(argv.end(), hostile.begin(), hostile.end());
  const std::string cmd = remote_command(dir, {}, argv);
  std::string want;
  for (const std::string& w : hostile) want += "<" + w + ">\n";
  EXPECT_EQ(sh_output(cmd), want) << cmd;
  EXPECT_FALSE(std::filesystem::exists("/tmp/zt_pwned_by_arg"));
  // The working directory and the exported values arrive too.
  std::vector<ExportedVar> env = {{"ZT_A", "x y$(id)`id`'\""}, {"PYTHONPATH", "/p q:/r"}};
  const std::string env_cmd = remote_command(dir, env, {"/bin/sh", "-c", "pwd; env"});
  const std::string out = sh_output(env_cmd);
  EXPECT_NE(out.find(dir + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\nZT_A=x y$(id)`id`'\"\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\nPYTHONPATH=/p q:/r\n"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(LauncherMultiNode, NodeLauncherAndSshCommandLines) {
  LaunchOptions o;
  o.master_port = 29555;
  o.program = "train.py";
  o.program_args = {"--lr", "1 e"};
  o.no_local_rank = true;
  o.each_rank_log_dir = "logs";
  o.launcher_args = {"-F", "/cfg"};
  o.ssh_port = 2222;
  WorldInfo world{.hosts = {{"a", {0, 1}}, {"b", {0, 1}}}, .local = {false, false},
                  .kind = SlotKind::kCpu, .master_addr = ""};
  NodeCommandInputs in{.options = &o, .world = &world, .zt_bin = "/opt/zt/bin/zt",
                       .master_addr = "10.0.0.1", .job_token = "tok", .link_stdin = true};
  std::vector<std::string> argv = node_launcher_argv(in, "1");
  const std::vector<std::string> want = {
      "/opt/zt/bin/zt", "launch", "--node_rank=1",
      "--world_info=" + world_info_encode(world.hosts), "--master_addr=10.0.0.1",
      "--master_port=29555", "--zt_job_token=tok", "--zt_slot_kind=cpu", "--zt_link_stdin",
      "--zt_prefix_output", "--no_local_rank", "--enable_each_rank_log=logs", "--",
      "train.py", "--lr", "1 e"};
  EXPECT_EQ(argv, want);
  // The node launcher parses what the master wrote back into the same job.
  std::vector<std::string> flags(argv.begin() + 2, argv.end());
  Result<LaunchOptions> back = launch_options_parse(flags);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->node_rank, 1);
  EXPECT_EQ(back->master_addr, "10.0.0.1");
  EXPECT_EQ(back->program, "train.py");
  EXPECT_EQ(back->program_args, o.program_args);
  EXPECT_TRUE(back->link_stdin);

  std::vector<std::string> ssh = ssh_argv("ssh", o, "b", "REMOTE");
  ASSERT_GE(ssh.size(), 6u);
  EXPECT_EQ(ssh[1], "-F");  // the user's arguments first: for ssh the first value wins
  EXPECT_EQ(ssh[2], "/cfg");
  EXPECT_NE(std::find(ssh.begin(), ssh.end(), "BatchMode=yes"), ssh.end());
  EXPECT_EQ(std::vector<std::string>(ssh.end() - 5, ssh.end()),
            (std::vector<std::string>{"-p", "2222", "--", "b", "REMOTE"}));
  // pdsh as DeepSpeed runs it.
  EXPECT_EQ(pdsh_argv("pdsh", o, world.hosts, "R"),
            (std::vector<std::string>{"pdsh", "-S", "-f", "1024", "-w", "a,b", "-F", "/cfg", "R"}));
}

// Reads everything from `fd` until EOF.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n = 0;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

TEST(LauncherLineRelay, WholePrefixedLinesFromPartialWrites) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  std::vector<std::string> swallowed;
  {
    LineRelay out("[rank 0] ", p[1]);
    LineRelay err("[rank 1] ", p[1], [&swallowed](std::string_view line) {
      if (!line.starts_with("MARK")) return false;
      swallowed.emplace_back(line);
      return true;
    });
    out.feed("hel");
    err.feed("wor");
    out.feed("lo\nsecond ");
    err.feed("ld\nMARK x\n");
    out.feed("line\nno newline at the end");
    out.finish();
    err.finish();  // nothing pending
  }
  close(p[1]);
  EXPECT_EQ(read_all(p[0]),
            "[rank 0] hello\n[rank 1] world\n[rank 0] second line\n"
            "[rank 0] no newline at the end\n");
  EXPECT_EQ(swallowed, (std::vector<std::string>{"MARK x"}));
  close(p[0]);
}

}  // namespace
}  // namespace zt::launcher
