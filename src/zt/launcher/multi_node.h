// The pieces of a multi-node job that travel between machines: DeepSpeed's --world_info (base64 of
// the JSON {host: [slots]}, hosts in rank order), the node launcher's command line, the remote
// shell command that carries it through ssh or pdsh, and the one-line failure marker a node
// launcher prints for the master launcher (which rank failed, with which code).
//
// The node launcher is `zt launch` itself (DeepSpeed's launch.py), started on each node as
//   ZT_BIN launch --node_rank=I --world_info=B64 --master_addr=A --master_port=P
//       --zt_job_token=T --zt_slot_kind=gpu|cpu [--zt_link_stdin] --zt_prefix_output
//       [--no_local_rank] [--module|--no_python] [--enable_each_rank_log=DIR]
//       [--bind_cores_to_rank [--bind_core_list=L]] -- PROGRAM ARGS...
// and through ssh the remote shell runs
//   cd CWD && exec env K=V... ZT_BIN launch ...
// with every word shell-quoted (shell_quote.h), so values never reach a shell unquoted.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"
#include "zt/launcher/env_export.h"
#include "zt/launcher/hostfile.h"
#include "zt/launcher/launch_options.h"
#include "zt/launcher/world.h"

namespace zt::launcher {

// URL-safe base64 of the JSON object {host: [slots...]} in host order, as DeepSpeed's runner.py
// encodes it (base64.urlsafe_b64encode(json.dumps(...))).
std::string world_info_encode(const Resources& hosts);
// The inverse; accepts the standard and the URL-safe alphabet. Errors name --world_info.
Result<Resources> world_info_decode(std::string_view b64);

// The marker a node launcher writes to stderr (one line) when one of its ranks fails or goes
// silent; the master launcher swallows it and names the rank and host in its own last line.
inline constexpr const char* kNodeFailureMarker = "zt-launch-node-failure ";
struct NodeFailure {
  int rank = -1;
  int code = 1;      // the node launcher's exit code: the rank's shell code, or 124 when silent
  std::string what;  // "exited with code 3", "was killed by signal 9 (SIGKILL)", ...
  friend bool operator==(const NodeFailure&, const NodeFailure&) = default;
};
// "zt-launch-node-failure rank=R code=C what=TEXT" (no newline).
std::string node_failure_marker(const NodeFailure& failure);
std::optional<NodeFailure> node_failure_parse(std::string_view line);

// What the master launcher passes to every node launcher.
struct NodeCommandInputs {
  const LaunchOptions* options = nullptr;
  const WorldInfo* world = nullptr;
  std::string zt_bin;       // absolute path of zt, the same on every node
  std::string master_addr;  // decided by the master
  std::string job_token;
  bool link_stdin = true;   // ssh: the stdin link; pdsh: none
};

// argv of the node launcher for node `node_rank` ("3", or pdsh's "%n"), zt_bin first.
std::vector<std::string> node_launcher_argv(const NodeCommandInputs& in,
                                            std::string_view node_rank);

// "cd CWD && exec env K=V ... ARGV...": every word quoted for the remote shell.
std::string remote_command(const std::string& cwd, const std::vector<ExportedVar>& env,
                           const std::vector<std::string>& argv);

// ssh's options for a job: BatchMode (never a password prompt), no terminal, and keep-alives that
// end ssh with code 255 when the node stops answering for kSshAliveInterval * kSshAliveCount s.
inline constexpr int kSshAliveInterval = 2;
inline constexpr int kSshAliveCount = 5;
inline constexpr int kSshConnectTimeout = 10;
// ssh [--launcher_args...] -o BatchMode=yes -o ... [-p PORT] -- HOST REMOTE. --launcher_args
// come first: for ssh the first value of an option wins, so the user's choice does.
std::vector<std::string> ssh_argv(const std::string& ssh, const LaunchOptions& o,
                                  const std::string& host, const std::string& remote);

// pdsh -S -f 1024 -w h1,h2 [--launcher_args...] REMOTE, as DeepSpeed's PDSHRunner builds it.
std::vector<std::string> pdsh_argv(const std::string& pdsh, const LaunchOptions& o,
                                   const Resources& hosts, const std::string& remote);

}  // namespace zt::launcher
