// The ssh and pdsh runners (see ssh_runner.h).
#include "zt/launcher/ssh_runner.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "zt/core/log.h"
#include "zt/launcher/env_export.h"
#include "zt/launcher/multi_node.h"
#include "zt/launcher/output_relay.h"
#include "zt/launcher/preflight.h"
#include "zt/launcher/shell_quote.h"

namespace zt::launcher {
namespace {

constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

std::string path_env() {
  const char* p = std::getenv("PATH");
  return p != nullptr ? p : kDefaultPath;
}

Status hosts_check(const WorldInfo& world, const LaunchOptions& o) {
  for (const HostSlots& h : world.hosts) {
    ZT_RETURN_IF_ERROR(host_name_check(h.host, fmt::format("hostfile {}", o.hostfile)));
  }
  return Status::ok();
}

// The environment of a node launcher started here: this one's, with the exported variables as
// a remote node would get them (the env file included).
std::vector<std::string> local_node_env(std::vector<std::string> base,
                                        const std::vector<ExportedVar>& exported) {
  for (const ExportedVar& v : exported) env_set(base, v.key, v.value);
  return base;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return fmt::format("SIG{}", abbrev != nullptr ? abbrev : "?");
}

// What both runners decide before a node starts: the master address, the exported environment
// (its env files named in the log), the pre-flight checks passed, the node launchers' command.
struct Prepared {
  std::string master_addr;
  std::vector<ExportedVar> exported;
  NodeCommandInputs command;
};

Result<Prepared> prepare(const LaunchJob& job, const std::string& ssh) {
  const LaunchOptions& o = *job.options;
  const WorldInfo& world = *job.world;
  Prepared p;
  ZT_ASSIGN_OR_RETURN(p.master_addr, master_addr_decide(world, o, ssh));
  std::vector<std::string> env_files;
  ZT_ASSIGN_OR_RETURN(p.exported, exported_env(job.base_env, job.cwd, job.home, &env_files));
  for (const std::string& f : env_files) ZT_LOG_INFO("exporting the variables of {}", f);
  ZT_RETURN_IF_ERROR(preflight_run(PreflightInputs{.options = &o,
                                                   .world = &world,
                                                   .ssh = ssh,
                                                   .zt_bin = job.zt_bin,
                                                   .master_addr = p.master_addr}));
  p.command = NodeCommandInputs{.options = &o,
                                .world = &world,
                                .zt_bin = job.zt_bin,
                                .master_addr = p.master_addr,
                                .job_token = job.job_token,
                                .link_stdin = true};
  return p;
}

// How long the master keeps watching after the first failure before it stops the other nodes,
// to tell which failure caused the others (SshRunner::cause).
constexpr std::chrono::milliseconds kFailureSettle{1000};

class SshRunner final : public Runner {
 public:
  std::string_view name() const override { return "ssh"; }

  Result<JobOutcome> run(const LaunchJob& job) override {
    const LaunchOptions& o = *job.options;
    const WorldInfo& world = *job.world;
    ZT_RETURN_IF_ERROR(hosts_check(world, o));
    const bool any_remote =
        std::find(world.local.begin(), world.local.end(), false) != world.local.end();
    std::string ssh;
    if (any_remote) {
      ZT_ASSIGN_OR_RETURN(ssh, ssh_program_find());
    }
    ZT_ASSIGN_OR_RETURN(Prepared prep, prepare(job, ssh));
    const std::string& master_addr = prep.master_addr;
    const std::vector<ExportedVar>& exported = prep.exported;
    NodeCommandInputs cmd = prep.command;
    cmd.link_stdin = true;
    std::vector<ProcessSpec> specs;
    for (size_t n = 0; n < world.hosts.size(); ++n) {
      const std::string& host = world.hosts[n].host;
      std::vector<std::string> argv = node_launcher_argv(cmd, std::to_string(n));
      ProcessSpec spec;
      spec.label = fmt::format("node {} ({})", n, host);
      if (world.local[n]) {
        spec.exec_path = job.zt_bin;
        spec.argv = std::move(argv);
        spec.env = local_node_env(job.base_env, exported);
      } else {
        spec.exec_path = ssh;
        spec.argv = ssh_argv(ssh, o, host, remote_command(job.cwd, exported, argv));
        spec.env = job.base_env;
      }
      spec.relay_prefix = "";
      spec.stdin_link = true;
      specs.push_back(std::move(spec));
    }
    ZT_LOG_INFO("starting {} rank(s) on {} node(s) through {}, MASTER_ADDR={} MASTER_PORT={}",
                world_size(world), world.hosts.size(), any_remote ? ssh : "this machine",
                master_addr, o.master_port);
    std::fflush(nullptr);
    ProcessGroupOptions group_options = job.group_options;
    group_options.heartbeat_timeout = std::chrono::milliseconds(0);  // nodes are not ranks
    group_options.failure_marker = kNodeFailureMarker;
    group_options.failure_settle = kFailureSettle;
    ZT_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group,
                        ProcessGroup::start(specs, group_options));
    GroupResult result = group->wait();
    return outcome(world, result);
  }

 private:
  // Which of the failures seen in the settle window caused the others. A rank killed by a
  // signal (code > 128) or gone silent (124) is a cause: its peers on other nodes then fail on
  // the connection it dropped, with plain error codes, often before its own report crosses ssh.
  // Next a node lost (its ssh ended with 255 or by a signal without a report), then the first
  // report, then the first failure.
  static GroupResult cause(GroupResult r) {
    if (r.end != GroupEnd::kProcessFailed) return r;
    auto pick_marker = [&](size_t i) {
      r.reported = true;
      r.marker = r.markers[i];
      r.failure = ProcessExit{.index = static_cast<int>(i), .pid = -1, .exit_code = 1};
    };
    for (size_t i = 0; i < r.markers.size(); ++i) {
      std::optional<NodeFailure> f = node_failure_parse(r.markers[i]);
      if (f && (f->code > 128 || f->code == kSilentExitCode)) {
        pick_marker(i);
        return r;
      }
    }
    for (const ProcessExit& e : r.early_failures) {
      const auto i = static_cast<size_t>(e.index);
      const bool reported = i < r.markers.size() && !r.markers[i].empty();
      if (!reported && (e.term_signal != 0 || e.exit_code == 255)) {
        r.reported = false;
        r.marker.clear();
        r.failure = e;
        return r;
      }
    }
    return r;
  }

  static JobOutcome outcome(const WorldInfo& world, const GroupResult& group_result) {
    const GroupResult result = cause(group_result);
    JobOutcome out{.exit_code = result.exit_code, .message = ""};
    if (result.end == GroupEnd::kProcessFailed && !result.reported) {
      out.exit_code = result.failure.shell_code();
    }
    // A node that reported a failure was still running when the stop began: not an "other".
    const int others = result.stopped > 0 ? result.stopped - 1 : 0;
    if (result.end == GroupEnd::kProcessFailed) {
      const auto n = static_cast<size_t>(result.failure.index);
      const std::string& host = world.hosts[n].host;
      std::optional<NodeFailure> f = node_failure_parse(result.marker);
      if (result.reported && f) {
        out.exit_code = f->code;
        out.message = fmt::format(
            "zt launch: rank {} on {} (node {}) {}; stopped the other {} node(s); exiting with {}",
            f->rank, host, n, f->what, others, f->code);
      } else if (result.failure.term_signal == 0 && result.failure.exit_code == 255) {
        out.message = fmt::format(
            "zt launch: node {} ({}) lost: ssh exited with code 255 (the connection failed or the "
            "host went down; ssh's message is above); stopped the other {} node(s); exiting with "
            "255",
            n, host, result.stopped);
      } else {
        out.message = fmt::format(
            "zt launch: node {} ({}) {} before any of its ranks failed (its message is above); "
            "stopped the other {} node(s); exiting with {}",
            n, host, result.failure.describe(), result.stopped, out.exit_code);
      }
    } else if (result.end == GroupEnd::kInterrupted) {
      out.message = fmt::format("zt launch: received {}; stopped {} node(s); exiting with {}",
                                signal_name(result.launcher_signal), result.stopped,
                                result.exit_code);
    }
    return out;
  }
};

class PdshRunner final : public Runner {
 public:
  std::string_view name() const override { return "pdsh"; }

  Result<JobOutcome> run(const LaunchJob& job) override {
    const LaunchOptions& o = *job.options;
    const WorldInfo& world = *job.world;
    ZT_RETURN_IF_ERROR(hosts_check(world, o));
    Result<std::string> pdsh = executable_resolve("pdsh", path_env());
    if (!pdsh.is_ok()) {
      return not_found(
          "--launcher pdsh: pdsh is not installed here (Debian package pdsh: apt-get install "
          "pdsh); or leave --launcher out to use zt launch's own ssh runner");
    }
    ZT_ASSIGN_OR_RETURN(std::string ssh, ssh_program_find());
    ZT_ASSIGN_OR_RETURN(Prepared prep, prepare(job, ssh));
    const std::string& master_addr = prep.master_addr;
    const std::vector<ExportedVar>& exported = prep.exported;
    NodeCommandInputs cmd = prep.command;
    cmd.link_stdin = false;  // pdsh does not pass stdin on
    ProcessSpec spec;
    spec.label = "pdsh";
    spec.exec_path = *pdsh;
    spec.argv = pdsh_argv(*pdsh, o, world.hosts,
                          remote_command(job.cwd, exported, node_launcher_argv(cmd, "%n")));
    spec.env = job.base_env;
    // As DeepSpeed sets them: pdsh connects with ssh, on --ssh_port.
    env_set(spec.env, "PDSH_RCMD_TYPE", "ssh");
    if (o.ssh_port > 0) env_set(spec.env, "PDSH_SSH_ARGS_APPEND", fmt::format("-p {}", o.ssh_port));
    ZT_LOG_INFO("starting {} rank(s) on {} node(s) through pdsh, MASTER_ADDR={} MASTER_PORT={}",
                world_size(world), world.hosts.size(), master_addr, o.master_port);
    std::fflush(nullptr);
    ProcessGroupOptions group_options = job.group_options;
    group_options.heartbeat_timeout = std::chrono::milliseconds(0);
    ZT_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> group,
                        ProcessGroup::start({spec}, group_options));
    GroupResult result = group->wait();
    JobOutcome out{.exit_code = result.exit_code, .message = ""};
    if (result.end == GroupEnd::kProcessFailed) {
      out.message = fmt::format(
          "zt launch: pdsh {} (the failing node's line above names the rank); exiting with {}",
          result.failure.describe(), result.exit_code);
    } else if (result.end == GroupEnd::kInterrupted) {
      out.message = fmt::format("zt launch: received {}; stopped pdsh; exiting with {}",
                                signal_name(result.launcher_signal), result.exit_code);
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Runner> ssh_runner_new() { return std::make_unique<SshRunner>(); }
std::unique_ptr<Runner> pdsh_runner_new() { return std::make_unique<PdshRunner>(); }

Result<std::string> ssh_program_find() {
  const char* custom = std::getenv(kSshProgramEnv);
  if (custom != nullptr && custom[0] != '\0') {
    Result<std::string> found = executable_resolve(custom, path_env());
    if (!found.is_ok()) {
      return invalid_argument("{}={}: {}", kSshProgramEnv, custom, found.status().message());
    }
    return found;
  }
  Result<std::string> found = executable_resolve("ssh", path_env());
  if (!found.is_ok()) {
    return not_found(
        "multi-node launching needs the ssh client, which is not on PATH: install the Debian "
        "package openssh-client");
  }
  return found;
}

Result<std::string> master_addr_decide(const WorldInfo& world, const LaunchOptions& o,
                                       const std::string& ssh) {
  if (!world.master_addr.empty()) return world.master_addr;
  if (std::all_of(world.local.begin(), world.local.end(), [](bool l) { return l; })) {
    return std::string("127.0.0.1");
  }
  const std::string& first = world.hosts.front().host;
  if (world.local.front()) {
    std::string addr = local_address_first();
    if (addr.empty()) {
      return unavailable(
          "cannot find an address of this machine (host {}, the first of the hostfile) that the "
          "other nodes can reach: pass --master_addr",
          first);
    }
    return addr;
  }
  std::vector<Captured> r =
      run_captured_parallel({ssh_argv(ssh, o, first, "hostname -I")}, kSshConnectTimeout + 5.0);
  std::string out = r[0].out;
  const size_t start = out.find_first_not_of(" \t\n");
  const size_t end = out.find_first_of(" \t\n", start);
  if (r[0].exit_code != 0 || start == std::string::npos) {
    return unavailable(
        "multi-node pre-flight: host {}: could not learn its address with `ssh {} hostname -I` "
        "({}); pass --master_addr, or fix ssh (or pass --no_ssh_check with --master_addr)",
        first, first,
        r[0].timed_out ? "no answer"
                       : (last_line(r[0].err).empty() ? fmt::format("exit {}", r[0].exit_code)
                                                      : last_line(r[0].err)));
  }
  return out.substr(start, end == std::string::npos ? end : end - start);
}

}  // namespace zt::launcher
