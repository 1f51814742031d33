// What each rank of one node runs with, as DeepSpeed's launch.py sets it (reference §5): the
// launcher's environment plus MASTER_ADDR, MASTER_PORT, WORLD_SIZE, CROSS_RANK (node index),
// CROSS_SIZE (nodes), LOCAL_SIZE, RANK (global, hostfile order), LOCAL_RANK (= RANK % LOCAL_SIZE),
// CUDA_VISIBLE_DEVICES = the node's whole slot list (each rank picks its GPU by LOCAL_RANK; left
// alone for CPU ranks), ZT_JOB_TOKEN, and OMP_NUM_THREADS when cores are bound. The command is
// PROGRAM's command (program.h: PROGRAM, or python3 -u [-m] PROGRAM) [--local_rank=N] ARGS..., the
// flag right after the script, as DeepSpeed puts it. With `prefix_output` (a node of a multi-node
// job) each rank's output lines start with "[rank R] ".
#pragma once

#include <string>
#include <vector>

#include "zt/launcher/launch_options.h"
#include "zt/launcher/process_group.h"
#include "zt/launcher/program.h"
#include "zt/launcher/world.h"

namespace zt::launcher {

struct NodePlanInputs {
  const LaunchOptions* options = nullptr;
  const WorldInfo* world = nullptr;
  int node_rank = 0;                  // index of this node in world->hosts
  std::vector<std::string> base_env;  // the launcher's environment
  ProgramCommand program;             // how PROGRAM runs here (program_command)
  std::string job_token;              // ZT_JOB_TOKEN, the same for every rank of the job
  std::string log_prefix;  // "DIR/<timestamp>" for --enable_each_rank_log; empty: no logs
  std::vector<std::vector<int>> rank_cpus;  // per local rank (--bind_cores_to_rank); or empty
  bool prefix_output = false;               // relay output as "[rank R] " lines
};

// One ProcessSpec per slot of node `node_rank`, labelled "rank R".
std::vector<ProcessSpec> node_process_specs(const NodePlanInputs& in);

// "DIR/<YYYYmmddHHMMSS>_rank<R>.log": DeepSpeed's per-rank log name.
std::string rank_log_path(const std::string& log_prefix, int rank);

// A random 128-bit hex token (getrandom), new for every launch: ranks check it at the
// rendezvous so that a stale rank of another job cannot join.
std::string job_token_new();

}  // namespace zt::launcher
