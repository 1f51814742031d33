// Pre-flight of a multi-node job, before any rank starts: every host answers over ssh (without a
// password), runs the same zt build (version and build id) at the same path, can reach the master
// port (free on the first host), has the slots the hostfile gives it, and has a clock within 5 s
// of this one. Each problem is one line naming the host and the fix. The hosts are asked in
// parallel, each under a time limit, so a dead host costs seconds, not a hang.
//
// Each host runs `ZT_BIN launch --zt_preflight=ADDR,PORT,KIND,N,CHECK` (through ssh, or directly
// for this machine), which prints one JSON line (preflight_answer).
#pragma once

#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/launcher/launch_options.h"
#include "zt/launcher/world.h"

namespace zt::launcher {

inline constexpr double kMaxClockSkewSeconds = 5.0;

// "VERSION+BUILD_ID" of this binary: the ELF GNU build id of the zt executable (a hash of its
// contents when the linker wrote none).
std::string zt_build_identity();

// The responder: prints the JSON line for `spec` ("ADDR,PORT,KIND,N,CHECK", CHECK one of bind,
// connect, none) to stdout. Returns the process exit code (2 for a bad spec).
int preflight_answer(const std::string& spec);

// A program run to its end with its output captured (for ssh probes).
struct Captured {
  int exit_code = -1;  // 128 + signal when killed; -1 when it could not start
  bool timed_out = false;
  std::string out;
  std::string err;
};
// Runs every argv at once (argv[0] found on PATH), each with stdin /dev/null, and waits for all,
// killing what still runs after `timeout_s`.
std::vector<Captured> run_captured_parallel(const std::vector<std::vector<std::string>>& argvs,
                                            double timeout_s);

struct PreflightInputs {
  const LaunchOptions* options = nullptr;
  const WorldInfo* world = nullptr;
  std::string ssh;          // the ssh program
  std::string zt_bin;       // this zt's absolute path, expected on every node
  std::string master_addr;  // decided already
};

// Runs the checks; ok, or one line per problem ("host X: ... ; fix").
Status preflight_run(const PreflightInputs& in);

// The last non-empty line of `text` (ssh's own error), trimmed.
std::string last_line(const std::string& text);

}  // namespace zt::launcher
