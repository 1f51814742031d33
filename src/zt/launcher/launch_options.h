// The flags of `zt launch`: DeepSpeed's `deepspeed` runner flags (reference §5) plus ZeroTrain's
// --num_procs (N CPU ranks, no GPU needed). Flags come before PROGRAM; PROGRAM and everything
// after it go to the ranks untouched ("--" may end the flags explicitly). Values are given as
// `--flag VALUE` or `--flag=VALUE` (short flags also `-HVALUE`); unlike Python's argparse,
// abbreviated flag names are not accepted. A few hidden --zt_* flags are what the launcher passes
// to itself on each node of a multi-node job (the node launcher, DeepSpeed's launch.py) and to the
// pre-flight responder; they are not for users and not in --help.
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
  // ZeroTrain: N CPU ranks (no hostfile), or N CPU ranks on each host of an explicit -H hostfile
  // (as --num_gpus N takes the first N slots of each host); -1: not given
  int num_procs = -1;
  int master_port = kDefaultMasterPort;
  std::string master_addr;  // empty: 127.0.0.1 on one machine, the first host's address on several
  std::string launcher = kLocalLauncher;  // 'ssh' when not given and several hosts / --force_multi
  bool launcher_given = false;
  std::vector<std::string> launcher_args;  // --launcher_args, split as Python's shlex.split
  int node_rank = -1;     // --node_rank (with --no_ssh, or the node launcher); -1: not given
  bool no_ssh = false;    // a scheduler started zt launch on every node: run node --node_rank
  bool force_multi = false;
  int ssh_port = -1;      // -1: ssh's own default (the user's ssh config)
  bool no_ssh_check = false;
  bool no_local_rank = false;
  bool module = false;     // PROGRAM is a Python module: python3 -u -m PROGRAM
  bool no_python = false;  // PROGRAM runs as given, even a .py file
  bool save_pid = false;
  std::optional<std::string> each_rank_log_dir;  // --enable_each_rank_log DIR
  bool bind_cores_to_rank = false;
  std::optional<std::string> bind_core_list;
  std::string autotuning;  // --autotuning tune|run (empty: not given); run by the CLI's autotuner
  bool help = false;
  // Hidden: the node launcher of a multi-node job (set by the master launcher).
  std::string world_info;           // --world_info: base64 of the JSON {host: [slots]}
  std::string job_token;            // --zt_job_token: the job's ZT_JOB_TOKEN
  std::string slot_kind;            // --zt_slot_kind gpu|cpu ("" : gpu)
  bool link_stdin = false;          // --zt_link_stdin: stdin is the link to the master
  bool prefix_output = false;       // --zt_prefix_output: "[rank R] " before each output line
  std::string preflight;            // --zt_preflight ADDR,PORT,KIND,N: answer the pre-flight
  std::string program;
  std::vector<std::string> program_args;
};

// Parses the arguments after `zt launch`. Errors name the flag and the bad value.
// PROGRAM is required except with --help and --zt_preflight.
Result<LaunchOptions> launch_options_parse(const std::vector<std::string>& args);

// The text printed by `zt launch --help`.
std::string launch_usage();

}  // namespace zt::launcher
