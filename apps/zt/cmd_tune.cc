// `zt tune [FLAGS] -- COMMAND...` and `zt launch --autotuning tune|run [FLAGS] COMMAND...`:
// DeepSpeed's autotuner (tools/autotune.h, docs/autotuning.md). This file only turns the command
// line into a TuneRequest; the tuning is tools::autotune_main.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "cli_args.h"
#include "commands.h"
#include "zt/launcher/launch.h"
#include "zt/tools/autotune.h"

namespace zt::cli {
namespace {

constexpr const char* kUsage = R"(Usage: zt tune [options] [--] COMMAND...
       zt launch --autotuning tune|run [launcher flags] COMMAND...

Finds the fastest ZeRO stage and micro-batch (and, with "fast": false in the config's autotuning
block, reduce_bucket_size, stage3_prefetch_bucket_size, overlap_comm and offload_optimizer) for
COMMAND, a `zt train ... --config ds_config.json` command, as DeepSpeed's autotuner does: the
memory estimator drops candidates that would not fit, each remaining one runs as a short real
training run through `zt launch` (end_profile_step steps; the metric averages steps
start_profile_step..end_profile_step), failures and out-of-memory runs are recorded and skipped.
Writes results_dir/summary.txt, ds_config_optimal.json and cmd_optimal.txt. The config's
"autotuning" block holds DeepSpeed's keys (docs/autotuning.md).

Example:
  zt tune --num_procs 2 --device cpu -- zt train --config ds.json --model gpt2-tiny --steps 500

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"--num_gpus", FlagKind::kValue, "GPU ranks per trial (default: every visible GPU)", "N"},
    {"--num_procs", FlagKind::kValue, "CPU ranks per trial (no GPU needed)", "N"},
    {"--device", FlagKind::kValue,
     "cpu: CPU ranks (--num_procs, default 1) and `--device cpu` for COMMAND; cuda (default)",
     "DEV"},
    {"--master_port", FlagKind::kValue, "first rendezvous port to try for the trials", "PORT"},
    {"--trial-timeout", FlagKind::kValue,
     "seconds a trial may run before it is stopped and recorded as timed out (default 600, or "
     "ZT_TUNE_TRIAL_TIMEOUT_S)",
     "S"},
    {"--run", FlagKind::kSwitch, "after tuning, train with the optimal configuration"},
    {"--help", FlagKind::kSwitch, "this help"},
};

constexpr double kDefaultTrialTimeout = 600;

Result<double> trial_timeout(const std::optional<std::string>& flag) {
  std::string text;
  std::string what = "--trial-timeout";
  if (flag) {
    text = *flag;
  } else if (const char* e = std::getenv("ZT_TUNE_TRIAL_TIMEOUT_S"); e != nullptr && *e != '\0') {
    text = e;
    what = "ZT_TUNE_TRIAL_TIMEOUT_S";
  } else {
    return kDefaultTrialTimeout;
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v <= 0) {
    return invalid_argument("{} must be a positive number of seconds, got '{}'", what, text);
  }
  return v;
}

std::string self_binary() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "zt";
  return std::string(buf, static_cast<size_t>(n));
}

// Splits `zt tune`'s own flags from COMMAND: "--" ends them; else COMMAND starts at the first
// argument that is neither a flag nor a flag's value.
void args_split(const Args& args, Args* own, Args* command) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (!a.starts_with("-")) break;
    own->push_back(a);
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : kFlags) {
      if (f.name == a) spec = &f;
    }
    if (spec != nullptr && spec->kind == FlagKind::kValue && i + 1 < args.size()) {
      own->push_back(args[++i]);
    }
  }
  command->assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
}

}  // namespace

int cmd_tune(const Args& args) {
  Args own, command;
  args_split(args, &own, &command);
  auto parsed = parse_args("zt tune", kFlags, own);
  if (!parsed) return fail(parsed.status());
  const ParsedArgs& a = *parsed;
  if (a.has("--help")) {
    std::printf("%s%s", kUsage, usage_flags(kFlags).c_str());
    return 0;
  }
  if (command.empty()) {
    return fail(
        invalid_argument("zt tune needs the training command: zt tune [FLAGS] -- zt train --config "
                         "ds_config.json ... (see zt tune --help)"));
  }
  tools::TuneRequest req;
  req.mode = a.has("--run") ? tools::TuneMode::kRun : tools::TuneMode::kTune;
  req.zt_binary = self_binary();
  const std::string device = a.get("--device").value_or("cuda");
  if (device != "cpu" && device != "cuda") {
    return fail(invalid_argument("--device must be cpu or cuda, not '{}'", device));
  }
  if (a.has("--num_gpus") && a.has("--num_procs")) {
    return fail(
        invalid_argument("--num_gpus and --num_procs exclude each other (GPU or CPU ranks)"));
  }
  if (device == "cpu" && a.has("--num_gpus")) {
    return fail(invalid_argument("--device cpu runs CPU ranks: use --num_procs N, not --num_gpus"));
  }
  for (const char* f : {"--num_gpus", "--num_procs"}) {
    if (auto v = a.get(f)) {
      auto n = parse_int(f, *v, 1);
      if (!n) return fail(n.status());
      req.launch_flags = {f, std::to_string(*n)};
    }
  }
  if (device == "cpu") {
    if (req.launch_flags.empty()) req.launch_flags = {"--num_procs", "1"};
    const auto d = tools::command_flag(command, "--device");
    if (d && *d != "cpu") {
      return fail(invalid_argument(
          "--device cpu: the training command says --device {}; drop one of the two", *d));
    }
    if (!d) command = tools::command_flag_set(command, "--device", "cpu");
  }
  if (auto p = a.get("--master_port")) {
    auto port = parse_int("--master_port", *p, 1);
    if (!port) return fail(port.status());
    if (*port > 65535) return fail(invalid_argument("--master_port {} is out of range", *port));
    req.master_port = static_cast<int>(*port);
  }
  auto timeout = trial_timeout(a.get("--trial-timeout"));
  if (!timeout) return fail(timeout.status());
  req.trial_timeout_s = *timeout;
  req.command = command;
  return tools::autotune_main(req);
}

int launch_autotune(const launcher::LaunchOptions& o, const Args& args) {
  // The launcher flags are what comes before PROGRAM; each trial gets them again, less
  // --autotuning (a trial is a plain launch) and --master_port (each trial takes a free one).
  const size_t flags_end = args.size() - o.program_args.size() - 1;
  tools::TuneRequest req;
  req.mode = o.autotuning == "run" ? tools::TuneMode::kRun : tools::TuneMode::kTune;
  req.zt_binary = self_binary();
  for (size_t i = 0; i < flags_end; ++i) {
    const std::string& f = args[i];
    if (f == "--") continue;
    if (f == "--autotuning" || f == "--master_port") {
      if (f == "--master_port") req.master_port = o.master_port;
      ++i;
      continue;
    }
    if (f.starts_with("--autotuning=")) continue;
    if (f.starts_with("--master_port=")) {
      req.master_port = o.master_port;
      continue;
    }
    req.launch_flags.push_back(f);
  }
  auto timeout = trial_timeout(std::nullopt);
  if (!timeout) return fail(timeout.status());
  req.trial_timeout_s = *timeout;
  req.command = {o.program};
  req.command.insert(req.command.end(), o.program_args.begin(), o.program_args.end());
  return tools::autotune_main(req);
}

}  // namespace zt::cli
