// The spawner: starts a group of processes and supervises them until they end, the way
// DeepSpeed's launch.py does for one node, and is meant to be reused by the multi-node runners
// (which will start one ssh/pdsh/srun process per node through it).
//
// - Each process runs in its own process group (setpgid), so signalling the group reaches its
//   whole tree; it also gets PR_SET_PDEATHSIG=SIGTERM so it does not outlive a killed launcher.
// - When a process exits non-zero or is killed by a signal, every other group gets SIGTERM, then
//   SIGKILL after `grace` (DeepSpeed: 30 s); wait() returns that first failure. SIGINT, SIGTERM
//   and SIGHUP sent to the launcher stop the group the same way (a second one skips the grace);
//   one the launcher inherited as ignored (nohup) stays ignored, for it and for the processes.
// - stdout/stderr are inherited (passed through unchanged) or both written to a per-process log
//   file. stdin is inherited unless it is a terminal: the processes are not in the terminal's
//   foreground group, so a read would stop them with SIGTTIN; they read /dev/null instead.
// - Relayed output (ProcessSpec::relay_prefix): stdout and stderr come through pipes and are
//   written line by line, prefixed, to the launcher's own stdout/stderr (output_relay.h).
// - Links (multi-node): a process started with `stdin_link` reads a pipe to which the launcher
//   writes one byte every second; stopping the group closes it, so the process sees EOF. On the
//   other side, `link_fd` is such a pipe read by the launcher: EOF, or no byte for
//   `link_timeout`, stops the group (GroupEnd::kLinkLost).
//
// Assumes one ProcessGroup at a time per process (it owns the SIGINT/SIGTERM/SIGHUP handlers
// from start() to the end of wait()), that no one else reaps its children, and that the thread
// calling start() outlives the group (PR_SET_PDEATHSIG fires when the forking thread exits).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"
#include "zt/launcher/output_relay.h"

namespace zt::launcher {

struct ProcessSpec {
  std::string label;              // "rank 2": names the process in messages
  std::string exec_path;          // the file to execute (see executable_resolve)
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::vector<std::string> env;   // the complete environment, "KEY=VALUE"
  std::string log_path;           // empty: inherit stdout/stderr; else both go here (truncated)
  std::vector<int> cpus;          // empty: inherit the CPU affinity; else pinned to these CPUs
  // When set (and no log_path): stdout/stderr are relayed through pipes, each line prefixed.
  std::optional<std::string> relay_prefix{};
  // stdin is a pipe the launcher writes a byte to every second and closes when stopping.
  bool stdin_link = false;
};

struct GroupResult;

struct ProcessGroupOptions {
  std::chrono::milliseconds grace{30000};  // between SIGTERM and SIGKILL
  // Heartbeats (launcher/heartbeat.h): each process gets a pipe whose write end it finds in
  // ZT_HEARTBEAT_FD; one that has beaten once and then stays silent this long (stopped, frozen)
  // stops the group. 0: no pipes, no check.
  std::chrono::milliseconds heartbeat_timeout{0};
  // The link to a master launcher (read end; -1: none): EOF, or no byte for `link_timeout`, stops
  // the group. The processes then read /dev/null, never this descriptor.
  int link_fd = -1;
  std::chrono::milliseconds link_timeout{15000};
  // A relayed stderr line starting with this text is not shown but kept (marker()); the first
  // one ends the group as that process's failure (GroupResult::reported), before it even exits:
  // how a node launcher tells the master which rank failed. Empty: no markers.
  std::string failure_marker{};
  // After the first failure, how long to keep watching before stopping the others: a failure
  // elsewhere often causes others within milliseconds (peers of a killed rank lose their
  // connection), and the reports of processes farther away (over ssh) arrive later. Every
  // failure and marker seen in the window is in GroupResult (early_failures, markers) for the
  // caller to tell cause from consequence. 0: stop at once.
  std::chrono::milliseconds failure_settle{0};
  // Called once when the group starts stopping, with what is known then (end, failure/silent,
  // stopped): a node launcher reports its failure at once, not after the grace.
  std::function<void(const GroupResult&)> on_stop{};
};

struct ProcessExit {
  int index = -1;  // into the specs
  pid_t pid = -1;
  int exit_code = 0;    // meaningful when term_signal == 0
  int term_signal = 0;  // the signal that killed it, or 0
  bool failed() const { return term_signal != 0 || exit_code != 0; }
  // The shell's view: the exit code, or 128 + signal.
  int shell_code() const { return term_signal != 0 ? 128 + term_signal : exit_code; }
  // "exited with code 3" / "was killed by signal 9 (SIGKILL)".
  std::string describe() const;
};

enum class GroupEnd : unsigned char {
  kAllSucceeded,   // every process exited with 0
  kProcessFailed,  // one failed (non-zero exit or a signal); the others were stopped
  kInterrupted,    // the launcher got SIGINT/SIGTERM/SIGHUP; all were stopped
  kSilent,         // one stopped sending heartbeats; it was killed, the others stopped
  kLinkLost,       // the link to the master (link_fd) ended or went silent; all were stopped
};

// The exit code of a job stopped for a silent process (as timeout(1) reports a timeout).
constexpr int kSilentExitCode = 124;
// The exit code of a node launcher that lost its master (as a hangup: 128 + SIGHUP).
constexpr int kLinkLostExitCode = 129;

struct SilentProcess {
  int index = -1;
  pid_t pid = -1;
  double silent_s = 0;      // since its last heartbeat
  int64_t last_step = -1;   // what its last heartbeat said (-1: none yet)
};

struct GroupResult {
  GroupEnd end = GroupEnd::kAllSucceeded;
  ProcessExit failure;      // kProcessFailed: the first process seen to fail
  int launcher_signal = 0;  // kInterrupted: the signal the launcher received
  int stopped = 0;          // processes still running when the stop began
  int failed = 0;           // processes that exited non-zero or by a signal
  SilentProcess silent;     // kSilent
  // kProcessFailed from a failure marker: `failure.index` printed `marker` (its exit code is
  // not known yet; the launcher that reads the marker decides the code).
  bool reported = false;
  std::string marker{};
  bool link_eof = false;    // kLinkLost: EOF (else silence)
  double link_silent_s = 0; // kLinkLost: seconds since the last byte
  // what the launcher exits with: 0, failure.shell_code(), 128+signal, 124 silent, 129 link lost
  int exit_code = 0;
  // Every process's exit that failed before the stop began, in the order seen, and the last
  // failure marker each process printed (empty: none), indexed like the specs.
  std::vector<ProcessExit> early_failures{};
  std::vector<std::string> markers{};
};

class ProcessGroup {
 public:
  // Starts every spec in order. When one cannot start (log file, fork, exec), those already
  // started are stopped and reaped, and the error names the spec's label and the cause.
  static Result<std::unique_ptr<ProcessGroup>> start(std::vector<ProcessSpec> specs,
                                                     ProcessGroupOptions options);
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  // Stops (SIGTERM, grace, SIGKILL) and reaps whatever still runs if wait() was not called.
  ~ProcessGroup();

  const std::vector<pid_t>& pids() const { return pids_; }
  // The last failure-marker line process `index` printed (empty: none).
  const std::string& marker(size_t index) const { return markers_[index]; }
  // Supervises until every process has ended (see the file comment). Call once.
  GroupResult wait();

 private:
  enum class LoopStart : unsigned char { kSupervise, kStopNow };
  ProcessGroup(std::vector<ProcessSpec> specs, ProcessGroupOptions options);
  Status spawn(size_t index, int stdin_fd);
  GroupResult supervise(LoopStart start);
  void groups_signal(int sig);
  void handlers_restore();
  // Reads the heartbeats that arrived; the index of a process silent past the timeout, or -1.
  int heartbeats_poll();
  // Reads what the relay pipes hold; at `final`, also ends every relay (a partial line is shown).
  void relays_pump(bool final);
  // Writes the once-a-second byte to every stdin link; closes them all at `close_all`.
  void links_tick(bool close_all);

  std::vector<ProcessSpec> specs_;
  ProcessGroupOptions options_;
  std::vector<pid_t> pids_;
  std::vector<char> running_;     // per spec: 1 while not yet reaped
  std::vector<char> group_gone_;  // per spec: 1 once its process group is known to be empty
  struct Heartbeat {
    int fd = -1;  // read end
    bool seen = false;
    int64_t step = -1;
    std::chrono::steady_clock::time_point last;
  };
  std::vector<Heartbeat> heartbeats_;
  struct Relay {
    int fd = -1;  // read end; -1 once at EOF
    std::unique_ptr<LineRelay> relay;
  };
  std::vector<Relay> relays_;  // 2 per spec (stdout, stderr) when relayed
  std::vector<std::string> markers_;
  int marker_index_ = -1;  // the first process that printed a failure marker
  std::vector<int> link_writes_;  // per spec: write end of its stdin link, or -1
  std::chrono::steady_clock::time_point link_last_write_;
  bool finished_ = false;
};

// Finds PROGRAM as execvp would: a name with '/' is used as it is, else each PATH entry is tried.
// Errors say what is wrong (missing, not executable, a directory) and how to fix it.
Result<std::string> executable_resolve(std::string_view program, std::string_view path_env);

// The current process environment as "KEY=VALUE" strings.
std::vector<std::string> environ_copy();
// Sets KEY=VALUE in `env`, replacing an existing KEY.
void env_set(std::vector<std::string>& env, std::string_view key, std::string_view value);
// The value of KEY in `env`, if set (a view into `env`).
std::optional<std::string_view> env_find(const std::vector<std::string>& env, std::string_view key);

}  // namespace zt::launcher
