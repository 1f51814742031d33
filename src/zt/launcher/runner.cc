// The local runner and the runner registry (see runner.h).
#include "zt/launcher/runner.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "zt/core/assert.h"
#include "zt/launcher/rank_plan.h"

namespace zt::launcher {
namespace {

// DeepSpeed's multi-node runners (deepspeed/launcher/constants.py), not yet implemented here.
constexpr const char* kMultiNodeRunners[] = {"pdsh",  "openmpi", "mvapich",
                                             "slurm", "mpich",   "impi"};

class LocalRunner final : public Runner {
 public:
  std::string_view name() const override { return kLocalLauncher; }

  Result<JobOutcome> run(const LaunchJob& job) override {
    ZT_ASSERT(job.world != nullptr && job.world->hosts.size() == 1,
              "the local runner runs exactly one host");
    NodePlanInputs plan{.options = job.options,
                        .world = job.world,
                        .node_rank = 0,
                        .base_env = job.base_env,
                        .exec_path = job.exec_path,
                        .job_token = job.job_token,
                        .log_prefix = job.log_prefix,
                        .rank_cpus = job.rank_cpus};
    std::vector<ProcessSpec> specs = node_process_specs(plan);
    ZT_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group,
                        ProcessGroup::start(specs, job.group_options));
    GroupResult result = group->wait();

    JobOutcome outcome{.exit_code = result.exit_code, .message = ""};
    if (result.end == GroupEnd::kProcessFailed) {
      const ProcessSpec& failed = specs[static_cast<size_t>(result.failure.index)];
      std::string log = failed.log_path.empty() ? "" : "; log: " + failed.log_path;
      outcome.message = fmt::format(
          "zt launch: {} (pid {}) {}{}; stopped the other {} running rank(s); exiting with {}",
          failed.label, result.failure.pid, result.failure.describe(), log, result.stopped,
          result.exit_code);
    } else if (result.end == GroupEnd::kSilent) {
      const ProcessSpec& quiet = specs[static_cast<size_t>(result.silent.index)];
      char host[256] = {0};
      gethostname(host, sizeof(host) - 1);
      outcome.message = fmt::format(
          "zt launch: {} (pid {}) on {} sent no heartbeat for {:.0f} s{} (stopped with SIGSTOP, "
          "frozen, or starved: ZT_HEARTBEAT_TIMEOUT_S sets the limit); killed it and stopped the "
          "other {} running rank(s); exiting with {}",
          quiet.label, result.silent.pid, host, result.silent.silent_s,
          result.silent.last_step >= 0
              ? fmt::format(", its last step {}", result.silent.last_step)
              : std::string(", before its first step"),
          result.stopped > 0 ? result.stopped - 1 : 0, result.exit_code);
    } else if (result.end == GroupEnd::kInterrupted) {
      const char* abbrev = sigabbrev_np(result.launcher_signal);
      outcome.message = fmt::format(
          "zt launch: received SIG{}; stopped {} running rank(s); "
          "exiting with {}",
          abbrev != nullptr ? abbrev : "?", result.stopped, result.exit_code);
    }
    return outcome;
  }
};

}  // namespace

Result<std::unique_ptr<Runner>> runner_create(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == kLocalLauncher) return std::unique_ptr<Runner>(new LocalRunner());
  for (const char* multi : kMultiNodeRunners) {
    if (lower == multi) {
      return invalid_argument(
          "--launcher {}: not yet supported. Multi-node runners (pdsh, openmpi, mvapich, slurm, "
          "mpich, impi) are a later ZeroTrain feature; on one machine leave --launcher out (or "
          "pass --launcher local)",
          name);
    }
  }
  return invalid_argument(
      "Unknown launcher {} (--launcher local runs the ranks of this machine; "
      "pdsh, openmpi, mvapich, slurm, mpich and impi will come with "
      "multi-node support)",
      name);
}

}  // namespace zt::launcher
