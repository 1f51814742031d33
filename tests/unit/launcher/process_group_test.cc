// The spawner against the behaviour reference §5 documents for DeepSpeed's launch.py (first
// non-zero exit => SIGTERM to the others, SIGKILL after the grace, exit with that code) and the
// kernel as the oracle: after wait() no child of this process is left (/proc), nor a grandchild.
#include "zt/launcher/process_group.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace zt::launcher {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string file_read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// 'Z' for a zombie, 0 when the process does not exist.
char process_state(pid_t pid) {
  std::string stat = file_read("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return 0;
  return stat[paren + 2];
}

bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  return process_state(pid) == 'Z' || process_state(pid) == 0;
}

// Children of this process that still exist (any state): a reaped child is not listed.
int children_count() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    std::string stat = file_read(e.path() / "stat");
    size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(stat.c_str() + paren + 1, " %c %ld", &state, &ppid) == 2 && ppid == getpid()) {
      ++n;
    }
  }
  return n;
}

class TempDir {
 public:
  TempDir() {
    char path[] = "/tmp/zt_pg_test_XXXXXX";
    EXPECT_NE(mkdtemp(path), nullptr);
    path_ = path;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

ProcessSpec sh_spec(const std::string& label, const std::string& script) {
  return ProcessSpec{.label = label,
                     .exec_path = "/bin/sh",
                     .argv = {"sh", "-c", script},
                     .env = environ_copy(),
                     .log_path = "",
                     .cpus = {}};
}

ProcessSpec sleep_spec(const std::string& label) {
  Result<std::string> sleep_path = executable_resolve("sleep", "/usr/bin:/bin");
  EXPECT_TRUE(sleep_path.is_ok());
  return ProcessSpec{.label = label,
                     .exec_path = *sleep_path,
                     .argv = {"sleep", "60"},
                     .env = environ_copy(),
                     .log_path = "",
                     .cpus = {}};
}

TEST(LauncherProcessGroup, OneFailureStopsTheOthersAndItsCodeIsReturned) {
  auto t0 = Clock::now();
  std::vector<ProcessSpec> specs = {sleep_spec("rank 0"), sh_spec("rank 1", "sleep 0.2; exit 3"),
                                    sleep_spec("rank 2")};
  Result<std::unique_ptr<ProcessGroup>> group = ProcessGroup::start(specs, {});
  ASSERT_TRUE(group.is_ok()) << group.status().message();
  std::vector<pid_t> pids = (*group)->pids();
  GroupResult r = (*group)->wait();
  EXPECT_LT(seconds_since(t0), 3.0);  // the sleepers died of SIGTERM, not of old age
  EXPECT_EQ(r.end, GroupEnd::kProcessFailed);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failure.index, 1);
  EXPECT_EQ(r.failure.pid, pids[1]);
  EXPECT_EQ(r.failure.describe(), "exited with code 3");
  EXPECT_EQ(r.stopped, 2);
  for (pid_t pid : pids) EXPECT_TRUE(process_gone(pid)) << pid;
  EXPECT_EQ(children_count(), 0);
}

TEST(LauncherProcessGroup, TermIgnoringTreeIsKilledAfterTheGrace) {
  TempDir dir;
  const std::string gc = dir / "grandchild";
  // Rank 0 and its background child ignore SIGTERM; rank 1 fails once the grandchild is known.
  std::vector<ProcessSpec> specs = {
      sh_spec("rank 0", "trap '' TERM; sleep 60 & echo $! > " + gc + ".tmp; mv " + gc + ".tmp " +
                            gc + "; wait"),
      sh_spec("rank 1", "while [ ! -s " + gc + " ]; do sleep 0.02; done; exit 5")};
  auto t0 = Clock::now();
  Result<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::start(specs, {.grace = std::chrono::milliseconds(300)});
  ASSERT_TRUE(group.is_ok()) << group.status().message();
  GroupResult r = (*group)->wait();
  double elapsed = seconds_since(t0);
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_GE(elapsed, 0.3);  // SIGKILL waited for the grace
  EXPECT_LT(elapsed, 5.0);
  pid_t grandchild = std::atoi(file_read(gc).c_str());
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(process_gone(grandchild)) << grandchild;
  EXPECT_EQ(children_count(), 0);
}

TEST(LauncherProcessGroup, DeathBySignalIsReportedAs128PlusSignal) {
  Result<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::start({sh_spec("rank 0", "kill -KILL $$"), sleep_spec("rank 1")}, {});
  ASSERT_TRUE(group.is_ok());
  GroupResult r = (*group)->wait();
  EXPECT_EQ(r.end, GroupEnd::kProcessFailed);
  EXPECT_EQ(r.failure.term_signal, SIGKILL);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  EXPECT_EQ(r.failure.describe(), "was killed by signal 9 (SIGKILL)");
}

TEST(LauncherProcessGroup, AllSucceed) {
  Result<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::start({sh_spec("a", "exit 0"), sh_spec("b", "sleep 0.1")}, {});
  ASSERT_TRUE(group.is_ok());
  GroupResult r = (*group)->wait();
  EXPECT_EQ(r.end, GroupEnd::kAllSucceeded);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(children_count(), 0);
}

TEST(LauncherProcessGroup, SignalToTheLauncherStopsEveryone) {
  Result<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::start({sleep_spec("rank 0"), sleep_spec("rank 1")}, {});
  ASSERT_TRUE(group.is_ok());
  std::vector<pid_t> pids = (*group)->pids();
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(getpid(), SIGTERM);
  });
  auto t0 = Clock::now();
  GroupResult r = (*group)->wait();
  sender.join();
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_EQ(r.end, GroupEnd::kInterrupted);
  EXPECT_EQ(r.launcher_signal, SIGTERM);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_EQ(r.stopped, 2);
  for (pid_t pid : pids) EXPECT_TRUE(process_gone(pid));
  EXPECT_EQ(children_count(), 0);
}

// Ranks that save on SIGTERM and exit 0 (zt train --save-on-signal): the job ends cleanly.
TEST(LauncherProcessGroup, RanksThatExitCleanlyOnTheSignalEndTheJobWithZero) {
  const std::string trap = "trap 'exit 0' TERM; while :; do sleep 0.05; done";
  Result<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::start({sh_spec("rank 0", trap), sh_spec("rank 1", trap)}, {});
  ASSERT_TRUE(group.is_ok());
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(getpid(), SIGTERM);
  });
  GroupResult r = (*group)->wait();
  sender.join();
  EXPECT_EQ(r.end, GroupEnd::kInterrupted);
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(children_count(), 0);
}

// SIGUSR1 is passed on to every rank, and the launcher goes on supervising them.
TEST(LauncherProcessGroup, Usr1IsForwardedToEveryRank) {
  const std::string trap = "trap 'exit 0' USR1; while :; do sleep 0.05; done";
  Result<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::start({sh_spec("rank 0", trap), sh_spec("rank 1", trap)}, {});
  ASSERT_TRUE(group.is_ok());
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(getpid(), SIGUSR1);
  });
  auto t0 = Clock::now();
  GroupResult r = (*group)->wait();
  sender.join();
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(r.end, GroupEnd::kAllSucceeded);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(children_count(), 0);
}

TEST(LauncherProcessGroup, SignalIgnoredByTheLauncherStaysIgnored) {
  // As under `nohup`: SIGHUP ignored when the group starts must neither stop the group nor be
  // un-ignored in the processes.
  struct sigaction old {};
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGHUP, &ignore, &old), 0);
  TempDir dir;
  ProcessSpec spec = sh_spec("rank 0", "grep SigIgn /proc/self/status; sleep 0.4");
  spec.log_path = dir / "log";
  Result<std::unique_ptr<ProcessGroup>> group = ProcessGroup::start({spec}, {});
  ASSERT_TRUE(group.is_ok());
  std::thread sender([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(getpid(), SIGHUP);
  });
  GroupResult r = (*group)->wait();
  sender.join();
  struct sigaction after {};
  sigaction(SIGHUP, &old, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);  // the group restored what it found
  EXPECT_EQ(r.end, GroupEnd::kAllSucceeded);
  std::string log = file_read(spec.log_path);
  size_t at = log.find("SigIgn:");
  ASSERT_NE(at, std::string::npos) << log;
  unsigned long long mask = std::strtoull(log.c_str() + at + 7, nullptr, 16);
  EXPECT_TRUE(mask & (1ull << (SIGHUP - 1))) << log;
}

TEST(LauncherProcessGroup, ExecFailureIsAnErrorAndStopsWhatStarted) {
  TempDir dir;
  const std::string not_exec = dir / "plain.txt";
  std::ofstream(not_exec) << "not a program\n";
  ProcessSpec bad = sh_spec("rank 1", "");
  bad.exec_path = not_exec;  // not executable: execve fails with EACCES
  Result<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::start({sleep_spec("rank 0"), bad, sleep_spec("rank 2")}, {});
  ASSERT_FALSE(group.is_ok());
  const std::string& m = group.status().message();
  EXPECT_NE(m.find("cannot start rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("Permission denied"), std::string::npos) << m;
  EXPECT_EQ(children_count(), 0);  // rank 0 was stopped and reaped; rank 2 never started
}

TEST(LauncherProcessGroup, LogFileGetsStdoutAndStderrAndAffinityApplies) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &allowed)) ++cpu;
  TempDir dir;
  ProcessSpec spec = sh_spec(
      "rank 0", "echo to-stdout; echo to-stderr >&2; grep Cpus_allowed_list /proc/self/status");
  spec.log_path = dir / "rank0.log";
  spec.cpus = {cpu};
  Result<std::unique_ptr<ProcessGroup>> group = ProcessGroup::start({spec}, {});
  ASSERT_TRUE(group.is_ok());
  EXPECT_EQ((*group)->wait().exit_code, 0);
  std::string log = file_read(spec.log_path);
  EXPECT_NE(log.find("to-stdout\n"), std::string::npos) << log;
  EXPECT_NE(log.find("to-stderr\n"), std::string::npos) << log;
  EXPECT_NE(log.find("Cpus_allowed_list:\t" + std::to_string(cpu) + "\n"), std::string::npos)
      << log;
}

TEST(LauncherProcessGroup, UnwritableLogIsAnError) {
  ProcessSpec spec = sh_spec("rank 0", "exit 0");
  spec.log_path = "/nonexistent/dir/rank0.log";
  Result<std::unique_ptr<ProcessGroup>> group = ProcessGroup::start({spec}, {});
  ASSERT_FALSE(group.is_ok());
  EXPECT_NE(group.status().message().find("/nonexistent/dir/rank0.log"), std::string::npos);
}

TEST(LauncherProcessGroup, DestructorStopsAnUnwaitedGroup) {
  std::vector<pid_t> pids;
  {
    Result<std::unique_ptr<ProcessGroup>> group = ProcessGroup::start({sleep_spec("rank 0")}, {});
    ASSERT_TRUE(group.is_ok());
    pids = (*group)->pids();
  }
  EXPECT_TRUE(process_gone(pids[0]));
  EXPECT_EQ(children_count(), 0);
}

TEST(LauncherExecutableResolve, SearchesPathLikeExecvp) {
  Result<std::string> sh = executable_resolve("sh", "/nonexistent:/bin:/usr/bin");
  ASSERT_TRUE(sh.is_ok()) << sh.status().message();
  EXPECT_EQ(*sh, "/bin/sh");
  EXPECT_EQ(*executable_resolve("/bin/sh", ""), "/bin/sh");
}

TEST(LauncherExecutableResolve, ErrorsSayWhatIsWrong) {
  TempDir dir;
  std::ofstream(dir / "train.py") << "print(1)\n";
  std::filesystem::create_directory(dir / "folder");
  Result<std::string> missing = executable_resolve("zt-no-such-program", "/bin");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("not found on PATH"), std::string::npos);
  Result<std::string> script = executable_resolve(dir / "train.py", "");
  ASSERT_FALSE(script.is_ok());
  EXPECT_NE(script.status().message().find("chmod +x"), std::string::npos);
  EXPECT_NE(script.status().message().find("#!"), std::string::npos);
  Result<std::string> folder = executable_resolve(dir / "folder", "");
  ASSERT_FALSE(folder.is_ok());
  EXPECT_NE(folder.status().message().find("is a directory"), std::string::npos);
}

TEST(LauncherEnv, SetReplacesAndFindReads) {
  std::vector<std::string> env = {"A=1", "AB=2", "B="};
  env_set(env, "A", "x");
  env_set(env, "C", "3");
  EXPECT_EQ(env, (std::vector<std::string>{"A=x", "AB=2", "B=", "C=3"}));
  EXPECT_EQ(env_find(env, "AB"), "2");
  EXPECT_EQ(env_find(env, "B"), "");
  EXPECT_EQ(env_find(env, "Z"), std::nullopt);
}


// The node side of the master -> node link (multi-node): EOF on the link stops every process at
// once; so does silence past the timeout; bytes that keep coming keep the group running.
TEST(LauncherProcessGroupLink, EofOnTheLinkStopsTheGroup) {
  int link[2];
  ASSERT_EQ(pipe2(link, O_CLOEXEC), 0);  // the processes must not hold the write end
  ProcessGroupOptions options{.grace = std::chrono::milliseconds(2000)};
  options.link_fd = link[0];
  options.link_timeout = std::chrono::milliseconds(5000);
  Result<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::start({sleep_spec("rank 0"), sleep_spec("rank 1")}, options);
  ASSERT_TRUE(group.is_ok()) << group.status().message();
  const std::vector<pid_t> pids = (*group)->pids();
  std::thread closer([&] {
    for (int i = 0; i < 3; ++i) {  // a few beats, then the master is gone
      ASSERT_EQ(write(link[1], ".", 1), 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    close(link[1]);
  });
  auto t0 = Clock::now();
  GroupResult r = (*group)->wait();
  closer.join();
  EXPECT_EQ(r.end, GroupEnd::kLinkLost);
  EXPECT_TRUE(r.link_eof);
  EXPECT_EQ(r.exit_code, kLinkLostExitCode);
  EXPECT_EQ(r.stopped, 2);
  EXPECT_LT(seconds_since(t0), 2.0);  // EOF is acted on at once, not after the 5 s timeout
  for (pid_t pid : pids) EXPECT_TRUE(process_gone(pid));
  close(link[0]);
}

TEST(LauncherProcessGroupLink, SilenceOnTheLinkStopsTheGroupAfterTheTimeout) {
  int link[2];
  ASSERT_EQ(pipe2(link, O_CLOEXEC), 0);  // the processes must not hold the write end  // the write end stays open and silent: a cut network
  ProcessGroupOptions options{.grace = std::chrono::milliseconds(2000)};
  options.link_fd = link[0];
  options.link_timeout = std::chrono::milliseconds(600);
  Result<std::unique_ptr<ProcessGroup>> group = ProcessGroup::start({sleep_spec("rank 0")}, options);
  ASSERT_TRUE(group.is_ok());
  auto t0 = Clock::now();
  GroupResult r = (*group)->wait();
  const double took = seconds_since(t0);
  EXPECT_EQ(r.end, GroupEnd::kLinkLost);
  EXPECT_FALSE(r.link_eof);
  EXPECT_GE(r.link_silent_s, 0.6);
  EXPECT_GE(took, 0.55);
  EXPECT_LT(took, 3.0);
  close(link[0]);
  close(link[1]);
}

// The master side: a process on a stdin link reads a byte about every second, is stopped by EOF
// on it (not by a signal), and its relayed output comes back whole, prefixed, and a failure
// marker on its stderr ends the group at once as its failure.
TEST(LauncherProcessGroupLink, StdinLinkBeatsAndClosesAndMarkerEndsTheGroup) {
  char dir_template[] = "/tmp/zt_pg_link_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  // Node 0 counts the bytes it reads until EOF, then writes the count and exits 0; it ignores
  // SIGTERM, so only the link can stop it.
  ProcessSpec node0 = sh_spec("node 0", "trap '' TERM; n=0; while IFS= read -r -n1 c 2>/dev/null || "
                                        "[ -n \"$c\" ]; do n=$((n+1)); done; echo $n > " + dir +
                                        "/count; exit 0");
  node0.exec_path = "/bin/bash";
  node0.argv[0] = "bash";
  node0.stdin_link = true;
  ProcessSpec node1 = sh_spec("node 1", "sleep 2.2; printf 'partial'; sleep 0.1; echo ' out'; "
                                        "echo 'MARK rank=3' >&2; exec sleep 60");
  node1.stdin_link = true;
  node1.relay_prefix = "";
  ProcessGroupOptions options{.grace = std::chrono::milliseconds(3000)};
  options.failure_marker = "MARK ";
  // The relayed line goes to this process's stdout: capture it.
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  int cap[2];
  ASSERT_EQ(pipe(cap), 0);
  dup2(cap[1], STDOUT_FILENO);
  close(cap[1]);
  Result<std::unique_ptr<ProcessGroup>> group = ProcessGroup::start({node0, node1}, options);
  ASSERT_TRUE(group.is_ok()) << group.status().message();
  GroupResult r = (*group)->wait();
  dup2(saved, STDOUT_FILENO);
  close(saved);
  std::string captured;
  char buf[256];
  ssize_t n = 0;
  fcntl(cap[0], F_SETFL, O_NONBLOCK);
  while ((n = read(cap[0], buf, sizeof(buf))) > 0) captured.append(buf, static_cast<size_t>(n));
  close(cap[0]);
  EXPECT_EQ(r.end, GroupEnd::kProcessFailed);
  EXPECT_TRUE(r.reported);
  EXPECT_EQ(r.failure.index, 1);
  EXPECT_EQ(r.marker, "MARK rank=3");
  EXPECT_EQ((*group)->marker(1), "MARK rank=3");
  EXPECT_EQ(captured, "partial out\n");
  // Node 0 saw EOF (it ignores SIGTERM, yet wrote its count and ended) after 2-3 beats.
  const std::string count = file_read(dir + "/count");
  ASSERT_FALSE(count.empty());
  EXPECT_GE(std::stoi(count), 2);
  EXPECT_LE(std::stoi(count), 4);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zt::launcher
