// The MPI and SLURM runners (mpi_runner.h).
#include "zt/launcher/mpi_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "zt/launcher/process_group.h"
#include "zt/launcher/program.h"
#include "zt/launcher/shell_quote.h"

namespace zt::launcher {
namespace {

constexpr std::string_view kMpiRunners[] = {"openmpi", "mpich", "impi", "mvapich", "slurm"};

// What each runner executes and how to get it.
struct Backend {
  std::string_view runner;
  const char* command;  // argv[0]
  const char* package;  // where it comes from
  const char* probe;    // a second program DeepSpeed checks for (backend_exists), or null
};
constexpr Backend kBackends[] = {
    {"openmpi", "mpirun", "Debian package openmpi-bin", "ompi_info"},
    {"mpich", "mpirun", "Debian package mpich", nullptr},
    {"impi", "mpirun", "Intel MPI (Intel oneAPI HPC Toolkit; source its setvars.sh)", nullptr},
    {"mvapich", "mpirun", "MVAPICH2 (not packaged by Debian)", "mpiname"},
    {"slurm", "srun", "Debian package slurm-client", nullptr},
};

const Backend& backend_of(std::string_view runner) {
  for (const Backend& b : kBackends) {
    if (b.runner == runner) return b;
  }
  return kBackends[0];
}

// DeepSpeed's messages name the MPI this way ("MPICH requires same number of devices per node").
std::string_view equal_slots_name(std::string_view runner) {
  if (runner == "mpich") return "MPICH";
  if (runner == "impi") return "Intel MPI";
  return runner;
}

// Replaces or appends, keeping each key once in its first position.
void put(std::vector<ExportedVar>& vars, std::string_view key, std::string value) {
  for (ExportedVar& v : vars) {
    if (v.key == key) {
      v.value = std::move(value);
      return;
    }
  }
  vars.push_back({std::string(key), std::move(value)});
}

std::string hosts_joined(const WorldInfo& world) {
  std::string out;
  for (const HostSlots& h : world.hosts) {
    if (!out.empty()) out += ',';
    out += h.host;
  }
  return out;
}

// The slots per host when every host has the same number, else -1.
int equal_slots(const WorldInfo& world) {
  if (world.hosts.empty()) return -1;
  int per = static_cast<int>(world.hosts.front().slots.size());
  for (const HostSlots& h : world.hosts) {
    if (static_cast<int>(h.slots.size()) != per) return -1;
  }
  return per;
}

bool launcher_args_have(const std::vector<std::string>& args, std::string_view word) {
  for (const std::string& a : args) {
    if (a == word) return true;
  }
  return false;
}

// DeepSpeed keeps its `--mca btl_tcp_if_include eth0` unless the user's launcher args set it.
bool launcher_args_set_mca(const std::vector<std::string>& args, std::string_view param) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if ((args[i] == "-mca" || args[i] == "--mca") && args[i + 1] == param) return true;
  }
  return false;
}

// The first line `command --version` prints, or empty when it cannot be run.
std::string version_line(const std::string& path) {
  std::string cmd = "'" + path + "' --version 2>&1";
  if (path.find('\'') != std::string::npos) return "";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return "";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), f) != nullptr && out.size() < 4096) out += buf;
  pclose(f);
  return out;
}

std::string path_of(const std::vector<std::string>& env) {
  std::optional<std::string_view> p = env_find(env, "PATH");
  return p ? std::string(*p) : std::string("/usr/local/bin:/usr/bin:/bin");
}

}  // namespace

Result<std::string> mpi_backend_resolve(std::string_view runner,
                                        const std::vector<std::string>& env) {
  const Backend& b = backend_of(runner);
  const std::string path = path_of(env);
  Result<std::string> exec = executable_resolve(b.command, path);
  if (!exec) {
    return not_found(
        "--launcher {} needs {} ({}), which is not on PATH; install it, or choose "
        "another --launcher (ssh needs nothing but ssh)",
        runner, b.command, b.package);
  }
  if (b.probe != nullptr && !executable_resolve(b.probe, path)) {
    return not_found(
        "--launcher {}: {} is on PATH ({}) but {} is not, so it is not {}'s; install {} or put "
        "its bin directory first on PATH",
        runner, b.command, *exec, b.probe, runner == "openmpi" ? "Open MPI" : "MVAPICH2",
        b.package);
  }
  if (runner == "openmpi" || runner == "mpich") {
    const char* want = runner == "openmpi" ? "Open MPI" : "HYDRA";
    std::string version = version_line(*exec);
    if (!version.empty() && version.find(want) == std::string::npos) {
      // Debian installs each MPI's mpirun under its own name too, and `mpirun` is whichever
      // update-alternatives prefers: with both installed, the named MPI is still found.
      Result<std::string> own =
          executable_resolve(runner == "openmpi" ? "mpirun.openmpi" : "mpirun.mpich", path);
      if (own && version_line(*own).find(want) != std::string::npos) return own;
      std::string first = version.substr(0, version.find('\n'));
      return invalid_argument(
          "--launcher {}: {} is not {}'s mpirun (`mpirun --version` says '{}'); choose the "
          "--launcher of the MPI that is installed, or switch it with update-alternatives "
          "--config mpirun",
          runner, *exec, runner == "openmpi" ? "Open MPI" : "MPICH", first);
    }
  }
  return exec;
}

namespace {

class MpiRunner final : public Runner {
 public:
  explicit MpiRunner(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }

  Result<JobOutcome> run(const LaunchJob& job) override {
    const LaunchOptions& o = *job.options;
    ZT_RETURN_IF_ERROR(mpi_options_check(name_, o, *job.world));
    ZT_ASSIGN_OR_RETURN(std::string exec, mpi_backend_resolve(name_, job.base_env));
    if (name_ == "openmpi" && geteuid() == 0 &&
        !launcher_args_have(o.launcher_args, "--allow-run-as-root") &&
        !(env_find(job.base_env, "OMPI_ALLOW_RUN_AS_ROOT") &&
          env_find(job.base_env, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"))) {
      return invalid_argument(
          "--launcher openmpi as root: Open MPI's mpirun refuses to run as root; pass "
          "--launcher_args=--allow-run-as-root if that is meant (as DeepSpeed users do), or run "
          "as another user");
    }

    ZT_ASSIGN_OR_RETURN(ProgramMode mode, program_mode(o.module, o.no_python));
    ZT_ASSIGN_OR_RETURN(ProgramCommand program,
                        program_command(o.program, mode, path_of(job.base_env), job.cwd));
    std::vector<std::string> files_read;
    ZT_ASSIGN_OR_RETURN(std::vector<ExportedVar> exports,
                        exported_env(job.base_env, job.cwd, job.home, &files_read));
    for (const std::string& f : files_read) {
      fmt::print(stderr, "zt launch: exporting the variables of {}\n", f);
    }

    MpiCommandInputs in{.runner = name_,
                        .options = &o,
                        .world = job.world,
                        .exports = std::move(exports),
                        .program_argv = program_rank_argv(program, -1, o.program_args),
                        .job_token = job.job_token,
                        .hostfile_path = ""};
    std::string hostfile;
    if (name_ == "openmpi" || name_ == "mvapich") {
      char tmpl[] = "/tmp/zt_mpi_hostfile_XXXXXX";
      int fd = mkstemp(tmpl);
      if (fd < 0) {
        return io_error("--launcher {}: cannot create a hostfile in /tmp: {}", name_,
                        strerror(errno));
      }
      close(fd);
      hostfile = tmpl;
      in.hostfile_path = hostfile;
    }
    struct Remove {
      std::string path;
      ~Remove() {
        if (!path.empty()) unlink(path.c_str());
      }
    } remove_hostfile{hostfile};

    ZT_ASSIGN_OR_RETURN(MpiCommand command, mpi_command(in));
    if (!hostfile.empty()) {
      FILE* f = fopen(hostfile.c_str(), "w");
      bool ok = f != nullptr &&
                fwrite(command.hostfile_text.data(), 1, command.hostfile_text.size(), f) ==
                    command.hostfile_text.size();
      if (f != nullptr) ok = (fclose(f) == 0) && ok;
      if (!ok)
        return io_error("--launcher {}: cannot write {}: {}", name_, hostfile, strerror(errno));
    }

    ProcessSpec spec;
    spec.label = command.argv[0];
    spec.exec_path = exec;
    spec.argv = command.argv;
    spec.argv[0] = exec;  // mpirun.mpich when that is the one (mpi_backend_resolve)
    spec.env = job.base_env;
    for (const ExportedVar& v : command.process_env) env_set(spec.env, v.key, v.value);
    fmt::print(stderr, "zt launch: {} runs {} rank(s): {}\n", name_, world_size(*job.world),
               shell_join(spec.argv));

    ProcessGroupOptions options = job.group_options;
    // mpirun/srun never beat; the ranks' own supervision is theirs.
    options.heartbeat_timeout = std::chrono::milliseconds(0);
    options.failure_marker.clear();
    ZT_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group, ProcessGroup::start({spec}, options));
    GroupResult result = group->wait();

    JobOutcome outcome{.exit_code = result.exit_code, .message = ""};
    if (result.end == GroupEnd::kProcessFailed) {
      outcome.message = fmt::format(
          "zt launch: {} (--launcher {}) {}; the failing rank's output is above; exiting with {}",
          spec.label, name_, result.failure.describe(), result.exit_code);
    } else if (result.end == GroupEnd::kInterrupted) {
      const char* abbrev = sigabbrev_np(result.launcher_signal);
      outcome.message = fmt::format(
          "zt launch: received SIG{}; stopped {} (--launcher {}), which stops its ranks; exiting "
          "with {}",
          abbrev != nullptr ? abbrev : "?", spec.label, name_, result.exit_code);
    } else if (result.end != GroupEnd::kAllSucceeded) {
      outcome.message = fmt::format("zt launch: {} (--launcher {}) stopped; exiting with {}",
                                    spec.label, name_, result.exit_code);
    }
    return outcome;
  }

 private:
  std::string name_;
};

}  // namespace

bool is_mpi_runner(std::string_view lower_name) {
  for (std::string_view r : kMpiRunners) {
    if (r == lower_name) return true;
  }
  return false;
}

Result<std::unique_ptr<Runner>> mpi_runner_create(std::string_view lower_name) {
  if (!is_mpi_runner(lower_name)) {
    return invalid_argument("{} is not an MPI or SLURM launcher", lower_name);
  }
  return std::unique_ptr<Runner>(new MpiRunner(std::string(lower_name)));
}

Status mpi_options_check(std::string_view runner, const LaunchOptions& o, const WorldInfo& world) {
  // mpirun and srun hand host names to ssh and their own parsers: none may read as an option.
  for (const HostSlots& h : world.hosts) {
    ZT_RETURN_IF_ERROR(host_name_check(h.host, fmt::format("--launcher {}", runner)));
  }
  if (runner != "slurm") {
    // DeepSpeed's validate_args, word for word in the first half.
    if (!o.include.empty() || !o.exclude.empty()) {
      return invalid_argument(
          "{} backend does not support worker include/exclusion (--include/--exclude); list the "
          "hosts and slots to use in the hostfile instead",
          runner);
    }
    if (o.num_nodes != -1 || o.num_gpus != -1) {
      return invalid_argument(
          "{} backend does not support limiting num nodes/gpus (--num_nodes/--num_gpus); list "
          "the hosts and slots to use in the hostfile instead",
          runner);
    }
  }
  if (runner == "mpich" || runner == "impi" || runner == "mvapich") {
    if (equal_slots(world) < 0) {
      std::string counts;
      for (const HostSlots& h : world.hosts) {
        counts += fmt::format("{}{}={}", counts.empty() ? "" : ", ", h.host, h.slots.size());
      }
      return invalid_argument(
          "{} requires same number of devices per node (slots: {}); give every host the same "
          "slots=, or use --launcher openmpi or ssh",
          equal_slots_name(runner), counts);
    }
  }
  if (o.bind_cores_to_rank || o.bind_core_list) {
    return invalid_argument(
        "--bind_cores_to_rank/--bind_core_list are not supported with --launcher {}; bind with "
        "the launcher's own option through --launcher_args (mpirun --bind-to core, srun "
        "--cpu-bind=cores)",
        runner);
  }
  if (o.each_rank_log_dir) {
    return invalid_argument(
        "--enable_each_rank_log is not supported with --launcher {}; use {} through "
        "--launcher_args",
        runner,
        runner == "slurm"     ? "srun's --output=DIR/rank%t.log"
        : runner == "openmpi" ? "mpirun's --output-filename DIR"
                              : "the MPI's per-rank output option");
  }
  return Status::ok();
}

Result<MpiCommand> mpi_command(const MpiCommandInputs& in) {
  const LaunchOptions& o = *in.options;
  const WorldInfo& world = *in.world;
  const std::string& runner = in.runner;
  if (world.master_addr.empty()) {
    return invalid_argument(
        "--launcher {}: no master address; pass --master_addr=<address of "
        "the first host>",
        runner);
  }
  ZT_RETURN_IF_ERROR(mpi_options_check(runner, o, world));
  const int total = world_size(world);
  const int per_node = equal_slots(world);

  // Runner defaults first (DeepSpeed adds them in the runner's constructor, so the user's
  // environment may override them), then the exported environment, then the rendezvous.
  std::vector<ExportedVar> exports;
  if (runner == "openmpi") put(exports, "UCX_TLS", "tcp");
  if (runner == "mvapich") {
    put(exports, "MV2_SMP_USE_CMA", "0");
    put(exports, "MV2_DEBUG_SHOW_BACKTRACE", "1");
    if (world.kind == SlotKind::kGpu) put(exports, "MV2_USE_CUDA", "1");
    put(exports, "MV2_SUPPORT_DL", "1");
    put(exports, "MV2_ENABLE_AFFINITY", "0");
    put(exports, "MV2_INTER_ALLGATHER_TUNING", "5");
    put(exports, "MV2_CUDA_USE_NAIVE", "0");
  }
  for (const ExportedVar& v : in.exports) put(exports, v.key, v.value);
  put(exports, "MASTER_ADDR", world.master_addr);
  put(exports, "MASTER_PORT", std::to_string(o.master_port));
  if (runner == "mpich" || runner == "impi") {
    put(exports, "WORLD_SIZE", std::to_string(total));
    put(exports, "LOCAL_SIZE", std::to_string(per_node));
  }

  // The job token travels in the environment of mpirun/srun, named on the command line but never
  // written there, so `ps` on the master does not show it.
  constexpr const char* kToken = "ZT_JOB_TOKEN";

  MpiCommand cmd;
  std::vector<std::string>& a = cmd.argv;
  auto append = [&a](const std::vector<std::string>& words) {
    a.insert(a.end(), words.begin(), words.end());
  };
  if (runner == "openmpi") {
    a = {"mpirun", "-n",     std::to_string(total), "-hostfile", in.hostfile_path, "--mca",
         "btl",    "^openib"};
    if (!launcher_args_set_mca(o.launcher_args, "btl_tcp_if_include")) {
      append({"--mca", "btl_tcp_if_include", "eth0"});
    }
    append(o.launcher_args);
    for (const ExportedVar& v : exports) append({"-x", v.key + "=" + v.value});
    append({"-x", kToken});  // -x NAME passes mpirun's own value
    append(in.program_argv);
    for (const HostSlots& h : world.hosts) {
      cmd.hostfile_text += fmt::format("{} slots={}\n", h.host, h.slots.size());
    }
  } else if (runner == "mpich" || runner == "impi") {
    if (runner == "mpich") {
      a = {"mpirun", "-n", std::to_string(total), "-ppn", std::to_string(per_node)};
    } else {
      a = {"mpirun", "-ppn", std::to_string(per_node)};
    }
    append(o.launcher_args);
    for (const ExportedVar& v : exports) append({"-genv", v.key, v.value});
    append({"-genvlist", kToken});  // hydra passes the named variables' own values
    // DeepSpeed turns Intel MPI's pinning off (its own core binding would fight it).
    if (runner == "impi") append({"-genv", "I_MPI_PIN", "0"});
    append({"-hosts", hosts_joined(world)});
    if (runner == "mpich") {
      append(in.program_argv);
    } else {
      // One MPMD segment per rank, each with its RANK and LOCAL_RANK, as DeepSpeed's IMPIRunner.
      for (int r = 0; r < total; ++r) {
        if (r > 0) a.push_back(":");
        append({"-n", "1", "-env", "RANK", std::to_string(r), "-env", "LOCAL_RANK",
                std::to_string(r % per_node)});
        append(in.program_argv);
      }
    }
  } else if (runner == "mvapich") {
    a = {"mpirun",     "-np",           std::to_string(total), "-ppn", std::to_string(per_node),
         "--hostfile", in.hostfile_path};
    append(o.launcher_args);
    for (const ExportedVar& v : exports) append({"-env", v.key, v.value});
    append({"-genvlist", kToken});
    append(in.program_argv);
    for (const HostSlots& h : world.hosts) cmd.hostfile_text += h.host + "\n";
  } else if (runner == "slurm") {
    a = {"srun", "-n", std::to_string(total)};
    append(o.launcher_args);
    const bool filtered =
        !o.include.empty() || !o.exclude.empty() || o.num_nodes > 0 || o.num_gpus > 0;
    if (filtered) {
      append(
          {"--nodelist=" + hosts_joined(world), "--nodes=" + std::to_string(world.hosts.size())});
      if (per_node > 0) a.push_back("--ntasks-per-node=" + std::to_string(per_node));
    }
    // srun's --export list is comma-separated: a value holding ',' travels in srun's own
    // environment instead, which --export=ALL passes on.
    std::string list = "--export=ALL";
    for (const ExportedVar& v : exports) {
      if (v.value.find(',') == std::string::npos) list += "," + v.key + "=" + v.value;
    }
    a.push_back(list);
    append(in.program_argv);
  } else {
    return invalid_argument("{} is not an MPI or SLURM launcher", runner);
  }
  // srun's --export=ALL passes the token from its environment.
  cmd.process_env = exports;
  cmd.process_env.push_back({kToken, in.job_token});
  return cmd;
}

}  // namespace zt::launcher
