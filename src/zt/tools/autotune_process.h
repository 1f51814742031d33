// The autotuner's child processes (autotune_session.cc): each trial, and `run`'s training, is a
// `zt launch` started here in its own process group, so a Ctrl-C reaches only the tuner, which
// passes one SIGTERM on (the launcher then stops its ranks), and a trial past its timeout is
// stopped the same way.
#pragma once

#include <string>
#include <vector>

#include "zt/core/status.h"

namespace zt::tools {

// While alive, SIGINT, SIGTERM and SIGHUP are caught (the previous handlers come back after):
// stop_signal() says which one came, 0 while none did. One at a time.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};
int stop_signal();

enum class ChildEnd : unsigned char { kExited, kTimeout, kInterrupted };
struct ChildResult {
  ChildEnd end = ChildEnd::kExited;
  int exit_code = 0;  // the shell's view: the code, or 128 + signal
};

// Runs argv (argv[0] a path) with the environment `env` ("KEY=VALUE"); stdout and stderr go to
// `log_path` (stdin from /dev/null), or are inherited when it is empty. The child gets SIGTERM
// at `timeout_s` (<= 0: none) or when a stop signal arrives, and SIGKILL 20 s later; it dies
// with this process (PR_SET_PDEATHSIG).
Result<ChildResult> child_run(const std::vector<std::string>& argv,
                              const std::vector<std::string>& env, const std::string& log_path,
                              double timeout_s);

// The first port from `from` upwards that can be bound now (the launcher checks again).
int port_free_from(int from);

}  // namespace zt::tools
