// `zt launch` (see launch.h): every check that can fail is made before the first rank starts, so
// a bad flag, a missing program or a busy port never leaves half a job running.
#include "zt/launcher/launch.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "zt/core/log.h"
#include "zt/launcher/core_binding.h"
#include "zt/launcher/port_check.h"
#include "zt/launcher/rank_plan.h"
#include "zt/launcher/runner.h"

namespace zt::launcher {
namespace {

namespace fs = std::filesystem;

constexpr const char* kGraceEnv = "ZT_LAUNCH_GRACE_S";
constexpr double kDefaultGraceSeconds = 30.0;  // DeepSpeed's terminate_process_tree timeout
// A rank that sends no heartbeat for this long (SIGSTOP, frozen) stops the job.
constexpr const char* kHeartbeatEnv = "ZT_HEARTBEAT_TIMEOUT_S";
constexpr double kDefaultHeartbeatSeconds = 60.0;
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

// A number of seconds in [0, 86400] from the environment variable `name`, else `fallback`.
Result<std::chrono::milliseconds> seconds_from_env(const char* name, double fallback,
                                                   std::string_view meaning) {
  double seconds = fallback;
  if (const char* v = std::getenv(name); v != nullptr && v[0] != '\0') {
    std::string_view text(v);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(seconds) ||
        seconds < 0 || seconds > 86400) {
      return invalid_argument("{}='{}' is not a number of seconds in [0, 86400] ({})", name,
                              text, meaning);
    }
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000)));
}

Result<ProcessGroupOptions> group_options_from_env() {
  ProcessGroupOptions options;
  ZT_ASSIGN_OR_RETURN(options.grace,
                      seconds_from_env(kGraceEnv, kDefaultGraceSeconds,
                                       "the wait between SIGTERM and SIGKILL when stopping ranks"));
  ZT_ASSIGN_OR_RETURN(options.heartbeat_timeout,
                      seconds_from_env(kHeartbeatEnv, kDefaultHeartbeatSeconds,
                                       "how long a rank may send no heartbeat before the job is "
                                       "stopped; 0 turns the check off"));
  return options;
}

// --bind_cores_to_rank: each local rank's cores (empty when not binding).
Result<std::vector<std::vector<int>>> rank_cpus_plan(const LaunchOptions& o, int local_ranks) {
  if (!o.bind_cores_to_rank) {
    if (o.bind_core_list) {
      ZT_LOG_WARN("--bind_core_list has no effect without --bind_cores_to_rank");
    }
    return std::vector<std::vector<int>>{};
  }
  if (std::getenv("KMP_AFFINITY") != nullptr) {
    return invalid_argument(
        "Environment variable KMP_AFFINITY conflicts with "
        "--bind_cores_to_rank because it interferes with how many CPU cores "
        "each rank may use. Unset KMP_AFFINITY before launching: "
        "`unset KMP_AFFINITY`");
  }
  std::vector<int> cores;
  if (o.bind_core_list) {
    ZT_ASSIGN_OR_RETURN(cores, core_list_parse(*o.bind_core_list));
  } else {
    cores = machine_physical_cores();
  }
  return cores_split(cores, local_ranks);
}

// --enable_each_rank_log DIR: creates DIR, returns "DIR/<timestamp>".
Result<std::string> log_prefix_prepare(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    return invalid_argument(
        "--enable_each_rank_log {} should not be a file, it should be a "
        "directory.",
        dir);
  }
  fs::create_directories(dir, ec);
  if (ec) {
    return io_error("unable to create directory {} for each rank log: {}", dir, ec.message());
  }
  char stamp[32] = {};
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d%H%M%S", &local);
  return (fs::path(dir) / stamp).string();
}

// --save_pid: /tmp/<launcher pid>.deepspeed holding the launcher's pid (DeepSpeed's launch.py
// writes the file named after the `deepspeed` runner's pid; here both are this process). Removed
// when the launcher returns.
class PidFile {
 public:
  PidFile() = default;
  PidFile(const PidFile&) = delete;
  PidFile& operator=(const PidFile&) = delete;
  ~PidFile() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  Status create() {
    const pid_t pid = getpid();
    std::string path = fmt::format("/tmp/{}.deepspeed", pid);
    std::error_code ec;
    if (fs::exists(path, ec)) {
      return invalid_argument("--save_pid: pid file {} exists but shouldn't; remove it", path);
    }
    std::ofstream out(path);
    out << pid;
    out.close();
    if (!out) return io_error("--save_pid: cannot write {}", path);
    path_ = std::move(path);
    std::printf("launcher pid: %d\n", static_cast<int>(pid));
    return Status::ok();
  }

 private:
  std::string path_;
};

Result<JobOutcome> launch_run(const LaunchOptions& o) {
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner, runner_create(o.launcher));
  ZT_ASSIGN_OR_RETURN(ProcessGroupOptions group_options, group_options_from_env());
  ZT_ASSIGN_OR_RETURN(WorldInfo world, world_discover(o, machine_probe_local()));
  const int local_ranks = static_cast<int>(world.hosts.front().slots.size());
  ZT_ASSIGN_OR_RETURN(auto rank_cpus, rank_cpus_plan(o, local_ranks));
  const char* path_env = std::getenv("PATH");
  ZT_ASSIGN_OR_RETURN(std::string exec_path,
                      executable_resolve(o.program, path_env != nullptr ? path_env : kDefaultPath));
  ZT_RETURN_IF_ERROR(master_port_check(o.master_port));
  std::string log_prefix;
  if (o.each_rank_log_dir) {
    ZT_ASSIGN_OR_RETURN(log_prefix, log_prefix_prepare(*o.each_rank_log_dir));
  }
  PidFile pid_file;
  if (o.save_pid) ZT_RETURN_IF_ERROR(pid_file.create());

  LaunchJob job{.options = &o,
                .world = &world,
                .base_env = environ_copy(),
                .exec_path = exec_path,
                .job_token = job_token_new(),
                .log_prefix = log_prefix,
                .rank_cpus = std::move(rank_cpus),
                .group_options = group_options};
  const HostSlots& host = world.hosts.front();
  ZT_LOG_INFO("launching {} rank(s) of {} on {} ({}{}), MASTER_ADDR={} MASTER_PORT={}{}",
              world_size(world), o.program, host.host,
              world.kind == SlotKind::kGpu ? "CUDA_VISIBLE_DEVICES=" : "CPU slots ",
              slot_list_str(host.slots), world.master_addr, o.master_port,
              log_prefix.empty() ? "" : ", logs " + log_prefix + "_rank*.log");
  std::fflush(nullptr);  // the launcher's own output comes before the ranks'
  return runner->run(job);
}

}  // namespace

int launch_main(const std::vector<std::string>& args, const AutotuneEntry& autotune) {
  Result<LaunchOptions> options = launch_options_parse(args);
  if (!options.is_ok()) {
    std::fprintf(stderr, "zt launch: error: %s\n", options.status().message().c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(launch_usage().c_str(), stdout);
    return 0;
  }
  if (!options->autotuning.empty()) {
    if (!autotune) {
      std::fprintf(stderr, "zt launch: error: --autotuning needs the zt binary's autotuner\n");
      return 2;
    }
    return autotune(*options, args);
  }
  Result<JobOutcome> outcome = launch_run(*options);
  if (!outcome.is_ok()) {
    std::fprintf(stderr, "zt launch: error: %s\n", outcome.status().message().c_str());
    return 1;
  }
  if (!outcome->message.empty()) std::fprintf(stderr, "%s\n", outcome->message.c_str());
  return outcome->exit_code;
}

}  // namespace zt::launcher
