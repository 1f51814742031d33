// The multi-node runners that start one node launcher per host (multi_node.h): `ssh`, zt launch's
// own parallel ssh (the default for several hosts), and `pdsh`, as DeepSpeed runs it.
//
// ssh: after the pre-flight (preflight.h), one ssh process per remote host (a host that is this
// machine runs its node launcher directly) carries `cd CWD && exec env K=V... zt launch
// --node_rank=I ...`. The master writes a byte to each ssh's stdin every second; a node launcher
// that reads EOF or nothing for ZT_NODE_LINK_TIMEOUT_S stops its ranks. The first node to report a
// failed rank (a marker line on its stderr), or to end non-zero, or whose ssh exits 255 (node
// lost), makes the master close every other link, so every node stops its ranks; the master exits
// with the failing rank's code and one line naming the rank and the host. SIGINT/SIGTERM to the
// master does the same. Each node's output comes back as "[rank R] " lines.
//
// The ssh program is `ssh` from PATH, or $ZT_SSH when set: a stand-in with ssh's command line
// (tests run a whole multi-node job on one machine with a script that runs the command locally).
#pragma once

#include <memory>
#include <string>

#include "zt/core/status.h"
#include "zt/launcher/runner.h"

namespace zt::launcher {

inline constexpr const char* kSshProgramEnv = "ZT_SSH";

std::unique_ptr<Runner> ssh_runner_new();
std::unique_ptr<Runner> pdsh_runner_new();

// $ZT_SSH, else ssh on PATH; an error naming the Debian package when there is none.
Result<std::string> ssh_program_find();

// --master_addr when given; else the first host's address as DeepSpeed finds it: the first word
// `hostname -I` prints there (run through ssh; for this machine, read here). 127.0.0.1 when every
// host is this machine.
Result<std::string> master_addr_decide(const WorldInfo& world, const LaunchOptions& o,
                                       const std::string& ssh);

}  // namespace zt::launcher
