// The MPI and SLURM runners (--launcher openmpi|mpich|impi|mvapich|slurm): the whole job is one
// mpirun or srun command, built as DeepSpeed's multinode_runner.py builds it (reference §5), run
// through the spawner; mpirun/srun start, place and tear down the ranks on every node, and
// zt launch exits with its exit code. The ranks find RANK, WORLD_SIZE and LOCAL_RANK from the MPI's
// or SLURM's own variables (comm/env.h); MASTER_ADDR and MASTER_PORT are exported with the
// environment of env_export.h, and ZT_JOB_TOKEN too, though by name only (`-x ZT_JOB_TOKEN`,
// `-genvlist ZT_JOB_TOKEN`, srun's --export=ALL) from mpirun's/srun's own environment, so the
// job's secret is not on a command line that `ps` shows. PROGRAM runs as program.h says, without
// --local_rank (as DeepSpeed's MPI runners run it). The command lines, after `[LAUNCHER_ARGS]`
// (--launcher_args):
//
//   openmpi  mpirun -n N -hostfile TMP --mca btl ^openib --mca btl_tcp_if_include eth0
//            [LAUNCHER_ARGS] -x UCX_TLS=tcp -x K=V ... -x ZT_JOB_TOKEN PROGRAM ARGS
//            (TMP lists "HOST slots=S" per host; the eth0 pair is left out when LAUNCHER_ARGS set
//            btl_tcp_if_include, as DeepSpeed does. It only concerns MPI's own TCP transport,
//            which ZeroTrain's ranks never open.)
//   mpich    mpirun -n N -ppn P [LAUNCHER_ARGS] -genv K V ... -genv MASTER_ADDR A
//            -genv MASTER_PORT P -genv WORLD_SIZE N -genv LOCAL_SIZE P -genvlist ZT_JOB_TOKEN
//            -hosts H1,H2 PROGRAM ARGS
//   impi     mpirun -ppn P [LAUNCHER_ARGS] -genv K V ... (as mpich) -genv I_MPI_PIN 0 -hosts H1,H2
//            -n 1 -env RANK 0 -env LOCAL_RANK 0 PROGRAM ARGS : -n 1 -env RANK 1 ... (one segment
//            per rank)
//   mvapich  mpirun -np N -ppn P --hostfile TMP [LAUNCHER_ARGS] -env MV2_SMP_USE_CMA 0 ...
//            -env K V ... -genvlist ZT_JOB_TOKEN PROGRAM ARGS  (TMP lists one host per line)
//   slurm    srun -n N [LAUNCHER_ARGS] [--nodelist=H1,H2 --nodes=K [--ntasks-per-node=P]]
//            --export=ALL,K=V,... PROGRAM ARGS
//
// Teardown is the MPI's: Open MPI's mpirun and srun stop every rank when one exits non-zero or is
// killed; MPICH's hydra (mpich, impi, mvapich) stops them when one is killed by a signal, but a
// rank that exits with an error code leaves the others running until they end by themselves (a
// ZeroTrain rank notices a dead peer at its next collective: docs/comm.md). zt launch's per-rank
// heartbeat does not reach ranks started by an MPI.
//
// Differences from DeepSpeed, each because DeepSpeed's line does not work as written: MPICH's and
// MVAPICH's hydra take `-genv/-env NAME VALUE` as two words (DeepSpeed joins them with '=');
// values are passed as argv words, never wrapped in extra quotes; srun has no --include, so
// -i/-e/--num_nodes/--num_gpus become the filtered world's --nodelist/--nodes; N counts the
// filtered world. Like DeepSpeed, openmpi/mpich/impi/mvapich refuse -i/-e/--num_nodes/--num_gpus,
// and mpich/impi/mvapich need the same number of slots on every host. --bind_cores_to_rank and
// --enable_each_rank_log are refused (mpirun's and srun's own options do both, through
// --launcher_args). Open MPI's mpirun refuses to run as root: as DeepSpeed users do, pass
// --launcher_args=--allow-run-as-root (or set OMPI_ALLOW_RUN_AS_ROOT=1 and
// OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1); zt launch says so before starting it rather than adding it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"
#include "zt/launcher/env_export.h"
#include "zt/launcher/launch_options.h"
#include "zt/launcher/runner.h"
#include "zt/launcher/world.h"

namespace zt::launcher {

// Whether `lower_name` (already lower-cased) is one of openmpi, mpich, impi, mvapich, slurm.
bool is_mpi_runner(std::string_view lower_name);

// The runner for one of those names (lower-cased); any other name is an internal error.
Result<std::unique_ptr<Runner>> mpi_runner_create(std::string_view lower_name);

// DeepSpeed's refusals for `runner` (validate_args and get_cmd's equal-slots checks), plus the
// flags the MPI runners do not carry. Errors name the runner and the flag.
Status mpi_options_check(std::string_view runner, const LaunchOptions& options,
                         const WorldInfo& world);

// The program to execute for `runner` (mpirun or srun), found on the PATH of `env`, with a
// one-line error naming what to install (Debian's openmpi-bin, mpich, slurm-client) when it is
// missing. For openmpi and mpich, `mpirun --version` must name that MPI; when update-alternatives
// points `mpirun` at the other one, Debian's mpirun.openmpi / mpirun.mpich is used instead.
Result<std::string> mpi_backend_resolve(std::string_view runner,
                                        const std::vector<std::string>& env);

// What the command is built from; pure data, so the construction is testable.
struct MpiCommandInputs {
  std::string runner;  // lower-case name
  const LaunchOptions* options = nullptr;
  const WorldInfo* world = nullptr;
  std::vector<ExportedVar> exports;       // exported_env(...)
  std::vector<std::string> program_argv;  // program_command(...).argv + PROGRAM's arguments
  std::string job_token;                  // ZT_JOB_TOKEN
  std::string hostfile_path;              // where hostfile_text will be written (openmpi, mvapich)
};

struct MpiCommand {
  std::vector<std::string> argv;  // argv[0]: mpirun or srun
  std::string hostfile_text;      // to write at hostfile_path first; empty: no hostfile
  // Set in the environment of mpirun/srun itself (srun --export=ALL passes them on; a value with
  // a ',' can only travel this way).
  std::vector<ExportedVar> process_env;
};

// Builds the command (after mpi_options_check). World and options must be non-null; an empty
// master address is an error asking for --master_addr.
Result<MpiCommand> mpi_command(const MpiCommandInputs& in);

}  // namespace zt::launcher
