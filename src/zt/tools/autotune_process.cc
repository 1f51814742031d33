// The autotuner's child processes (autotune_process.h). Between fork and exec the child makes
// only async-signal-safe calls on data prepared before the fork.
#include "zt/tools/autotune_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "zt/core/file_io.h"
#include "zt/launcher/port_check.h"

namespace zt::tools {
namespace {

using Clock = std::chrono::steady_clock;

// ---- signals: SIGINT/SIGTERM/SIGHUP stop the tuning after the running trial is stopped

std::atomic<int> g_stop_signal{0};

void stop_handler(int sig) {
  g_stop_signal.store(sig);
}

constexpr int kStopSignals[3] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_old_actions[3];

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal.store(0);
  struct sigaction a {};
  a.sa_handler = stop_handler;
  sigemptyset(&a.sa_mask);
  for (size_t i = 0; i < 3; ++i) sigaction(kStopSignals[i], &a, &g_old_actions[i]);
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < 3; ++i) sigaction(kStopSignals[i], &g_old_actions[i], nullptr);
}

int stop_signal() {
  return g_stop_signal.load();
}

// ---- one child process

Result<ChildResult> child_run(const std::vector<std::string>& argv,
                              const std::vector<std::string>& env, const std::string& log_path,
                              double timeout_s) {
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) return io_error("cannot create {}: {}", log_path, errno_text());
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
    return io_error("fork failed: {}", errno_text());
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
      if (null_fd >= 0) dup2(null_fd, 0);
    }
    execve(cargv[0], cargv.data(), cenv.data());
    const char msg[] = "zt tune: cannot execute the launcher\n";
    ssize_t n = write(2, msg, sizeof(msg) - 1);
    (void)n;
    _exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  if (null_fd >= 0) ::close(null_fd);
  const auto start = Clock::now();
  ChildResult r;
  bool stopping = false;
  Clock::time_point stop_at{};
  int status = 0;
  while (true) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return io_error("waitpid failed: {}", errno_text());
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (!stopping && (g_stop_signal.load() != 0 || (timeout_s > 0 && elapsed > timeout_s))) {
      r.end = g_stop_signal.load() != 0 ? ChildEnd::kInterrupted : ChildEnd::kTimeout;
      kill(pid, SIGTERM);
      stopping = true;
      stop_at = Clock::now();
    }
    if (stopping && Clock::now() - stop_at > std::chrono::seconds(20)) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  r.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  return r;
}

int port_free_from(int from) {
  for (int p = from; p < from + 500 && p < 65536; ++p) {
    if (launcher::master_port_check(p).is_ok()) return p;
  }
  return from;
}

}  // namespace zt::tools
