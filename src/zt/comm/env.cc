// Parsing of the launcher environment (env.h). Precedence: RANK (set explicitly by a launcher)
// over OMPI_COMM_WORLD_* over MV2_COMM_WORLD_* over PMI_* (with MPICH's MPI_LOCALRANKID) over
// SLURM_*, so a launcher that sets RANK itself inside an srun step is read as it meant, and the
// ranks of an mpirun that SLURM started (its proxies are srun tasks) take the MPI's numbering, not
// the proxy's. WORLD_SIZE without RANK is read as RANK/WORLD_SIZE unless an MPI numbered the
// ranks (DeepSpeed's mpich and impi runners export WORLD_SIZE and LOCAL_SIZE next to PMI_RANK);
// then WORLD_SIZE and LOCAL_SIZE must agree with the MPI's. Empty variables count as unset.
#include "zt/comm/env.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace zt {
namespace {

std::optional<std::string> get(const EnvLookup& lookup, std::string_view name) {
  std::optional<std::string> v = lookup(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

Result<int> parse_int(std::string_view name, const std::string& value) {
  int out = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (ec != std::errc() || ptr != end) {
    return invalid_argument("{}='{}' is not an integer; unset it or give a whole number", name,
                            value);
  }
  return out;
}

// An optional integer variable: nullopt when unset, an error when set but not an integer.
Result<std::optional<int>> get_int(const EnvLookup& lookup, std::string_view name) {
  std::optional<std::string> v = get(lookup, name);
  if (!v) return std::optional<int>();
  ZT_ASSIGN_OR_RETURN(int x, parse_int(name, *v));
  return std::optional<int>(x);
}

Result<double> parse_positive_number(std::string_view name, const std::string& value) {
  char* end = nullptr;
  double x = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !std::isfinite(x) || x <= 0) {
    return invalid_argument("{}='{}' is not a positive number", name, value);
  }
  return x;
}

// The variable names of one launcher, so the checks below are written once.
struct LauncherVars {
  DistSource source;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_size;
};

Status check_ranks(const LauncherVars& v, const DistEnv& env) {
  if (env.world_size < 1) {
    return invalid_argument("{}={} must be at least 1", v.world, env.world_size);
  }
  if (env.rank < 0 || env.rank >= env.world_size) {
    return invalid_argument("{}={} is not in [0, {}={}); the launcher set inconsistent values",
                            v.rank, env.rank, v.world, env.world_size);
  }
  if (env.local_size < 1 || env.local_size > env.world_size) {
    return invalid_argument("{}={} must be in [1, {}={}]", v.local_size, env.local_size, v.world,
                            env.world_size);
  }
  if (env.local_rank < 0 || env.local_rank >= env.local_size) {
    return invalid_argument("{}={} is not in [0, {}={})", v.local_rank, env.local_rank,
                            v.local_size, env.local_size);
  }
  return Status::ok();
}

// Reads rank, world size, local rank and local size under one launcher's names. `local_size_alt`
// is a second name for the local size (torchrun's LOCAL_WORLD_SIZE), `local_size_default` the
// value when neither is set.
Status read_ranks(const EnvLookup& lookup, const LauncherVars& v, const char* local_size_alt,
                  DistEnv& env) {
  ZT_ASSIGN_OR_RETURN(std::optional<int> rank, get_int(lookup, v.rank));
  ZT_ASSIGN_OR_RETURN(std::optional<int> world, get_int(lookup, v.world));
  if (!world) {
    return invalid_argument(
        "{} is set but {} is not; set both (the number of processes in the "
        "job, and this process's index)",
        v.rank, v.world);
  }
  if (!rank && *world != 1) {
    return invalid_argument("{}={} is set but {} is not; set both", v.world, *world, v.rank);
  }
  env.rank = rank.value_or(0);
  env.world_size = *world;
  ZT_ASSIGN_OR_RETURN(std::optional<int> local_rank, get_int(lookup, v.local_rank));
  if (!local_rank && env.world_size > 1) {
    return invalid_argument(
        "{} is not set (needed with {}={} to pick this process's GPU); the "
        "launcher normally sets it",
        v.local_rank, v.world, env.world_size);
  }
  env.local_rank = local_rank.value_or(0);
  ZT_ASSIGN_OR_RETURN(std::optional<int> local_size, get_int(lookup, v.local_size));
  if (!local_size && local_size_alt != nullptr) {
    ZT_ASSIGN_OR_RETURN(local_size, get_int(lookup, local_size_alt));
  }
  env.local_size = local_size.value_or(env.world_size);
  env.source = v.source;
  return check_ranks(v, env);
}

// SLURM_TASKS_PER_NODE is "2(x3),1": node i's task count, run-length encoded.
std::optional<int> slurm_tasks_on_node(std::string_view spec, int node) {
  int seen = 0;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    int count = 0, repeat = 1;
    size_t paren = item.find("(x");
    std::string_view count_text = item.substr(0, paren);
    auto r = std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
    if (r.ec != std::errc()) return std::nullopt;
    if (paren != std::string_view::npos) {
      std::string_view rep = item.substr(paren + 2);
      if (rep.empty() || rep.back() != ')') return std::nullopt;
      rep.remove_suffix(1);
      auto r2 = std::from_chars(rep.data(), rep.data() + rep.size(), repeat);
      if (r2.ec != std::errc()) return std::nullopt;
    }
    if (node < seen + repeat) return count;
    seen += repeat;
  }
  return std::nullopt;
}

Status read_slurm(const EnvLookup& lookup, DistEnv& env) {
  const LauncherVars v{DistSource::kSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                       "SLURM_NTASKS_PER_NODE"};
  ZT_RETURN_IF_ERROR(read_ranks(lookup, v, nullptr, env));
  // SLURM_NTASKS_PER_NODE is only set with --ntasks-per-node; otherwise this node's count comes
  // from SLURM_TASKS_PER_NODE at index SLURM_NODEID.
  if (!get(lookup, "SLURM_NTASKS_PER_NODE")) {
    std::optional<std::string> spec = get(lookup, "SLURM_TASKS_PER_NODE");
    ZT_ASSIGN_OR_RETURN(std::optional<int> node, get_int(lookup, "SLURM_NODEID"));
    if (spec) {
      std::optional<int> n = slurm_tasks_on_node(*spec, node.value_or(0));
      if (!n) {
        return invalid_argument(
            "SLURM_TASKS_PER_NODE='{}' cannot be read (expected a list like "
            "'2(x3),1')",
            *spec);
      }
      env.local_size = *n;
      ZT_RETURN_IF_ERROR(check_ranks(v, env));
    }
  }
  if (!get(lookup, "MASTER_ADDR") && env.world_size > 1) {
    std::optional<std::string> list = get(lookup, "SLURM_NODELIST");
    if (!list) list = get(lookup, "SLURM_JOB_NODELIST");
    std::string host = list ? slurm_single_host(*list) : std::string();
    if (host.empty()) {
      return invalid_argument(
          "MASTER_ADDR is not set and SLURM_NODELIST='{}' names several hosts; export "
          "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1) before srun",
          list.value_or(""));
    }
    env.master_addr = host;
  }
  return Status::ok();
}

// An MPI's ranks: MASTER_ADDR and MASTER_PORT cannot be guessed (the MPI does not say where rank 0
// runs), and a WORLD_SIZE/LOCAL_SIZE exported next to the MPI's variables must agree with them.
Status read_mpi(const EnvLookup& lookup, const LauncherVars& v, const char* how, DistEnv& env) {
  ZT_RETURN_IF_ERROR(read_ranks(lookup, v, nullptr, env));
  const std::pair<const char*, int> exported[] = {{"WORLD_SIZE", env.world_size},
                                                  {"LOCAL_SIZE", env.local_size}};
  const char* theirs[] = {v.world, v.local_size};
  for (size_t i = 0; i < 2; ++i) {
    ZT_ASSIGN_OR_RETURN(std::optional<int> given, get_int(lookup, exported[i].first));
    if (given && *given != exported[i].second) {
      return invalid_argument("{}={} disagrees with {}={} set by {}; unset {} or fix its value",
                              exported[i].first, *given, theirs[i], exported[i].second, how,
                              exported[i].first);
    }
  }
  if (env.world_size > 1) {
    for (const char* name : {"MASTER_ADDR", "MASTER_PORT"}) {
      if (!get(lookup, name)) {
        return invalid_argument(
            "{} is not set ({}={} from {}); export it to every rank ({} of the host of rank 0), "
            "or start the job with zt launch --launcher, which exports it",
            name, v.world, env.world_size, how,
            std::string_view(name) == "MASTER_ADDR" ? "the address" : "a free port");
      }
    }
  }
  return Status::ok();
}

constexpr LauncherVars kOpenMpiVars{DistSource::kOpenMpi, "OMPI_COMM_WORLD_RANK",
                                    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                    "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr LauncherVars kMvapichVars{DistSource::kMvapich, "MV2_COMM_WORLD_RANK",
                                    "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
                                    "MV2_COMM_WORLD_LOCAL_SIZE"};
constexpr LauncherVars kPmiVars{DistSource::kPmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
                                "MPI_LOCALNRANKS"};

bool any_set(const EnvLookup& lookup, const LauncherVars& v) {
  return get(lookup, v.rank).has_value() || get(lookup, v.world).has_value();
}

// PMI_RANK alone is also set by srun's PMI plugins; hydra (MPICH, Intel MPI) adds the local
// numbering, which is how its ranks are told apart from srun's.
bool pmi_from_hydra(const EnvLookup& lookup) {
  return any_set(lookup, kPmiVars) &&
         (get(lookup, "MPI_LOCALRANKID").has_value() || !get(lookup, "SLURM_PROCID"));
}

}  // namespace

std::string_view dist_source_name(DistSource source) {
  switch (source) {
    case DistSource::kSingleProcess:
      return "single process";
    case DistSource::kRankEnv:
      return "RANK/WORLD_SIZE";
    case DistSource::kOpenMpi:
      return "mpirun (OMPI_COMM_WORLD_*)";
    case DistSource::kMvapich:
      return "MVAPICH's mpirun (MV2_COMM_WORLD_*)";
    case DistSource::kPmi:
      return "MPICH's or Intel MPI's mpirun (PMI_RANK/PMI_SIZE)";
    case DistSource::kSlurm:
      return "srun (SLURM_*)";
  }
  return "?";
}

std::string slurm_single_host(std::string_view nodelist) {
  if (nodelist.empty() || nodelist.find_first_of("[],") != std::string_view::npos) return "";
  return std::string(nodelist);
}

Result<std::chrono::milliseconds> comm_timeout_from(const EnvLookup& lookup) {
  if (std::optional<std::string> s = get(lookup, "ZT_COMM_TIMEOUT_S")) {
    ZT_ASSIGN_OR_RETURN(double sec, parse_positive_number("ZT_COMM_TIMEOUT_S", *s));
    return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(sec * 1000.0)));
  }
  if (std::optional<std::string> m = get(lookup, "DEEPSPEED_TIMEOUT")) {
    ZT_ASSIGN_OR_RETURN(double min, parse_positive_number("DEEPSPEED_TIMEOUT (minutes)", *m));
    return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(min * 60'000.0)));
  }
  return kDefaultCommTimeout;
}

std::string job_token_from(const EnvLookup& lookup, std::string_view master_addr, int master_port) {
  if (std::optional<std::string> t = get(lookup, "ZT_JOB_TOKEN")) return *t;
  return fmt::format("zt-default-{}:{}", master_addr, master_port);
}

Result<DistEnv> dist_env_from(const EnvLookup& lookup) {
  DistEnv env;
  ZT_ASSIGN_OR_RETURN(env.timeout, comm_timeout_from(lookup));
  const bool mpi_numbered =
      any_set(lookup, kOpenMpiVars) || any_set(lookup, kMvapichVars) || pmi_from_hydra(lookup);
  if (get(lookup, "RANK") || (get(lookup, "WORLD_SIZE") && !mpi_numbered)) {
    const LauncherVars v{DistSource::kRankEnv, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE"};
    ZT_RETURN_IF_ERROR(read_ranks(lookup, v, "LOCAL_WORLD_SIZE", env));
    if (!get(lookup, "MASTER_ADDR") && env.world_size > 1) {
      return invalid_argument(
          "MASTER_ADDR is not set (WORLD_SIZE={}); set it to the address of "
          "the host of rank 0, or start the job with `zt launch`",
          env.world_size);
    }
  } else if (any_set(lookup, kOpenMpiVars)) {
    ZT_RETURN_IF_ERROR(read_ranks(lookup, kOpenMpiVars, nullptr, env));
    if (!get(lookup, "MASTER_ADDR") && env.local_size != env.world_size) {
      return invalid_argument(
          "MASTER_ADDR is not set and mpirun placed ranks on several hosts; "
          "export MASTER_ADDR=<host of rank 0> and pass it with mpirun -x "
          "MASTER_ADDR");
    }
  } else if (any_set(lookup, kMvapichVars)) {
    ZT_RETURN_IF_ERROR(read_mpi(lookup, kMvapichVars, "MVAPICH's mpirun", env));
  } else if (pmi_from_hydra(lookup)) {
    ZT_RETURN_IF_ERROR(read_mpi(lookup, kPmiVars, "MPICH's or Intel MPI's mpirun", env));
  } else if (get(lookup, "SLURM_PROCID")) {
    ZT_RETURN_IF_ERROR(read_slurm(lookup, env));
  }
  if (std::optional<std::string> addr = get(lookup, "MASTER_ADDR")) env.master_addr = *addr;
  ZT_ASSIGN_OR_RETURN(std::optional<int> port, get_int(lookup, "MASTER_PORT"));
  if (port && (*port < 1 || *port > 65535)) {
    return invalid_argument("MASTER_PORT={} is not a TCP port (1-65535)", *port);
  }
  if (!port && env.world_size > 1) {
    return invalid_argument(
        "MASTER_PORT is not set (world size {} from {}); export "
        "MASTER_PORT=<a free port on the host of rank 0>, e.g. 29500",
        env.world_size, dist_source_name(env.source));
  }
  env.master_port = port.value_or(0);
  env.job_token = job_token_from(lookup, env.master_addr, env.master_port);
  return env;
}

EnvLookup process_env() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Result<DistEnv> dist_env_from_environment() {
  return dist_env_from(process_env());
}

}  // namespace zt
