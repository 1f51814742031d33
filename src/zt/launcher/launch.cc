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
#include "zt/launcher/mpi_runner.h"
#include "zt/launcher/multi_node.h"
#include "zt/launcher/output_relay.h"
#include "zt/launcher/port_check.h"
#include "zt/launcher/preflight.h"
#include "zt/launcher/program.h"
#include "zt/launcher/rank_plan.h"
#include "zt/launcher/runner.h"
#include "zt/launcher/ssh_runner.h"

namespace zt::launcher {
namespace {

namespace fs = std::filesystem;

constexpr const char* kGraceEnv = "ZT_LAUNCH_GRACE_S";
constexpr double kDefaultGraceSeconds = 30.0;  // DeepSpeed's terminate_process_tree timeout
// A rank that sends no heartbeat for this long (SIGSTOP, frozen) stops the job.
constexpr const char* kHeartbeatEnv = "ZT_HEARTBEAT_TIMEOUT_S";
constexpr double kDefaultHeartbeatSeconds = 60.0;
constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";
// A node launcher that hears nothing from the master launcher for this long stops its ranks.
constexpr const char* kLinkTimeoutEnv = "ZT_NODE_LINK_TIMEOUT_S";
constexpr double kDefaultLinkTimeoutSeconds = 15.0;

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

std::string path_env() {
  const char* p = std::getenv("PATH");
  return p != nullptr ? p : kDefaultPath;
}

Result<ProgramCommand> program_resolve(const LaunchOptions& o) {
  ZT_ASSIGN_OR_RETURN(ProgramMode mode, program_mode(o.module, o.no_python));
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  return program_command(o.program, mode, path_env(), cwd);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The one machine's ranks, as before multi-node: the local runner.
Result<JobOutcome> local_run(const LaunchOptions& o, const WorldInfo& world,
                             std::unique_ptr<Runner> runner,
                             const ProcessGroupOptions& group_options) {
  const int local_ranks = static_cast<int>(world.hosts.front().slots.size());
  ZT_ASSIGN_OR_RETURN(auto rank_cpus, rank_cpus_plan(o, local_ranks));
  ZT_ASSIGN_OR_RETURN(ProgramCommand program, program_resolve(o));
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
                .exec_path = program.exec_path,
                .program = program,
                .cwd = "",
                .home = "",
                .zt_bin = "",
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

// A node of a multi-node job: started by the master launcher (--world_info, usually over ssh) or
// by a scheduler on every node (--no_ssh --node_rank). Runs this node's ranks as the local runner
// does; with --zt_link_stdin it also watches the link to the master.
Result<JobOutcome> node_run(const LaunchOptions& o, WorldInfo world,
                            ProcessGroupOptions group_options, const std::string& job_token) {
  const int node = o.node_rank;
  if (node < 0 || static_cast<size_t>(node) >= world.hosts.size()) {
    return invalid_argument("--node_rank {}: the job has {} node(s) (0..{})", node,
                            world.hosts.size(), world.hosts.size() - 1);
  }
  const std::string host = world.hosts[static_cast<size_t>(node)].host;
  const std::string who = fmt::format("zt launch (node {}, {})", node, host);
  const int local_ranks = static_cast<int>(world.hosts[static_cast<size_t>(node)].slots.size());
  ZT_ASSIGN_OR_RETURN(auto rank_cpus, rank_cpus_plan(o, local_ranks));
  ZT_ASSIGN_OR_RETURN(ProgramCommand program, program_resolve(o));
  std::string log_prefix;
  if (o.each_rank_log_dir) {
    ZT_ASSIGN_OR_RETURN(log_prefix, log_prefix_prepare(*o.each_rank_log_dir));
  }
  NodePlanInputs plan{.options = &o,
                      .world = &world,
                      .node_rank = node,
                      .base_env = environ_copy(),
                      .program = program,
                      .job_token = job_token,
                      .log_prefix = log_prefix,
                      .rank_cpus = std::move(rank_cpus),
                      .prefix_output = o.prefix_output};
  std::vector<ProcessSpec> specs = node_process_specs(plan);
  if (o.link_stdin) {
    group_options.link_fd = STDIN_FILENO;
    ZT_ASSIGN_OR_RETURN(group_options.link_timeout,
                        seconds_from_env(kLinkTimeoutEnv, kDefaultLinkTimeoutSeconds,
                                         "how long a node waits without hearing from the master "
                                         "launcher before it stops its ranks"));
  }
  // A failure is told at once (the master stops the other nodes on it), not after the grace.
  const bool marker = o.link_stdin;
  group_options.on_stop = [&specs, &who, marker](const GroupResult& r) {
    std::string line;
    NodeFailure f;
    if (r.end == GroupEnd::kProcessFailed) {
      const ProcessSpec& failed = specs[static_cast<size_t>(r.failure.index)];
      f = NodeFailure{.rank = std::stoi(failed.label.substr(5)),
                      .code = r.failure.shell_code(),
                      .what = r.failure.describe()};
      line = fmt::format("{}: {} (pid {}) {}{}; stopping the other {} running rank(s) of this node",
                         who, failed.label, r.failure.pid, f.what,
                         failed.log_path.empty() ? std::string() : fmt::format("; log: {}", failed.log_path),
                         r.stopped);
    } else if (r.end == GroupEnd::kSilent) {
      const ProcessSpec& quiet = specs[static_cast<size_t>(r.silent.index)];
      f = NodeFailure{
          .rank = std::stoi(quiet.label.substr(5)),
          .code = kSilentExitCode,
          .what = fmt::format("sent no heartbeat for {:.0f} s{} (stopped, frozen or starved: "
                              "ZT_HEARTBEAT_TIMEOUT_S sets the limit)",
                              r.silent.silent_s,
                              r.silent.last_step >= 0
                                  ? fmt::format(", its last step {}", r.silent.last_step)
                                  : std::string(", before its first step"))};
      line = fmt::format("{}: {} (pid {}) {}; killed it and stopping the other rank(s) of this node",
                         who, quiet.label, r.silent.pid, f.what);
    } else {
      return;
    }
    write_all(STDERR_FILENO, line + "\n");
    if (marker) write_all(STDERR_FILENO, node_failure_marker(f) + "\n");
  };
  ZT_LOG_INFO("{}: starting rank(s) {}..{} of {} (MASTER_ADDR={} MASTER_PORT={})", who,
              specs.empty() ? 0 : std::stoi(specs.front().label.substr(5)),
              specs.empty() ? 0 : std::stoi(specs.back().label.substr(5)), world_size(world),
              world.master_addr, o.master_port);
  std::fflush(nullptr);
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group,
                      ProcessGroup::start(specs, group_options));
  GroupResult result = group->wait();
  JobOutcome outcome{.exit_code = result.exit_code, .message = ""};
  if (result.end == GroupEnd::kLinkLost) {
    outcome.message = fmt::format(
        "{}: lost the link to the master launcher ({}); stopped {} running rank(s); exiting "
        "with {}",
        who,
        result.link_eof ? "its ssh connection or the master ended"
                        : fmt::format("no word from it for {:.0f} s: the network or the master "
                                      "is down; {} sets the limit",
                                      result.link_silent_s, kLinkTimeoutEnv),
        result.stopped, result.exit_code);
  } else if (result.end == GroupEnd::kInterrupted) {
    const char* abbrev = sigabbrev_np(result.launcher_signal);
    outcome.message = fmt::format("{}: received SIG{}; stopped {} running rank(s); exiting with {}",
                                  who, abbrev != nullptr ? abbrev : "?", result.stopped,
                                  result.exit_code);
  }
  return outcome;
}

// The node launcher started by the master launcher: the world comes in --world_info.
Result<JobOutcome> node_from_master_run(const LaunchOptions& o) {
  ZT_ASSIGN_OR_RETURN(ProcessGroupOptions group_options, group_options_from_env());
  WorldInfo world;
  ZT_ASSIGN_OR_RETURN(world.hosts, world_info_decode(o.world_info));
  world.kind = o.slot_kind == "cpu" ? SlotKind::kCpu : SlotKind::kGpu;
  world.master_addr = o.master_addr;
  if (o.node_rank < 0 || o.master_addr.empty() || o.job_token.empty()) {
    return invalid_argument(
        "--world_info needs --node_rank, --master_addr and --zt_job_token (it is how the master "
        "zt launch starts each node; run zt launch without it)");
  }
  return node_run(o, std::move(world), group_options, o.job_token);
}

// --no_ssh --node_rank N: a scheduler started zt launch on every node with the same flags.
Result<JobOutcome> node_no_ssh_run(const LaunchOptions& o, WorldInfo world,
                                   const ProcessGroupOptions& group_options) {
  if (world.master_addr.empty()) {
    return invalid_argument(
        "--no_ssh with several hosts needs --master_addr: the address of the first host of the "
        "hostfile, the same on every node");
  }
  // Every node must give its ranks the same token: the scheduler's ZT_JOB_TOKEN when it exports
  // one, else one derived from what every node of this job shares.
  std::string token;
  if (const char* t = std::getenv("ZT_JOB_TOKEN"); t != nullptr && t[0] != '\0') {
    token = t;
  } else {
    std::string seed = fmt::format("{}:{}:{}", world.master_addr, o.master_port,
                                   world_info_encode(world.hosts));
    for (const char* v : {"SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"}) {
      if (const char* id = std::getenv(v)) seed += fmt::format(":{}", id);
    }
    uint64_t h1 = 1469598103934665603ull;
    uint64_t h2 = 0x9e3779b97f4a7c15ull;
    for (unsigned char c : seed) {
      h1 = (h1 ^ c) * 1099511628211ull;
      h2 = (h2 ^ c) * 0x100000001b3ull + 0x7f4a7c15ull;
    }
    token = fmt::format("{:016x}{:016x}", h1, h2);
  }
  return node_run(o, std::move(world), group_options, token);
}

Result<JobOutcome> launch_run(const LaunchOptions& o) {
  ZT_ASSIGN_OR_RETURN(ProcessGroupOptions group_options, group_options_from_env());
  ZT_ASSIGN_OR_RETURN(WorldInfo world, world_discover(o, machine_probe_local()));
  if (o.no_ssh) return node_no_ssh_run(o, std::move(world), group_options);

  const bool multi = world_multi_node(world, o);
  const std::string name = o.launcher_given ? lower(o.launcher) : (multi ? "ssh" : "local");
  if (name == kLocalLauncher && multi) {
    std::string names;
    for (const HostSlots& h : world.hosts) {
      if (!names.empty()) names += ", ";
      names += h.host;
    }
    return invalid_argument(
        "--launcher local runs the ranks of this machine, but the job has {} host(s) ({}) that "
        "are not all this machine: leave --launcher out (ssh), or keep this machine with "
        "--include localhost",
        world.hosts.size(), names);
  }
  ZT_ASSIGN_OR_RETURN(std::unique_ptr<Runner> runner, runner_create(name));
  if (name == kLocalLauncher) return local_run(o, world, std::move(runner), group_options);

  if (is_mpi_runner(name) && world.master_addr.empty()) {
    // As DeepSpeed does for every multi-node runner: the first host's `hostname -I`.
    std::string ssh = "ssh";
    if (!world.local.front()) {
      ZT_ASSIGN_OR_RETURN(ssh, ssh_program_find());
    }
    ZT_ASSIGN_OR_RETURN(world.master_addr, master_addr_decide(world, o, ssh));
  }
  std::error_code ec;
  const std::string zt_bin = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return io_error("cannot find this zt binary's path (/proc/self/exe): {}", ec.message());
  const std::string cwd = fs::current_path(ec).string();
  if (ec) return io_error("cannot read the working directory: {}", ec.message());
  const char* home = std::getenv("HOME");
  PidFile pid_file;
  if (o.save_pid) ZT_RETURN_IF_ERROR(pid_file.create());
  LaunchJob job{.options = &o,
                .world = &world,
                .base_env = environ_copy(),
                .exec_path = "",
                .program = {},
                .cwd = cwd,
                .home = home != nullptr ? home : "",
                .zt_bin = zt_bin,
                .job_token = job_token_new(),
                .log_prefix = "",
                .rank_cpus = {},
                .group_options = group_options};
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
  if (!options->preflight.empty()) return preflight_answer(options->preflight);
  if (!options->autotuning.empty()) {
    if (!autotune) {
      std::fprintf(stderr, "zt launch: error: --autotuning needs the zt binary's autotuner\n");
      return 2;
    }
    return autotune(*options, args);
  }
  Result<JobOutcome> outcome =
      options->world_info.empty() ? launch_run(*options) : node_from_master_run(*options);
  if (!outcome.is_ok()) {
    const std::string who = options->world_info.empty()
                                ? std::string("zt launch")
                                : fmt::format("zt launch (node {})", options->node_rank);
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), outcome.status().message().c_str());
    return 1;
  }
  if (!outcome->message.empty()) std::fprintf(stderr, "%s\n", outcome->message.c_str());
  return outcome->exit_code;
}

}  // namespace zt::launcher
