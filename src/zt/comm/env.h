// The distributed environment of this process: which rank it is, how many ranks there are, where
// rank 0 serves the rendezvous store, and how long a collective may take. Read from the variables
// that `zt launch`, `deepspeed` and `torchrun` set (RANK, WORLD_SIZE, ...), or from Open MPI's
// mpirun (OMPI_COMM_WORLD_*), MVAPICH's (MV2_COMM_WORLD_*), MPICH's or Intel MPI's hydra
// (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS) or srun (SLURM_*). Nothing set means a
// single process (world size 1).
// docs/comm.md lists every variable read here.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "zt/core/status.h"

namespace zt {

// Which launcher's variables the environment came from.
enum class DistSource : unsigned char {
  kSingleProcess,  // nothing set: world size 1
  kRankEnv,        // RANK / WORLD_SIZE (zt launch, deepspeed, torchrun)
  kOpenMpi,        // OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (mpirun)
  kMvapich,        // MV2_COMM_WORLD_RANK / MV2_COMM_WORLD_SIZE (MVAPICH's mpirun)
  kPmi,            // PMI_RANK / PMI_SIZE + MPI_LOCALRANKID (MPICH's or Intel MPI's mpirun)
  kSlurm,          // SLURM_PROCID / SLURM_NTASKS (srun)
};
std::string_view dist_source_name(DistSource source);

// DeepSpeed's default collective timeout (deepspeed/constants.py: 30 minutes).
inline constexpr std::chrono::milliseconds kDefaultCommTimeout = std::chrono::minutes(30);

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;  // ranks on this node; world_size when the launcher does not say
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0 only when world_size == 1
  // Shared secret of one job: the rendezvous store refuses messages carrying another token, so a
  // stale process of an earlier job on the same port fails clearly instead of joining.
  std::string job_token;
  std::chrono::milliseconds timeout = kDefaultCommTimeout;
  DistSource source = DistSource::kSingleProcess;
};

// Looks up one environment variable; nullopt when unset. Tests pass a map instead of getenv.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// The process environment (getenv) as an EnvLookup.
EnvLookup process_env();
// Reads the process environment (getenv).
Result<DistEnv> dist_env_from_environment();
// Same rules over an arbitrary lookup.
Result<DistEnv> dist_env_from(const EnvLookup& lookup);

// The collective timeout: ZT_COMM_TIMEOUT_S (seconds, may be fractional; for tests) wins over
// DEEPSPEED_TIMEOUT (minutes, as DeepSpeed reads it), else 30 minutes.
Result<std::chrono::milliseconds> comm_timeout_from(const EnvLookup& lookup);

// The job token: ZT_JOB_TOKEN, else one derived from MASTER_ADDR and MASTER_PORT (so two jobs on
// different ports never share one even when no launcher set it).
std::string job_token_from(const EnvLookup& lookup, std::string_view master_addr, int master_port);

// The host of a SLURM node list that names exactly one host ("node07"); empty for a list of
// several ("gpu[03-05]", "a,b"), where rank 0's host cannot be known without asking SLURM.
std::string slurm_single_host(std::string_view nodelist);

}  // namespace zt
