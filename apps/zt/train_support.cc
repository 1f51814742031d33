#include "train_support.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include <fmt/ranges.h>

#include "zt/core/log.h"

namespace zt::cli {

Result<WriteErrorPolicy> write_error_policy(const std::string& value) {
  if (value == "fail") return WriteErrorPolicy::kFail;
  if (value == "warn") return WriteErrorPolicy::kWarn;
  return invalid_argument("--on-write-error must be fail or warn, got '{}'", value);
}

Status MetricsWriter::open(const std::string& path) {
  auto f = OutputFile::create(path, {.mode = OutputMode::kStream, .what = "metrics file"});
  if (!f) return handle(f.status());
  file_.emplace(std::move(f).value());
  return Status::ok();
}

Status MetricsWriter::write(const nlohmann::json& record) {
  if (!file_) return Status::ok();
  return handle(file_->write(record.dump() + "\n"));
}

Status MetricsWriter::close() {
  if (!file_) return Status::ok();
  Status s = file_->commit();
  file_.reset();
  return handle(s);
}

Status MetricsWriter::handle(Status s) {
  if (s.is_ok()) return s;
  file_.reset();
  if (policy_ == WriteErrorPolicy::kFail) {
    return Status(s.code(), s.message() + " (--on-write-error warn trains on without it)");
  }
  ZT_LOG_WARN("{}; metrics are no longer written (--on-write-error warn)", s.message());
  return Status::ok();
}

namespace {
char g_data_fault_message[1024];
size_t g_data_fault_length = 0;

void on_data_fault(int /*sig*/) {
  ssize_t n = write(STDERR_FILENO, g_data_fault_message, g_data_fault_length);
  (void)n;
  _exit(1);
}
}  // namespace

void data_fault_handler_install(const std::vector<std::string>& data_paths) {
  const std::string msg = fmt::format(
      "zt: error: reading token file{} '{}' failed (SIGBUS): the file was truncated or replaced "
      "while training read it, or its disk failed; restore it and resume from the last "
      "checkpoint\n",
      data_paths.size() > 1 ? "s" : "", fmt::join(data_paths, "', '"));
  g_data_fault_length = std::min(msg.size(), sizeof(g_data_fault_message));
  std::memcpy(g_data_fault_message, msg.data(), g_data_fault_length);
  struct sigaction action {};
  action.sa_handler = on_data_fault;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, nullptr);
}

Result<std::optional<std::vector<std::string>>> data_args_extract(std::vector<std::string>& args) {
  const auto is_value = [](const std::string& a) {
    if (a.empty() || a[0] != '-') return true;
    char* end = nullptr;
    std::strtod(a.c_str(), &end);
    return a.size() > 1 && *end == '\0';  // "-0.5": a (bad) weight, not an option
  };
  std::optional<std::vector<std::string>> values;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool inline_value = a.rfind("--data=", 0) == 0;
    if (a != "--data" && !inline_value) {
      rest.push_back(a);
      continue;
    }
    if (values) {
      return invalid_argument(
          "zt train: --data is given twice; give one file, or one blend of WEIGHT FILE pairs "
          "after a single --data");
    }
    values.emplace();
    if (inline_value) values->push_back(a.substr(7));
    while (i + 1 < args.size() && is_value(args[i + 1])) values->push_back(args[++i]);
    if (values->empty() || values->front().empty()) {
      return invalid_argument(
          "zt train: option '--data' needs a value (FILE, or WEIGHT FILE pairs such as --data "
          "0.7 a.bin 0.3 b.bin)");
    }
  }
  args = std::move(rest);
  return values;
}

namespace {
std::atomic<int> g_save_signal{0};
void on_save_signal(int sig) {
  g_save_signal.store(sig);
}
}  // namespace

void signal_save_install() {
  struct sigaction action {};
  action.sa_handler = on_save_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

Result<Device> train_device(const ParsedArgs& a, int local_rank) {
  Device device = cuda_device_count() > 0 ? Device::cuda(local_rank) : Device::cpu();
  if (auto d = a.get("--device")) {
    ZT_ASSIGN_OR_RETURN(device, device_parse(*d));
    if (device.is_cuda() && *d == "cuda") device = Device::cuda(local_rank);
  }
  ZT_RETURN_IF_ERROR(device_check(device));
  return device;
}

Result<SaveFlags> save_flags(const ParsedArgs& a) {
  SaveFlags f{.dir = a.get("--save"),
              .on_signal = a.has("--save-on-signal"),
              .async = a.has("--save-async")};
  if (auto v = a.get("--save-interval")) {
    ZT_ASSIGN_OR_RETURN(f.interval, parse_int("--save-interval", *v, 1));
  }
  if (auto v = a.get("--keep-last")) {
    ZT_ASSIGN_OR_RETURN(f.keep_last, parse_int("--keep-last", *v, 1));
  }
  if (!f.dir && (a.has("--save-interval") || a.has("--keep-last") || f.on_signal || f.async)) {
    return invalid_argument(
        "--save-interval, --keep-last, --save-async and --save-on-signal need --save DIR (where "
        "to save)");
  }
  return f;
}

Result<CheckpointLoadOptions> load_flags(const ParsedArgs& a) {
  if (!a.get("--load") && (a.has("--load-tag") || a.has("--load-module-only") ||
                           a.has("--no-load-optimizer-states") ||
                           a.has("--no-load-lr-scheduler-states"))) {
    return invalid_argument(
        "--load-tag, --load-module-only and --no-load-* need --load DIR (where to load from)");
  }
  return CheckpointLoadOptions{.tag = a.get("--load-tag").value_or(""),
                               .load_optimizer_states = !a.has("--no-load-optimizer-states"),
                               .load_lr_scheduler_states = !a.has("--no-load-lr-scheduler-states"),
                               .load_module_only = a.has("--load-module-only")};
}

Status record_metrics(MetricsWriter& metrics,
                      const std::vector<std::unique_ptr<tools::Monitor>>& monitors,
                      const nlohmann::json& rec, int64_t samples) {
  ZT_RETURN_IF_ERROR(metrics.write(rec));
  if (monitors.empty()) return Status::ok();
  std::vector<tools::MonitorEvent> events;
  for (auto it = rec.begin(); it != rec.end(); ++it) {
    if (it.key() == "step" || it.key() == "samples" || !it.value().is_number()) continue;
    const std::string name = it.key() == "loss" ? "train_loss" : it.key();
    events.push_back({"Train/Samples/" + name, it.value().get<double>(), samples});
  }
  for (const auto& mon : monitors) {
    ZT_RETURN_IF_ERROR(mon->write(events));
    ZT_RETURN_IF_ERROR(mon->flush());
  }
  return Status::ok();
}

Status checkpoint_flags(const ParsedArgs& a, EngineOptions& options) {
  options.activation_checkpointing = a.has("--gradient-checkpointing");
  options.keep_activations = a.has("--keep-activations");
  if (auto v = a.get("--activation-checkpoint-interval")) {
    ZT_ASSIGN_OR_RETURN(const int64_t n, parse_int("--activation-checkpoint-interval", *v, 0));
    if (n == 0 && options.activation_checkpointing) {
      return invalid_argument(
          "--activation-checkpoint-interval 0 turns checkpointing off, but "
          "--gradient-checkpointing asks for it: give one of them");
    }
    options.activation_checkpointing = n > 0;
    options.activation_checkpoint_interval = static_cast<int>(std::max<int64_t>(n, 1));
  }
  return Status::ok();
}

Result<bool> signal_save_requested(Engine& engine) {
  std::vector<double> flag{g_save_signal.load() != 0 ? 1.0 : 0.0};
  ZT_RETURN_IF_ERROR(engine.all_reduce_job(flag, ReduceOp::kMax));  // (every pipeline stage too)
  return flag[0] != 0.0;
}

}  // namespace zt::cli
