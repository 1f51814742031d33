// The flags of `zt launch`: DeepSpeed's `deepspeed` runner flags (reference §5) plus ZeroTrain's
// --num_procs (N CPU ranks, no GPU needed). Flags come before PROGRAM; PROGRAM and everything
// after it go to the ranks untouched ("--" may end the flags explicitly). Values are given as
// `--flag VALUE` or `--flag=VALUE` (short flags also `-HVALUE`); unlike Python's argparse,
// abbreviated flag names are not accepted. Flags that only matter for several machines are either
// accepted as no-ops on one machine or refused with a message saying multi-node is a later issue.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "zt/core/status.h"

namespace zt::launcher {

inline constexpr const char* kDefaultHostfile = "/job/hostfile";  // DeepSpeed's DLTS_HOSTFILE
inline constexpr int kDefaultMasterPort = 29500;                  // TORCH_DISTRIBUTED_DEFAULT_PORT
inline constexpr const char* kLocalLauncher = "local";

struct LaunchOptions {
  // -H/--hostfile; `hostfile_given` says the user named one (then it must exist; the default is
  // used only when the file is there, as DeepSpeed does).
  std::string hostfile = kDefaultHostfile;
  bool hostfile_given = false;
  std::string include;  // -i/--include
  std::string exclude;  // -e/--exclude
  int num_nodes = -1;   // -1: not given
  int num_gpus = -1;    // --num_gpus/--num_accelerators; -1: not given
  int num_procs = -1;   // ZeroTrain: N CPU ranks; -1: not given
  int master_port = kDefaultMasterPort;
  std::string master_addr;  // empty: 127.0.0.1 on one machine
  std::string launcher = kLocalLauncher;
  bool launcher_given = false;
  bool no_local_rank = false;
  bool no_python = false;  // implied anyway: PROGRAM is any executable (--module is refused)
  bool save_pid = false;
  std::optional<std::string> each_rank_log_dir;  // --enable_each_rank_log DIR
  bool bind_cores_to_rank = false;
  std::optional<std::string> bind_core_list;
  std::string autotuning;  // --autotuning tune|run (empty: not given); run by the CLI's autotuner
  bool help = false;
  std::string program;
  std::vector<std::string> program_args;
};

// Parses the arguments after `zt launch`. Errors name the flag and the bad value.
Result<LaunchOptions> launch_options_parse(const std::vector<std::string>& args);

// The text printed by `zt launch --help`.
std::string launch_usage();

}  // namespace zt::launcher
