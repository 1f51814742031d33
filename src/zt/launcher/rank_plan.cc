// Per-rank command and environment (see rank_plan.h).
#include "zt/launcher/rank_plan.h"

#include <sys/random.h>

#include <cerrno>
#include <chrono>
#include <random>

#include <fmt/format.h>

#include "zt/core/assert.h"

namespace zt::launcher {

std::vector<ProcessSpec> node_process_specs(const NodePlanInputs& in) {
  ZT_ASSERT(in.options != nullptr && in.world != nullptr);
  const LaunchOptions& o = *in.options;
  const WorldInfo& world = *in.world;
  ZT_ASSERT(in.node_rank >= 0 && static_cast<size_t>(in.node_rank) < world.hosts.size());

  // Global ranks count slots host by host, in hostfile order.
  int first_rank = 0;
  for (int n = 0; n < in.node_rank; ++n) {
    first_rank += static_cast<int>(world.hosts[static_cast<size_t>(n)].slots.size());
  }
  const HostSlots& node = world.hosts[static_cast<size_t>(in.node_rank)];
  const int local_size = static_cast<int>(node.slots.size());
  ZT_ASSERT(in.rank_cpus.empty() || static_cast<int>(in.rank_cpus.size()) == local_size);

  std::vector<std::string> node_env = in.base_env;
  if (world.kind == SlotKind::kGpu) {
    env_set(node_env, "CUDA_VISIBLE_DEVICES", slot_list_str(node.slots));
  }
  env_set(node_env, "MASTER_ADDR", world.master_addr);
  env_set(node_env, "MASTER_PORT", std::to_string(o.master_port));
  env_set(node_env, "WORLD_SIZE", std::to_string(world_size(world)));
  env_set(node_env, "CROSS_RANK", std::to_string(in.node_rank));
  env_set(node_env, "CROSS_SIZE", std::to_string(world.hosts.size()));
  env_set(node_env, "LOCAL_SIZE", std::to_string(local_size));
  env_set(node_env, "ZT_JOB_TOKEN", in.job_token);

  std::vector<ProcessSpec> specs;
  for (int local = 0; local < local_size; ++local) {
    const int rank = first_rank + local;
    ProcessSpec spec;
    spec.label = fmt::format("rank {}", rank);
    spec.exec_path = in.program.exec_path;
    spec.env = node_env;
    env_set(spec.env, "RANK", std::to_string(rank));
    // DeepSpeed: dist_rank % num_local_procs (equal to `local` unless nodes are uneven).
    const int local_rank = rank % local_size;
    env_set(spec.env, "LOCAL_RANK", std::to_string(local_rank));
    spec.argv = program_rank_argv(in.program, o.no_local_rank ? -1 : local_rank, o.program_args);
    if (!in.rank_cpus.empty()) {
      spec.cpus = in.rank_cpus[static_cast<size_t>(local_rank)];
      env_set(spec.env, "OMP_NUM_THREADS", std::to_string(spec.cpus.size()));
    }
    if (!in.log_prefix.empty()) spec.log_path = rank_log_path(in.log_prefix, rank);
    if (in.prefix_output) spec.relay_prefix = fmt::format("[rank {}] ", rank);
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string rank_log_path(const std::string& log_prefix, int rank) {
  return fmt::format("{}_rank{}.log", log_prefix, rank);
}

std::string job_token_new() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < sizeof(bytes)) {
    // No getrandom (very old kernel): a token only has to differ between launches.
    std::random_device rd;
    std::seed_seq seed{
        rd(), rd(),
        static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
    std::mt19937_64 gen(seed);
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(gen());
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

}  // namespace zt::launcher
