// The spawner (see process_group.h). Between fork and execve the child only makes
// async-signal-safe calls on data prepared before the fork: the launcher may have other threads
// (the CUDA runtime's), so nothing may allocate there. A CLOEXEC pipe carries a failed exec's
// errno back to the parent, so "cannot execute" is an error of start(), not a silent exit 127.
#include "zt/launcher/process_group.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>

#include "zt/core/assert.h"
#include "zt/core/log.h"

extern char** environ;  // NOLINT: POSIX

namespace zt::launcher {
namespace {

constexpr int kCaughtSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kNumCaught = sizeof(kCaughtSignals) / sizeof(kCaughtSignals[0]);
constexpr std::chrono::milliseconds kTick{50};

// State shared with the signal handler: lock-free atomics only.
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int> g_first_signal{0};
std::atomic<int> g_signal_count{0};
std::atomic<int> g_wake_write{-1};  // write end of the self-pipe that wakes supervise()
int g_wake_read = -1;
std::atomic<bool> g_group_active{false};
struct sigaction g_old_actions[kNumCaught];
// SIGUSR1 is passed on to every rank instead (a scheduler's "save and stop soon": ranks run with
// --save-on-signal save a checkpoint and exit 0); the launcher keeps supervising.
std::atomic<int> g_forward_pending{0};
struct sigaction g_old_usr1;
// A relayed output pipe or a link whose reader is gone must not kill the launcher.
struct sigaction g_old_pipe;

// Wakes supervise() from a signal handler (async-signal-safe).
void supervisor_wake() {
  int saved_errno = errno;
  int fd = g_wake_write.load();
  if (fd >= 0) {
    char byte = 1;
    ssize_t n = write(fd, &byte, 1);
    (void)n;  // a full pipe already holds a wake-up
  }
  errno = saved_errno;
}

void on_launcher_signal(int sig) {
  int none = 0;
  g_first_signal.compare_exchange_strong(none, sig);
  g_signal_count.fetch_add(1);
  supervisor_wake();
}

void on_forward_signal(int /*sig*/) {
  g_forward_pending.store(1);
  supervisor_wake();
}

// What a child reports through the exec pipe when it cannot start the program.
struct ChildFailure {
  int stage;  // 1: sched_setaffinity, 2: stdin/stdout/stderr, 3: execve
  int err;
};

[[noreturn]] void child_fail(int fd, int stage) {
  ChildFailure f{stage, errno};
  ssize_t n = write(fd, &f, sizeof(f));
  (void)n;
  _exit(127);
}

const char* stage_name(int stage) {
  switch (stage) {
    case 1:
      return "pinning it to its CPUs (sched_setaffinity)";
    case 2:
      return "redirecting its stdin/stdout/stderr";
    default:
      return "executing it";
  }
}

// True while a process group has a member that is not a zombie. A zombie cannot be stopped any
// further, and in a container whose PID 1 does not reap, it would otherwise hold the wait.
bool pgid_has_live_member(pid_t pgid) {
  if (killpg(pgid, 0) != 0 && errno == ESRCH) return false;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return true;  // cannot tell: assume alive, the deadline ends the wait
  bool live = false;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    size_t paren = line.rfind(')');  // the command name may contain spaces and parentheses
    if (paren == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    long pgrp = 0;
    if (std::sscanf(line.c_str() + paren + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') {
      live = true;
      break;
    }
  }
  closedir(proc);
  return live;
}

// 0 when `path` is an executable regular file, else ENOENT / EISDIR / EACCES.
int executable_check(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return ENOENT;
  if (S_ISDIR(st.st_mode)) return EISDIR;
  if (access(path.c_str(), X_OK) != 0) return EACCES;
  return 0;
}

std::string script_hint(std::string_view program) {
  if (program.ends_with(".py")) {
    return " (with --no_python zt launch runs PROGRAM directly: give the script a "
           "'#!/usr/bin/env python3' line and chmod +x it, or leave --no_python out to run it "
           "under python3 -u)";
  }
  return "";
}

}  // namespace

std::string ProcessExit::describe() const {
  if (term_signal != 0) {
    const char* abbrev = sigabbrev_np(term_signal);
    return fmt::format("was killed by signal {} (SIG{})", term_signal,
                       abbrev != nullptr ? abbrev : "?");
  }
  return fmt::format("exited with code {}", exit_code);
}

ProcessGroup::ProcessGroup(std::vector<ProcessSpec> specs, ProcessGroupOptions options)
    : specs_(std::move(specs)),
      options_(options),
      pids_(specs_.size(), -1),
      running_(specs_.size(), 0),
      group_gone_(specs_.size(), 0),
      heartbeats_(specs_.size()),
      relays_(specs_.size() * 2),
      markers_(specs_.size()),
      link_writes_(specs_.size(), -1) {}

Result<std::unique_ptr<ProcessGroup>> ProcessGroup::start(std::vector<ProcessSpec> specs,
                                                          ProcessGroupOptions options) {
  ZT_ASSERT(!g_group_active.exchange(true), "only one ProcessGroup may run at a time");
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_group_active = false;
    return io_error("zt launch: pipe2 failed: {}", std::strerror(errno));
  }
  g_wake_read = wake[0];
  g_wake_write = wake[1];
  g_first_signal = 0;
  g_signal_count = 0;
  struct sigaction action {};
  action.sa_handler = on_launcher_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: poll() wakes with EINTR
  for (int i = 0; i < kNumCaught; ++i) {
    ZT_ASSERT(sigaction(kCaughtSignals[i], nullptr, &g_old_actions[i]) == 0);
    // An ignored signal stays ignored (`nohup zt launch` must survive SIGHUP, and so must the
    // ranks, which inherit the disposition).
    if (g_old_actions[i].sa_handler == SIG_IGN) continue;
    ZT_ASSERT(sigaction(kCaughtSignals[i], &action, nullptr) == 0);
  }
  g_forward_pending = 0;
  struct sigaction forward {};
  forward.sa_handler = on_forward_signal;
  sigemptyset(&forward.sa_mask);
  ZT_ASSERT(sigaction(SIGUSR1, &forward, &g_old_usr1) == 0);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ZT_ASSERT(sigaction(SIGPIPE, &ignore, &g_old_pipe) == 0);
  if (options.link_fd >= 0) fcntl(options.link_fd, F_SETFL, fcntl(options.link_fd, F_GETFL) | O_NONBLOCK);

  std::unique_ptr<ProcessGroup> group(new ProcessGroup(std::move(specs), options));
  // Children are not in the terminal's foreground group: a terminal stdin would stop them. Nor
  // may they read the link to the master: its bytes are the launcher's.
  int stdin_fd = isatty(STDIN_FILENO) || options.link_fd >= 0
                     ? open("/dev/null", O_RDONLY | O_CLOEXEC)
                     : -1;
  Status status;
  for (size_t i = 0; i < group->specs_.size() && g_first_signal.load() == 0; ++i) {
    status = group->spawn(i, stdin_fd);
    if (!status.is_ok()) break;
  }
  if (stdin_fd >= 0) close(stdin_fd);
  if (!status.is_ok()) {
    group->supervise(LoopStart::kStopNow);
    return status;
  }
  return group;
}

Status ProcessGroup::spawn(size_t index, int stdin_fd) {
  const ProcessSpec& spec = specs_[index];
  // The heartbeat pipe: the child writes, the launcher reads (non-blocking).
  int beat[2] = {-1, -1};
  std::vector<std::string> env = spec.env;
  if (options_.heartbeat_timeout.count() > 0) {
    if (pipe2(beat, O_CLOEXEC) != 0) {
      return io_error("cannot start {}: pipe2: {}", spec.label, std::strerror(errno));
    }
    fcntl(beat[0], F_SETFL, O_NONBLOCK);
    env_set(env, "ZT_HEARTBEAT_FD", std::to_string(beat[1]));
  }
  // Everything the child needs is built here, before fork.
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : spec.cpus) {
    ZT_ASSERT(c >= 0 && c < CPU_SETSIZE, "cpu {} out of range", c);
    CPU_SET(c, &cpus);
  }
  sigset_t no_signals;
  sigemptyset(&no_signals);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);

  int log_fd = -1;
  if (!spec.log_path.empty()) {
    log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return io_error("cannot open log file {} for {}: {}", spec.log_path, spec.label,
                      std::strerror(errno));
    }
  }
  // The stdin link and the relay pipes: the child gets one end, the launcher keeps the other.
  int link[2] = {-1, -1};
  int out[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  auto pipes_close = [&] {
    for (int fd : {link[0], link[1], out[0], out[1], err_pipe[0], err_pipe[1], log_fd}) {
      if (fd >= 0) close(fd);
    }
  };
  const bool relayed = spec.relay_prefix.has_value() && log_fd < 0;
  if ((spec.stdin_link && pipe2(link, O_CLOEXEC) != 0) ||
      (relayed && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0))) {
    int err = errno;
    pipes_close();
    return io_error("cannot start {}: pipe2: {}", spec.label, std::strerror(err));
  }
  const int child_stdin = link[0] >= 0 ? link[0] : stdin_fd;
  const int child_stdout = relayed ? out[1] : log_fd;
  const int child_stderr = relayed ? err_pipe[1] : log_fd;
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    int err = errno;
    pipes_close();
    return io_error("cannot start {}: pipe2: {}", spec.label, std::strerror(err));
  }
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Child: async-signal-safe calls only, until execve.
    setpgid(0, 0);
    for (int i = 0; i < kNumCaught; ++i) {
      if (g_old_actions[i].sa_handler != SIG_IGN) {
        sigaction(kCaughtSignals[i], &default_action, nullptr);
      }
    }
    sigaction(SIGPIPE, &default_action, nullptr);
    sigprocmask(SIG_SETMASK, &no_signals, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(128 + SIGTERM);  // the launcher died before prctl
    if (!spec.cpus.empty() && sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
      child_fail(report[1], 1);
    }
    if (child_stdin >= 0 && dup2(child_stdin, STDIN_FILENO) < 0) child_fail(report[1], 2);
    if (child_stdout >= 0 &&
        (dup2(child_stdout, STDOUT_FILENO) < 0 || dup2(child_stderr, STDERR_FILENO) < 0)) {
      child_fail(report[1], 2);
    }
    if (beat[1] >= 0) fcntl(beat[1], F_SETFD, 0);  // the program keeps the write end
    execve(spec.exec_path.c_str(), argv.data(), envp.data());
    child_fail(report[1], 3);
  }
  int fork_errno = errno;
  close(report[1]);
  if (beat[1] >= 0) close(beat[1]);
  heartbeats_[index] = Heartbeat{.fd = beat[0], .seen = false, .step = -1,
                                 .last = std::chrono::steady_clock::now()};
  // The launcher keeps the link's write end and the relays' read ends.
  for (int fd : {link[0], out[1], err_pipe[1], log_fd}) {
    if (fd >= 0) close(fd);
  }
  if (pid < 0) {
    for (int fd : {link[1], out[0], err_pipe[0]}) {
      if (fd >= 0) close(fd);
    }
    close(report[0]);
    return io_error("cannot start {}: fork: {}", spec.label, std::strerror(fork_errno));
  }
  if (link[1] >= 0) {
    fcntl(link[1], F_SETFL, O_NONBLOCK);  // a full pipe (a stuck ssh) must not block the loop
    link_writes_[index] = link[1];
  }
  if (relayed) {
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    relays_[2 * index].fd = out[0];
    relays_[2 * index].relay = std::make_unique<LineRelay>(*spec.relay_prefix, STDOUT_FILENO);
    LineRelay::Intercept intercept = nullptr;
    if (!options_.failure_marker.empty()) {
      intercept = [this, index](std::string_view line) {
        if (!line.starts_with(options_.failure_marker)) return false;
        markers_[index] = std::string(line);
        if (marker_index_ < 0) marker_index_ = static_cast<int>(index);
        return true;
      };
    }
    relays_[2 * index + 1].fd = err_pipe[0];
    relays_[2 * index + 1].relay =
        std::make_unique<LineRelay>(*spec.relay_prefix, STDERR_FILENO, std::move(intercept));
  }
  // Also here, so the group exists before start() returns whichever side runs first. EACCES
  // (the child already called execve) means the child did it itself.
  setpgid(pid, pid);
  pids_[index] = pid;
  running_[index] = 1;

  ChildFailure failure{};
  ssize_t n = 0;
  do {
    n = read(report[0], &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(failure))) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    running_[index] = 0;
    group_gone_[index] = 1;
    for (int i : {0, 1}) {
      Relay& r = relays_[2 * index + static_cast<size_t>(i)];
      if (r.fd >= 0) close(r.fd);
      r.fd = -1;
      r.relay.reset();
    }
    return unavailable("cannot start {} ({}): failed {}: {}{}", spec.label, spec.exec_path,
                       stage_name(failure.stage), std::strerror(failure.err),
                       failure.err == ENOEXEC ? " (a script needs a #! line)" : "");
  }
  return Status::ok();
}

void ProcessGroup::groups_signal(int sig) {
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (pids_[i] <= 0 || group_gone_[i]) continue;
    // The group id stays reserved while the group has members, so signalling the group of a
    // leader that was already reaped still reaches only its own descendants.
    if (killpg(pids_[i], sig) != 0 && errno == ESRCH) {
      if (running_[i]) {
        kill(pids_[i], sig);  // not yet its own group leader: signal it directly
      } else {
        group_gone_[i] = 1;  // never signal this id again: the number may be reused
      }
    }
  }
}

GroupResult ProcessGroup::supervise(LoopStart start) {
  using Clock = std::chrono::steady_clock;
  GroupResult result;
  bool stopping = false;
  bool killed = false;
  int signals_at_stop = 0;
  Clock::time_point deadline = Clock::time_point::max();
  Clock::time_point link_last = Clock::now();
  std::optional<Clock::time_point> settle_until;
  auto stop_begin = [&] {
    stopping = true;
    result.stopped = static_cast<int>(std::count(running_.begin(), running_.end(), 1));
    signals_at_stop = g_signal_count.load();
    // A process on a link (a node launcher, or the ssh that carries it) is stopped by closing
    // the link: it stops its own ranks and ends; SIGKILL comes at the deadline if it does not.
    links_tick(/*close_all=*/true);
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (specs_[i].stdin_link || pids_[i] <= 0 || group_gone_[i]) continue;
      if (killpg(pids_[i], SIGTERM) != 0 && errno == ESRCH) {
        if (running_[i]) {
          kill(pids_[i], SIGTERM);
        } else {
          group_gone_[i] = 1;
        }
      }
    }
    deadline = Clock::now() + options_.grace;
    if (options_.on_stop) options_.on_stop(result);
  };
  if (start == LoopStart::kStopNow) stop_begin();

  while (true) {
    relays_pump(/*final=*/false);
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (!running_[i]) continue;
      int status = 0;
      pid_t w = waitpid(pids_[i], &status, WNOHANG);
      if (w == 0 || (w < 0 && errno == EINTR)) continue;
      running_[i] = 0;
      if (w < 0) {
        ZT_LOG_WARN("{} (pid {}) was reaped by someone else; its exit status is unknown",
                    specs_[i].label, pids_[i]);
        continue;
      }
      ProcessExit e{
          .index = static_cast<int>(i), .pid = pids_[i], .exit_code = 0, .term_signal = 0};
      if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) e.term_signal = WTERMSIG(status);
      // Within one pass, a rank killed by a signal is the cause over ranks that exited with an
      // error: those are usually its peers failing on the connection it dropped (they can only
      // exit after it died, so both land in the same pass or it comes first).
      if (e.failed()) ++result.failed;
      if (!stopping && e.failed()) result.early_failures.push_back(e);
      if (!stopping && e.failed() &&
          (result.end != GroupEnd::kProcessFailed ||
           (e.term_signal != 0 && result.failure.term_signal == 0))) {
        result.end = GroupEnd::kProcessFailed;
        result.failure = e;
      }
    }
    // A failure marker is the precise report (which rank, which code) of a process that watches
    // others: it wins over exits seen in the same pass. The exited processes' last lines were
    // read above, before they were reaped... unless they were written in between: read again.
    if (!stopping && !options_.failure_marker.empty()) {
      if (result.end == GroupEnd::kProcessFailed) relays_pump(/*final=*/false);
      if (marker_index_ >= 0) {
        const auto m = static_cast<size_t>(marker_index_);
        result.end = GroupEnd::kProcessFailed;
        result.reported = true;
        result.marker = markers_[m];
        result.failure = ProcessExit{
            .index = marker_index_, .pid = pids_[m], .exit_code = 1, .term_signal = 0};
      }
    }
    if (!stopping && result.end == GroupEnd::kProcessFailed) {
      // The first failure opens the settle window (failure_settle); the stop begins when it
      // closes or nothing is left running.
      if (!settle_until) settle_until = Clock::now() + options_.failure_settle;
      if (Clock::now() >= *settle_until ||
          std::find(running_.begin(), running_.end(), 1) == running_.end()) {
        stop_begin();
      }
    }
    if (!stopping && options_.heartbeat_timeout.count() > 0) {
      if (const int quiet = heartbeats_poll(); quiet >= 0) {
        const Heartbeat& h = heartbeats_[static_cast<size_t>(quiet)];
        result.end = GroupEnd::kSilent;
        result.silent = SilentProcess{
            .index = quiet,
            .pid = pids_[static_cast<size_t>(quiet)],
            .silent_s = std::chrono::duration<double>(Clock::now() - h.last).count(),
            .last_step = h.step};
        // A stopped process acts on nothing but SIGKILL; the others get the usual stop.
        kill(-pids_[static_cast<size_t>(quiet)], SIGKILL);
        kill(pids_[static_cast<size_t>(quiet)], SIGKILL);
        stop_begin();
      }
    }
    if (!stopping && options_.link_fd >= 0) {
      char bytes[256];
      ssize_t n = 0;
      bool eof = false;
      while ((n = read(options_.link_fd, bytes, sizeof(bytes))) > 0) link_last = Clock::now();
      if (n == 0) eof = true;
      const auto silent = Clock::now() - link_last;
      if (eof || silent > options_.link_timeout) {
        result.end = GroupEnd::kLinkLost;
        result.link_eof = eof;
        result.link_silent_s = std::chrono::duration<double>(silent).count();
        stop_begin();
      }
    }
    if (!stopping) links_tick(/*close_all=*/false);
    if (!stopping && g_forward_pending.exchange(0) != 0) groups_signal(SIGUSR1);
    int sig = g_first_signal.load();
    if (!stopping && sig != 0) {
      result.end = GroupEnd::kInterrupted;
      result.launcher_signal = sig;
      stop_begin();
    }
    Clock::time_point now = Clock::now();
    // A signal to the launcher while stopping (a second Ctrl-C) skips the rest of the grace.
    if (stopping && !killed && (now >= deadline || g_signal_count.load() > signals_at_stop)) {
      groups_signal(SIGKILL);
      killed = true;
    }
    if (std::find(running_.begin(), running_.end(), 1) == running_.end()) {
      // Every direct child is reaped. When stopping, also let their descendants (same process
      // groups) go, up to the deadline, so that none outlives the launcher.
      if (!stopping || killed) break;
      bool descendants = false;
      for (size_t i = 0; i < pids_.size() && !descendants; ++i) {
        if (pids_[i] > 0 && !group_gone_[i]) descendants = pgid_has_live_member(pids_[i]);
      }
      if (!descendants) break;
    }
    auto wait_for = kTick;
    if (stopping && !killed) {
      wait_for = std::min(wait_for, std::chrono::ceil<std::chrono::milliseconds>(
                                        std::max(deadline - now, Clock::duration::zero())));
    }
    std::vector<pollfd> fds;
    fds.push_back(pollfd{.fd = g_wake_read, .events = POLLIN, .revents = 0});
    if (!stopping && options_.link_fd >= 0) {
      fds.push_back(pollfd{.fd = options_.link_fd, .events = POLLIN, .revents = 0});
    }
    for (const Relay& r : relays_) {
      if (r.fd >= 0) fds.push_back(pollfd{.fd = r.fd, .events = POLLIN, .revents = 0});
    }
    poll(fds.data(), fds.size(), static_cast<int>(wait_for.count()));
    char drain[64];
    while (read(g_wake_read, drain, sizeof(drain)) > 0) {
    }
  }
  relays_pump(/*final=*/true);
  links_tick(/*close_all=*/true);
  handlers_restore();
  finished_ = true;
  result.markers = markers_;
  switch (result.end) {
    case GroupEnd::kAllSucceeded:
      result.exit_code = 0;
      break;
    case GroupEnd::kProcessFailed:
      result.exit_code = result.failure.shell_code();
      break;
    case GroupEnd::kSilent:
      result.exit_code = kSilentExitCode;
      break;
    case GroupEnd::kLinkLost:
      result.exit_code = kLinkLostExitCode;
      break;
    case GroupEnd::kInterrupted:
      // Every rank ended cleanly on the signal (ranks that save on SIGTERM and exit 0): the job
      // finished as asked.
      result.exit_code = result.failed == 0 ? 0 : 128 + result.launcher_signal;
      break;
  }
  return result;
}

void ProcessGroup::relays_pump(bool final) {
  char buf[16384];
  for (Relay& r : relays_) {
    if (r.fd < 0) continue;
    while (true) {
      const ssize_t n = read(r.fd, buf, sizeof(buf));
      if (n > 0) {
        r.relay->feed(std::string_view(buf, static_cast<size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {  // every writer closed it
        r.relay->finish();
        close(r.fd);
        r.fd = -1;
      }
      break;  // EAGAIN: nothing more for now
    }
    if (final && r.fd >= 0) {
      // A descendant that outlived the stop may still hold the pipe: what it wrote so far is
      // shown, the rest is not waited for.
      r.relay->finish();
      close(r.fd);
      r.fd = -1;
    }
  }
}

void ProcessGroup::links_tick(bool close_all) {
  const auto now = std::chrono::steady_clock::now();
  const bool beat = now - link_last_write_ >= std::chrono::seconds(1);
  for (int& fd : link_writes_) {
    if (fd < 0) continue;
    if (close_all) {
      close(fd);
      fd = -1;
    } else if (beat) {
      const char byte = '.';
      ssize_t n = write(fd, &byte, 1);
      (void)n;  // EAGAIN: the pipe is full of earlier beats; EPIPE: the process is gone
    }
  }
  if (beat) link_last_write_ = now;
}

int ProcessGroup::heartbeats_poll() {
  const auto now = std::chrono::steady_clock::now();
  int quiet = -1;
  for (size_t i = 0; i < heartbeats_.size(); ++i) {
    Heartbeat& h = heartbeats_[i];
    if (h.fd < 0) continue;
    int64_t steps[64];
    while (true) {
      const ssize_t n = read(h.fd, steps, sizeof(steps));
      if (n >= static_cast<ssize_t>(sizeof(int64_t))) {
        h.seen = true;
        h.last = now;
        h.step = steps[n / static_cast<ssize_t>(sizeof(int64_t)) - 1];
        continue;
      }
      if (n == 0) {  // the program closed it (exited): its exit is what counts now
        close(h.fd);
        h.fd = -1;
      }
      break;
    }
    // Only a process that has beaten is held to it (a program that is not ZeroTrain never does).
    if (quiet < 0 && h.fd >= 0 && h.seen && running_[i] &&
        now - h.last > options_.heartbeat_timeout) {
      quiet = static_cast<int>(i);
    }
  }
  return quiet;
}

void ProcessGroup::handlers_restore() {
  for (int i = 0; i < kNumCaught; ++i) sigaction(kCaughtSignals[i], &g_old_actions[i], nullptr);
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
  sigaction(SIGPIPE, &g_old_pipe, nullptr);
  int write_fd = g_wake_write.exchange(-1);
  if (write_fd >= 0) close(write_fd);
  if (g_wake_read >= 0) close(g_wake_read);
  g_wake_read = -1;
  g_group_active = false;
}

GroupResult ProcessGroup::wait() {
  ZT_ASSERT(!finished_, "ProcessGroup::wait() called twice");
  return supervise(LoopStart::kSupervise);
}

ProcessGroup::~ProcessGroup() {
  if (!finished_) supervise(LoopStart::kStopNow);
  for (Heartbeat& h : heartbeats_) {
    if (h.fd >= 0) close(h.fd);
  }
  for (Relay& r : relays_) {
    if (r.fd >= 0) close(r.fd);
  }
  for (int fd : link_writes_) {
    if (fd >= 0) close(fd);
  }
}

Result<std::string> executable_resolve(std::string_view program, std::string_view path_env) {
  if (program.empty()) return invalid_argument("PROGRAM is empty; pass the program to run");
  std::string name(program);
  if (name.find('/') != std::string::npos) {
    int err = executable_check(name);
    if (err == 0) return name;
    if (err == ENOENT) return not_found("PROGRAM {} does not exist", name);
    if (err == EISDIR) return invalid_argument("PROGRAM {} is a directory", name);
    return invalid_argument("PROGRAM {} is not executable; chmod +x it{}", name,
                            script_hint(program));
  }
  bool seen_not_executable = false;
  std::string_view rest = path_env;
  while (true) {
    size_t colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    int err = executable_check(candidate);
    if (err == 0) return candidate;
    seen_not_executable = seen_not_executable || err == EACCES;
    if (colon == std::string_view::npos) break;
    rest = rest.substr(colon + 1);
  }
  std::string here_hint = executable_check("./" + name) != ENOENT
                              ? fmt::format("; to run the file in this folder, write ./{}", name)
                              : "";
  return not_found("PROGRAM '{}' was not found on PATH{}{}{}", name,
                   seen_not_executable ? " (a match there is not executable)" : "", here_hint,
                   script_hint(program));
}

std::vector<std::string> environ_copy() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

void env_set(std::vector<std::string>& env, std::string_view key, std::string_view value) {
  std::string entry = fmt::format("{}={}", key, value);
  for (std::string& e : env) {
    if (e.size() > key.size() && e.compare(0, key.size(), key) == 0 && e[key.size()] == '=') {
      e = std::move(entry);
      return;
    }
  }
  env.push_back(std::move(entry));
}

std::optional<std::string_view> env_find(const std::vector<std::string>& env,
                                         std::string_view key) {
  for (const std::string& e : env) {
    if (e.size() > key.size() && e.compare(0, key.size(), key) == 0 && e[key.size()] == '=') {
      return std::string_view(e).substr(key.size() + 1);
    }
  }
  return std::nullopt;
}

}  // namespace zt::launcher
