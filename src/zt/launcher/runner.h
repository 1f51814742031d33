// Runners: how the ranks of a job get started. The local runner starts every rank of the one
// machine through the spawner (process_group.h). The ssh and pdsh runners (ssh_runner.h) start
// one node launcher (`zt launch --node_rank=N --world_info=...`, DeepSpeed's launch.py) per host;
// the MPI and SLURM runners (mpi_runner.h) hand the whole job to mpirun/srun.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"
#include "zt/launcher/launch_options.h"
#include "zt/launcher/process_group.h"
#include "zt/launcher/program.h"
#include "zt/launcher/world.h"

namespace zt::launcher {

// Everything a runner needs, decided and checked by launch_main before any rank starts.
struct LaunchJob {
  const LaunchOptions* options = nullptr;
  const WorldInfo* world = nullptr;
  std::vector<std::string> base_env;        // the launcher's environment
  std::string exec_path;                    // PROGRAM's command's file here (= program.exec_path)
  ProgramCommand program{};                 // how PROGRAM runs here (empty for multi-node)
  std::string cwd{};                        // the working directory (the nodes cd to it)
  std::string home{};                       // $HOME, for the env file
  std::string zt_bin{};                     // this zt binary's absolute path (/proc/self/exe)
  std::string job_token;                    // ZT_JOB_TOKEN
  std::string log_prefix;                   // "DIR/<timestamp>" or empty
  std::vector<std::vector<int>> rank_cpus;  // per local rank, or empty (no binding)
  ProcessGroupOptions group_options;
};

// How the job ended: the launcher's exit code and, when it did not succeed, the one line that
// says why (which rank, its code or signal, its log).
struct JobOutcome {
  int exit_code = 0;
  std::string message;
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual std::string_view name() const = 0;
  // Runs the job to its end. An error means the ranks could not be started at all.
  virtual Result<JobOutcome> run(const LaunchJob& job) = 0;
};

// The runner for --launcher NAME (case-insensitive, as DeepSpeed lowers it): local, ssh, pdsh,
// openmpi, mpich, impi, mvapich, slurm; any other name is "Unknown launcher".
Result<std::unique_ptr<Runner>> runner_create(std::string_view name);

}  // namespace zt::launcher
