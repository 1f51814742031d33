// One autotuning trial as data (autotune.h): the candidate's ds_config, the training command
// rewritten for a short measured run, the metric read back from its --metrics-out file, and the
// out-of-memory check of a failed trial's output. The process itself is autotune_session.cc's.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "zt/tools/autotune.h"

namespace zt::tools {
namespace {

using Json = nlohmann::json;

// DeepSpeed's get_first_config: a list left in the user's zero_optimization (values to tune)
// becomes its first element when the candidate does not set that key.
void lists_to_first(Json& block) {
  for (auto& [k, v] : block.items()) {
    if (v.is_array() && !v.empty()) v = v.front();
  }
}

// A config value as a command-line argument; nullopt for null/"auto"/objects.
std::optional<std::string> arg_text(const Json& v) {
  if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
  if (v.is_number_integer()) return fmt::format("{}", v.get<int64_t>());
  if (v.is_number()) {
    const double d = v.get<double>();
    if (d == std::floor(d) && std::abs(d) < 9e15) return fmt::format("{}", static_cast<int64_t>(d));
    return fmt::format("{}", d);
  }
  if (v.is_string() && v.get<std::string>() != "auto") return v.get<std::string>();
  return std::nullopt;
}

// DeepSpeed's ResourceManager: each arg_mappings flag gets the config's value of its key.
std::vector<std::string> arg_mappings_apply(std::vector<std::string> cmd,
                                            const AutotuningConfig& cfg, const Json& config) {
  for (const auto& [key, flag] : cfg.arg_mappings) {
    const Json* v = nullptr;
    if (config.contains(key)) {
      v = &config[key];
    } else if (config.contains("zero_optimization") && config["zero_optimization"].is_object() &&
               config["zero_optimization"].contains(key)) {
      v = &config["zero_optimization"][key];
    }
    if (v == nullptr) continue;
    if (auto text = arg_text(*v)) cmd = command_flag_set(std::move(cmd), flag, *text);
  }
  return cmd;
}

bool is_flag_at(const std::string& arg, const std::string& flag) {
  return arg == flag || arg.starts_with(flag + "=");
}

}  // namespace

Json trial_config(const Json& user_config, const Candidate& c, int world) {
  Json t = user_config.is_object() ? user_config : Json::object();
  t.erase("autotuning");
  if (!t.contains("zero_optimization") || !t["zero_optimization"].is_object()) {
    t["zero_optimization"] = Json::object();
  }
  Json& z = t["zero_optimization"];
  lists_to_first(z);
  z["stage"] = c.stage;
  t["train_micro_batch_size_per_gpu"] = c.micro_batch;
  t["gradient_accumulation_steps"] = c.gas;
  t["train_batch_size"] = c.train_batch_size(world);
  const ZeroKnobs& k = c.knobs;
  if (k.reduce_bucket_size) z["reduce_bucket_size"] = *k.reduce_bucket_size;
  if (k.prefetch_bucket_size) {
    z.erase("prefetch_bucket_size");  // the field's name; the alias below is the usual spelling
    z["stage3_prefetch_bucket_size"] = *k.prefetch_bucket_size;
  }
  if (k.overlap_comm) z["overlap_comm"] = *k.overlap_comm;
  if (k.offload_optimizer) {
    if (!z.contains("offload_optimizer") || !z["offload_optimizer"].is_object()) {
      z["offload_optimizer"] = *k.offload_optimizer ? Json{{"pin_memory", true}} : Json::object();
    }
    z["offload_optimizer"]["device"] = *k.offload_optimizer ? "cpu" : "none";
  }
  return t;
}

std::optional<std::string> command_flag(const std::vector<std::string>& cmd,
                                        const std::string& flag) {
  std::optional<std::string> found;
  for (size_t i = 1; i < cmd.size(); ++i) {
    if (cmd[i] == flag && i + 1 < cmd.size()) {
      found = cmd[i + 1];
      ++i;
    } else if (cmd[i].starts_with(flag + "=")) {
      found = cmd[i].substr(flag.size() + 1);
    }
  }
  return found;
}

std::vector<std::string> command_flag_set(std::vector<std::string> cmd, const std::string& flag,
                                          const std::string& value) {
  std::vector<std::string> out;
  bool placed = false;
  for (size_t i = 0; i < cmd.size(); ++i) {
    if (i > 0 && is_flag_at(cmd[i], flag)) {
      if (cmd[i] == flag && i + 1 < cmd.size()) ++i;  // its value
      if (!placed) {
        out.push_back(flag);
        out.push_back(value);
        placed = true;
      }
      continue;
    }
    out.push_back(cmd[i]);
  }
  if (!placed) {
    out.push_back(flag);
    out.push_back(value);
  }
  return out;
}

std::vector<std::string> command_flag_remove(std::vector<std::string> cmd, const std::string& flag,
                                             FlagArity arity) {
  std::vector<std::string> out;
  for (size_t i = 0; i < cmd.size(); ++i) {
    if (i > 0 && is_flag_at(cmd[i], flag)) {
      if (arity == FlagArity::kValue && cmd[i] == flag && i + 1 < cmd.size()) ++i;
      continue;
    }
    out.push_back(cmd[i]);
  }
  return out;
}

std::optional<std::string> command_config_flag(const std::vector<std::string>& cmd) {
  for (const char* f : {"--config", "--deepspeed_config"}) {
    if (command_flag(cmd, f)) return std::string(f);
  }
  return std::nullopt;
}

std::vector<std::string> trial_command(const std::vector<std::string>& user_cmd,
                                       const AutotuningConfig& cfg, const std::string& config_path,
                                       const std::string& metrics_path, const Json& config) {
  std::vector<std::string> cmd = user_cmd;
  cmd =
      command_flag_set(std::move(cmd), command_config_flag(cmd).value_or("--config"), config_path);
  cmd = command_flag_set(std::move(cmd), "--steps", std::to_string(cfg.end_profile_step));
  cmd = command_flag_set(std::move(cmd), "--metrics-out", metrics_path);
  cmd = command_flag_set(std::move(cmd), "--sample-tokens", "0");
  // A trial measures speed: it neither writes checkpoints into the user's folders nor resumes
  // from one (a resumed run could start past end_profile_step and measure nothing).
  for (const char* f : {"--save", "--save-interval", "--keep-last", "--save-16bit-model",
                        "--dump-params", "--load", "--load-tag"}) {
    cmd = command_flag_remove(std::move(cmd), f, FlagArity::kValue);
  }
  for (const char* f : {"--save-async", "--save-on-signal", "--load-module-only",
                        "--no-load-optimizer-states", "--no-load-lr-scheduler-states"}) {
    cmd = command_flag_remove(std::move(cmd), f, FlagArity::kSwitch);
  }
  return arg_mappings_apply(std::move(cmd), cfg, config);
}

std::vector<std::string> optimal_command(const std::vector<std::string>& user_cmd,
                                         const AutotuningConfig& cfg,
                                         const std::string& config_path, const Json& config) {
  std::vector<std::string> cmd = user_cmd;
  cmd =
      command_flag_set(std::move(cmd), command_config_flag(cmd).value_or("--config"), config_path);
  return arg_mappings_apply(std::move(cmd), cfg, config);
}

Result<TrialResult> trial_metrics_read(const std::string& jsonl, const AutotuningConfig& cfg,
                                       bool activation_checkpointing) {
  std::istringstream in(jsonl);
  std::optional<Json> run;
  std::vector<double> step_seconds;
  int64_t steps_seen = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    Json r = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (r.is_discarded() || !r.is_object()) continue;  // a line cut by a killed trial
    if (r.value("type", "") == "run") {
      run = r;
      continue;
    }
    if (!r.contains("step") || !r.contains("tokens_per_s") || !r["step"].is_number() ||
        !r["tokens_per_s"].is_number()) {
      continue;  // evaluation records
    }
    ++steps_seen;
    const int64_t step = r["step"].get<int64_t>();
    if (step < cfg.start_profile_step || step > cfg.end_profile_step) continue;
    if (!run) return invalid_argument("the metrics file has step records before its run record");
    const double tps = r["tokens_per_s"].get<double>();
    if (!(tps > 0)) return invalid_argument("step {} has tokens_per_s {}", step, tps);
    const double tokens = static_cast<double>(run->value("train_batch_size", int64_t{0})) *
                          static_cast<double>(run->value("seq_len", int64_t{0}));
    step_seconds.push_back(tokens / tps);
  }
  if (!run) return invalid_argument("the metrics file has no run record (type \"run\")");
  if (step_seconds.empty()) {
    return invalid_argument(
        "no step records from start_profile_step {} to end_profile_step {} ({} step(s) recorded)",
        cfg.start_profile_step, cfg.end_profile_step, steps_seen);
  }
  double mean = 0;
  for (double s : step_seconds) mean += s;
  mean /= static_cast<double>(step_seconds.size());
  const double tbs = static_cast<double>(run->value("train_batch_size", int64_t{0}));
  const double seq = static_cast<double>(run->value("seq_len", int64_t{0}));
  const double params = static_cast<double>(run->value("parameters", int64_t{0}));
  const double layers = static_cast<double>(run->value("n_layer", int64_t{0}));
  const double width = static_cast<double>(run->value("n_embd", int64_t{0}));
  const double world = std::max<double>(1.0, static_cast<double>(run->value("world_size", 1)));
  if (!(mean > 0) || tbs <= 0) {
    return invalid_argument("the run record lacks train_batch_size or seq_len");
  }
  TrialResult r;
  r.status = TrialStatus::kOk;
  r.latency_ms = mean * 1e3;
  r.throughput = tbs / mean;
  const double per_token =
      (6.0 * params + 12.0 * layers * width * seq) * (activation_checkpointing ? 4.0 / 3.0 : 1.0);
  r.flops_per_gpu = per_token * tbs * seq / mean / world;
  r.metric = cfg.metric == TuneMetric::kLatency ? r.latency_ms
             : cfg.metric == TuneMetric::kFlops ? r.flops_per_gpu
                                                : r.throughput;
  return r;
}

std::string oom_line(const std::string& log_text) {
  static const char* const kPatterns[] = {
      "out of memory", "out of gpu memory", "out_of_memory",         "cudaerrormemoryallocation",
      "alloc_failed",  "std::bad_alloc",    "cannot allocate memory"};
  std::istringstream in(log_text);
  for (std::string line; std::getline(in, line);) {
    std::string low = line;
    std::transform(low.begin(), low.end(), low.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    for (const char* p : kPatterns) {
      if (low.find(p) == std::string::npos) continue;
      size_t b = line.find_first_not_of(" \t\r");
      size_t e = line.find_last_not_of(" \t\r");
      std::string t = line.substr(b, e - b + 1);
      if (t.size() > 200) t = t.substr(0, 197) + "...";
      return t;
    }
  }
  return "";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](unsigned char ch) {
      return std::isalnum(ch) ||
             std::string_view("_@%+=:,./-").find(static_cast<char>(ch)) != std::string_view::npos;
    });
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char ch : a) {
      if (ch == '\'') {
        out += "'\\''";
      } else {
        out += ch;
      }
    }
    out += '\'';
  }
  return out;
}

}  // namespace zt::tools
