// The local runner and the runner registry (see runner.h).
#include "zt/launcher/runner.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "zt/core/assert.h"
#include "zt/launcher/mpi_runner.h"
#include "zt/launcher/rank_plan.h"
#include "zt/launcher/ssh_runner.h"

namespace zt::launcher {
namespace {

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
                        .program = job.program,
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
  if (lower == "ssh") return ssh_runner_new();
  if (lower == "pdsh") return pdsh_runner_new();
  if (is_mpi_runner(lower)) return mpi_runner_create(lower);
  return invalid_argument(
      "Unknown launcher {} (choose from local, ssh, pdsh, openmpi, mpich, impi, mvapich, slurm)",
      name);
}

}  // namespace zt::launcher
