// The whole of `zt tune` / `zt launch --autotuning` (autotune.h): reads the user's ds_config and
// autotuning block, decides the ranks of a trial as `zt launch` would, sizes the candidates with
// the memory estimator, runs both phases as `zt launch` child processes with a timeout, writes
// the results and, for `run`, trains with the best configuration.
// Trials run as child processes (autotune_process.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "zt/checkpoint/model_open.h"
#include "zt/core/device.h"
#include "zt/core/file_io.h"
#include "zt/launcher/process_group.h"
#include "zt/launcher/world.h"
#include "zt/runtime/config.h"
#include "zt/runtime/config_schema.h"
#include "zt/tasks/lora.h"
#include "zt/tools/autotune.h"
#include "zt/tools/autotune_process.h"
#include "zt/tools/estimate.h"

namespace zt::tools {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// MemAvailable of /proc/meminfo in bytes, or 0.
int64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

std::string gib(int64_t bytes) {
  return fmt::format("{:.1f} GiB", bytes / 1073741824.0);
}

void say(const std::string& line) {
  std::fprintf(stderr, "zt tune: %s\n", line.c_str());
  std::fflush(stderr);
}

// ---- the memory prune: zt estimate's prediction for each candidate

struct Prune {
  FitFn fits;                                       // null: no prune
  std::string about;                                // one line: what the budget is
  std::function<int64_t(const Candidate&)> need{};  // predicted bytes per rank, reserve included
  int64_t budget = 0;
};

Prune prune_make(const std::vector<std::string>& cmd, const Json& user_config, int world,
                 bool cpu) {
  const std::string model_name = command_flag(cmd, "--model").value_or("gpt2-tiny");
  ckpt::ModelOverrides overrides;
  if (auto v = command_flag(cmd, "--vocab-size")) overrides.vocab_size = std::atoi(v->c_str());
  auto choice = ckpt::model_open(model_name, overrides);
  if (!choice) {
    return {nullptr,
            fmt::format("no memory prune: --model {}: {}", model_name, choice.status().message())};
  }
  auto model = std::shared_ptr<nn::Transformer>(std::move(choice->model));
  if (auto r = command_flag(cmd, "--lora-dim")) {
    tasks::LoraOptions lo{.r = std::atoi(r->c_str())};
    lo.only_optimize = std::find(cmd.begin(), cmd.end(), "--only-optimize-lora") != cmd.end();
    if (auto m = command_flag(cmd, "--lora-modules")) {
      std::stringstream list(*m);
      for (std::string item; std::getline(list, item, ',');) {
        if (!item.empty()) lo.modules.push_back(item);
      }
    }
    if (Status s = tasks::lora_apply(*model, lo); !s.is_ok()) {
      return {nullptr, "no memory prune: --lora-dim: " + s.message()};
    }
  }
  const bool tiny = model_name == "gpt2-tiny" || model_name == "llama-tiny";
  const int64_t max_pos = model->transformer_config().max_positions;
  int64_t seq = tiny ? 128 : std::min<int64_t>(max_pos, 2048);
  if (auto s = command_flag(cmd, "--seq-len")) seq = std::atoll(s->c_str());
  if (seq < 1 || seq > max_pos) {
    return {nullptr, fmt::format("no memory prune: --seq-len {} is not a sequence length {} "
                                 "takes (zt train will say why)",
                                 *command_flag(cmd, "--seq-len"), model_name)};
  }
  const Checkpointing ckpt =
      std::find(cmd.begin(), cmd.end(), "--gradient-checkpointing") != cmd.end()
          ? Checkpointing::kOn
          : Checkpointing::kOff;
  const bool keep = std::find(cmd.begin(), cmd.end(), "--keep-activations") != cmd.end();
  int64_t budget = 0, reserve = 0;
  std::string about;
  if (cpu) {
    budget = host_available_bytes() / std::max(1, world);
    about = fmt::format("CPU ranks: {} of available host memory per rank", gib(budget));
  } else if (cuda_device_count() > 0) {
    budget = cuda_device_total_memory(0);
    reserve = kCudaReserveBytes;
    about = fmt::format("{}: {} per GPU, {} held back for the CUDA context", cuda_device_name(0),
                        gib(budget), gib(reserve));
  } else {
    budget = int64_t{80} << 30;
    reserve = kCudaReserveBytes;
    about = "no GPU visible to zt tune: 80 GiB per GPU assumed";
  }
  if (budget <= 0) return {nullptr, "no memory prune: cannot read the available memory"};
  const EstimateDevice device = cpu ? EstimateDevice::kCpu : EstimateDevice::kCuda;
  // 0 when the config does not parse: the trial reports that error itself.
  auto need = [=](const Candidate& c) -> int64_t {
    const Json t = trial_config(user_config, c, world);
    auto cfg = config_parse(t.dump(), c.name(), world);
    if (!cfg) return 0;
    const MemoryPrediction p = predict_memory(*model, *cfg, device, world,
                                              {.micro_batch = c.micro_batch,
                                               .seq_len = seq,
                                               .checkpointing = ckpt,
                                               .keep_activations = keep});
    return p.device_total() + reserve;
  };
  FitFn fits = [=](const Candidate& c) { return need(c) <= budget; };
  return {fits,
          fmt::format("{} ({}, sequence {}{}{})", about, model_name, seq,
                      ckpt == Checkpointing::kOn ? ", activation checkpointing" : "",
                      keep ? ", activations kept" : ""),
          need, budget};
}

struct Session {
  const TuneRequest& req;
  AutotuningConfig cfg{};
  Json user_config{};
  int world = 1;
  bool cpu = false;
  bool checkpointing = false;
  int next_port = 29500;
  std::vector<TrialRecord> trials{};
  std::vector<std::string> measured_configs{};  // resolved configs already tried (config_to_json)

  // The resolved form of a candidate's config: two candidates with equal ones are the same run.
  std::string resolved(const Candidate& c) const {
    auto parsed = config_parse(trial_config(user_config, c, world).dump(), c.name(), world);
    return parsed ? config_to_json(*parsed).dump() : trial_config(user_config, c, world).dump();
  }

  TrialResult run(const Candidate& c) {
    TrialResult r;
    const std::string name = c.name();
    const fs::path dir = fs::absolute(fs::path(cfg.exps_dir) / name);
    r.exp_dir = (fs::path(cfg.exps_dir) / name).string();
    const Json config = trial_config(user_config, c, world);
    measured_configs.push_back(resolved(c));
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      r.message = fmt::format("cannot create {}: {}", dir.string(), ec.message());
      return r;
    }
    const std::string config_path = (dir / "ds_config.json").string();
    const std::string metrics_path = (dir / "metrics.jsonl").string();
    // overwrite false: a trial measured before with the same config is reused (DeepSpeed skips
    // experiments whose results exist).
    if (!cfg.overwrite && fs::exists(dir / "metrics.json", ec) && fs::exists(config_path, ec)) {
      auto old_cfg = file_read_all(config_path, "trial config");
      auto old_m = file_read_all(metrics_path, "trial metrics");
      if (old_cfg && old_m) {
        Json oc = Json::parse(*old_cfg, nullptr, false);
        auto m = trial_metrics_read(*old_m, cfg, checkpointing);
        if (!oc.is_discarded() && oc == config && m) {
          m->exp_dir = r.exp_dir;
          m->message = "reused (overwrite: false)";
          return *m;
        }
      }
    }
    if (Status s = file_write_atomic(config_path, config.dump(2) + "\n", "trial config");
        !s.is_ok()) {
      r.message = s.message();
      return r;
    }
    if (auto parsed = config_parse(config.dump(), config_path, world); !parsed) {
      r.status = TrialStatus::kInvalid;
      r.message = parsed.status().message();
      return r;
    }
    const int port = port_free_from(next_port);
    next_port = port + 1;
    std::vector<std::string> argv = {req.zt_binary, "launch"};
    argv.insert(argv.end(), req.launch_flags.begin(), req.launch_flags.end());
    argv.insert(argv.end(), {"--master_port", std::to_string(port), "--"});
    const std::vector<std::string> cmd =
        trial_command(req.command, cfg, config_path, metrics_path, config);
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    (void)file_write_atomic((dir / "cmd.txt").string(), shell_join(argv) + "\n", "trial command");
    fs::remove(metrics_path, ec);
    std::vector<std::string> env = launcher::environ_copy();
    // A trial stopped at its timeout need not wait DeepSpeed's 30 s for its ranks.
    if (!launcher::env_find(env, "ZT_LAUNCH_GRACE_S"))
      launcher::env_set(env, "ZT_LAUNCH_GRACE_S", "5");
    const std::string log_path = (dir / "stdout.log").string();
    auto child = child_run(argv, env, log_path, req.trial_timeout_s);
    if (!child) {
      r.message = child.status().message();
      return r;
    }
    if (child->end == ChildEnd::kInterrupted) {
      r.status = TrialStatus::kInterrupted;
      r.message = fmt::format("stopped by signal {}", stop_signal());
      return r;
    }
    if (child->end == ChildEnd::kTimeout) {
      r.status = TrialStatus::kTimeout;
      r.message = fmt::format("stopped after the trial timeout of {:g} s", req.trial_timeout_s);
      return r;
    }
    auto log = file_read_all(log_path, "trial log", int64_t{256} << 20);
    const std::string text = log ? *log : std::string();
    if (child->exit_code != 0) {
      const std::string oom = oom_line(text);
      r.status = oom.empty() ? TrialStatus::kFailed : TrialStatus::kOom;
      if (!oom.empty()) {
        r.message = oom;
      } else {
        // The last line naming an error (usually a rank's "zt: error: ..."), else the last
        // line (the launcher's "rank R exited with code C").
        std::string last, last_error;
        std::istringstream in(text);
        for (std::string l; std::getline(in, l);) {
          if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
          last = l;
          if (l.find("error") != std::string::npos || l.find("Error") != std::string::npos) {
            last_error = l;
          }
        }
        if (!last_error.empty()) last = last_error;
        if (last.size() > 200) last = last.substr(0, 197) + "...";
        r.message = fmt::format("exit {}: {}", child->exit_code, last);
      }
      return r;
    }
    auto jsonl = file_read_all(metrics_path, "trial metrics", int64_t{256} << 20);
    if (!jsonl) {
      r.message = "no metrics: " + jsonl.status().message();
      return r;
    }
    auto m = trial_metrics_read(*jsonl, cfg, checkpointing);
    if (!m) {
      r.message = m.status().message();
      return r;
    }
    m->exp_dir = r.exp_dir;
    const Json mj = {{"latency_ms", m->latency_ms},
                     {"throughput", m->throughput},
                     {"FLOPS_per_gpu", m->flops_per_gpu},
                     {"metric", tune_metric_name(cfg.metric)},
                     {"value", m->metric}};
    (void)file_write_atomic((dir / "metrics.json").string(), mj.dump(2) + "\n", "trial metrics");
    return *m;
  }

  void observe(const TrialRecord& t, bool best, size_t total_hint, double secs) {
    const std::string head =
        fmt::format("[{}/{}] phase {} {}", trials.size(), total_hint, t.phase, t.candidate.name());
    if (t.result.ok()) {
      say(fmt::format("{}: {} {}{}  ({:.1f} s)", head, metric_text(cfg.metric, t.result.metric),
                      tune_metric_unit(cfg.metric), best ? " (best so far)" : "", secs));
    } else {
      say(fmt::format(
          "{}: {}: {}{}", head, trial_status_name(t.result.status), t.result.message,
          t.result.exp_dir.empty() ? "" : fmt::format(" ({}/stdout.log)", t.result.exp_dir)));
    }
  }
};

Result<Json> user_config_read(const std::vector<std::string>& cmd, std::string* path_out) {
  const auto flag = command_config_flag(cmd);
  if (!flag) {
    return invalid_argument(
        "the training command has no --config FILE (or --deepspeed_config FILE): the autotuner "
        "tunes that ds_config.json");
  }
  const std::string path = *command_flag(cmd, *flag);
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found("{} {}: no such file", *flag, path);
  ZT_ASSIGN_OR_RETURN(std::string text, file_read_all(path, "DeepSpeed config file", 64 << 20));
  ZT_ASSIGN_OR_RETURN(Json top, config_detail::json_text_parse(text, path));
  if (!top.is_object())
    return invalid_argument("{} {}: a ds_config.json holds one JSON object", *flag, path);
  *path_out = path;
  return top;
}

// The user's gradient_accumulation_steps (DeepSpeed's get_gas_from_user_config).
int64_t user_gas(const Json& user, const AutotuningConfig& cfg,
                 const std::vector<std::string>& cmd) {
  if (user.contains("gradient_accumulation_steps")) {
    const Json& g = user["gradient_accumulation_steps"];
    if (g.is_number_integer() && g.get<int64_t>() > 0) return g.get<int64_t>();
    if (g.is_string() && g.get<std::string>() == "auto") {
      auto it = cfg.arg_mappings.find("gradient_accumulation_steps");
      if (it != cfg.arg_mappings.end()) {
        if (auto v = command_flag(cmd, it->second); v && std::atoll(v->c_str()) > 0) {
          return std::atoll(v->c_str());
        }
      }
    }
  }
  return 1;
}

}  // namespace

int autotune_main(const TuneRequest& req) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "zt tune: error: %s\n", s.message().c_str());
    return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
  };
  if (req.command.empty()) {
    return fail(
        invalid_argument("no training command: zt tune [FLAGS] -- zt train --config "
                         "ds_config.json ..."));
  }
  std::string config_path;
  auto user = user_config_read(req.command, &config_path);
  if (!user) return fail(user.status());
  auto cfg = autotuning_config_parse(user->value("autotuning", Json()));
  if (!cfg) return fail(cfg.status().with_context(config_path + ": "));
  for (const auto& w : cfg->warnings) say("warning: " + w);
  auto stages = tuning_stages_parse(*user);
  if (!stages) return fail(stages.status().with_context(config_path + ": "));
  if (user->contains("train_micro_batch_size_per_gpu") &&
      (*user)["train_micro_batch_size_per_gpu"].is_array()) {
    for (const Json& b : (*user)["train_micro_batch_size_per_gpu"]) {
      if (!b.is_number_integer() || b.get<int64_t>() < 1) {
        return fail(invalid_argument(
            "{}: train_micro_batch_size_per_gpu as a list holds the micro-batches to tune "
            "(positive integers), got {}",
            config_path, b.dump()));
      }
    }
  }

  // The ranks of a trial, as `zt launch` will decide them.
  std::vector<std::string> probe_args = req.launch_flags;
  probe_args.push_back(req.command[0]);
  auto lo = launcher::launch_options_parse(probe_args);
  if (!lo) return fail(lo.status());
  auto world_info = launcher::world_discover(*lo, launcher::machine_probe_local());
  if (!world_info) return fail(world_info.status());
  Session s{.req = req};
  s.cfg = *cfg;
  s.user_config = *user;
  s.world = launcher::world_size(*world_info);
  s.cpu = world_info->kind == launcher::SlotKind::kCpu ||
          command_flag(req.command, "--device").value_or("") == "cpu";
  s.checkpointing = std::find(req.command.begin(), req.command.end(), "--gradient-checkpointing") !=
                    req.command.end();
  s.next_port = req.master_port.value_or(29500) + 1;

  std::string stage_list;
  for (int st : *stages) stage_list += (stage_list.empty() ? "" : ",") + std::to_string(st);
  say(fmt::format(
      "{} rank(s) per trial ({}), stages {}, metric {}, tuner {}, {}; steps {}..{} "
      "of {} measured; results in {}",
      s.world, s.cpu ? "CPU" : "GPU", stage_list, tune_metric_name(cfg->metric),
      tuner_type_name(cfg->tuner_type), cfg->fast ? "fast" : "not fast (ZeRO knobs too)",
      cfg->start_profile_step, cfg->end_profile_step, cfg->end_profile_step, cfg->results_dir));
  if (cfg->tuner_type == TunerType::kModelBased) {
    say("tuner model_based: two random trials, then a ridge-regression cost model over stage, "
        "micro-batch and the ZeRO knobs picks each next trial (DeepSpeed's uses XGBoost)");
  }
  const Prune prune = prune_make(req.command, *user, s.world, s.cpu);
  say("memory: " + prune.about);

  SpaceInput in{
      .world = s.world, .user_gas = user_gas(*user, *cfg, req.command), .stages = *stages};
  if (user->contains("train_micro_batch_size_per_gpu") &&
      (*user)["train_micro_batch_size_per_gpu"].is_array()) {
    in.user_micro_batches = (*user)["train_micro_batch_size_per_gpu"].get<std::vector<int64_t>>();
  }
  TuningSpace space = fast_space(*cfg, in, prune.fits);
  if (prune.need) {
    // The numbers behind each stage left out entirely.
    for (int st : *stages) {
      const bool any = std::any_of(space.candidates.begin(), space.candidates.end(),
                                   [&](const Candidate& c) { return c.stage == st; });
      if (any || in.user_micro_batches) continue;
      const Candidate c{.stage = st, .micro_batch = cfg->min_train_micro_batch_size_per_gpu};
      for (auto& n : space.notes) {
        if (n.starts_with(fmt::format("stage {}: not measured", st))) {
          n += fmt::format(" (predicted {} per rank, {} available)", gib(prune.need(c)),
                           gib(prune.budget));
        }
      }
    }
  }
  for (const auto& n : space.notes) say(n);
  if (space.candidates.empty()) {
    return fail(
        invalid_argument("nothing to measure: no stage has a micro-batch that fits (see "
                         "the lines above); lower the sequence or raise the memory"));
  }

  std::error_code ec;
  if (cfg->overwrite) previous_results_remove(*cfg);
  fs::create_directories(cfg->exps_dir, ec);
  if (ec) return fail(io_error("autotuning.exps_dir {}: {}", cfg->exps_dir, ec.message()));
  fs::create_directories(cfg->results_dir, ec);
  if (ec) return fail(io_error("autotuning.results_dir {}: {}", cfg->results_dir, ec.message()));

  StopSignals stop_signals;
  const auto t0 = Clock::now();
  size_t total_hint = space.candidates.size();
  auto runner = [&](const Candidate& c) { return s.run(c); };
  auto observe_with_time = [&](int) {
    return [&, last = Clock::now()](const TrialRecord& t, bool best) mutable {
      s.trials.push_back(t);
      const double secs = std::chrono::duration<double>(Clock::now() - last).count();
      last = Clock::now();
      s.observe(t, best, total_hint, secs);
    };
  };
  // Phase 1: every stage x micro-batch that fits (DeepSpeed measures them all: no early stop).
  TunerOptions p1{
      .type = cfg->tuner_type == TunerType::kModelBased ? TunerType::kGridSearch : cfg->tuner_type,
      .metric = cfg->metric,
      .num_trials = cfg->tuner_num_trials,
      .early_stopping = 0,
      .seed = req.seed};
  TunerRun run1 = tuner_run(space.candidates, p1, runner, 1, observe_with_time(1));
  std::string stop = "phase 1: " + run1.stop;
  int pruned2 = 0;
  if (!cfg->fast && run1.best && run1.stop != "interrupted") {
    const Candidate& base = run1.trials[*run1.best].candidate;
    std::vector<Candidate> knobs;
    for (const Candidate& c : knob_space(base, *user, prune.fits, &pruned2)) {
      const std::string rc = s.resolved(c);
      if (std::find(s.measured_configs.begin(), s.measured_configs.end(), rc) ==
          s.measured_configs.end()) {
        knobs.push_back(c);
      }
    }
    const int left = cfg->tuner_num_trials - static_cast<int>(s.trials.size());
    say(fmt::format("phase 2: {} ZeRO knob setting(s) at {} (stage {}, micro-batch {}){}",
                    knobs.size(), base.name(), base.stage, base.micro_batch,
                    pruned2 > 0 ? fmt::format(", {} left out by the estimator", pruned2) : ""));
    if (pruned2 > 0) {
      space.notes.push_back(fmt::format(
          "phase 2: {} ZeRO knob setting(s) at {}: the estimator predicts they do not fit", pruned2,
          base.name()));
    }
    if (left > 0 && !knobs.empty()) {
      total_hint += knobs.size();
      TunerOptions p2{.type = cfg->tuner_type,
                      .metric = cfg->metric,
                      .num_trials = left,
                      .early_stopping = cfg->tuner_early_stopping,
                      .seed = req.seed + 1};
      TunerRun run2 = tuner_run(knobs, p2, runner, 2, observe_with_time(2));
      stop += "; phase 2: " + run2.stop;
    } else if (left <= 0) {
      stop += "; phase 2: skipped, tuner_num_trials reached";
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();

  std::optional<size_t> best;
  for (size_t i = 0; i < s.trials.size(); ++i) {
    const TrialResult& r = s.trials[i].result;
    if (r.ok() && (!best || metric_better(cfg->metric, r.metric, s.trials[*best].result.metric))) {
      best = i;
    }
  }
  const bool interrupted = stop_signal() != 0;
  const std::string header = fmt::format(
      "ZeroTrain autotuning of {}: {} rank(s) per trial ({}), metric {} ({}) over steps {}..{}, "
      "tuner {}, {}",
      config_path, s.world, s.cpu ? "CPU" : "GPU", tune_metric_name(cfg->metric),
      tune_metric_unit(cfg->metric), cfg->start_profile_step, cfg->end_profile_step,
      tuner_type_name(cfg->tuner_type), cfg->fast ? "fast" : "not fast");
  const fs::path results(cfg->results_dir);
  std::string footer =
      fmt::format("Tuning {} in {:.1f} s ({}). Total number of experiments: {}.",
                  interrupted ? "interrupted" : "completed", secs, stop, s.trials.size());
  Json summary = {{"config", config_path},
                  {"metric", tune_metric_name(cfg->metric)},
                  {"unit", tune_metric_unit(cfg->metric)},
                  {"world_size", s.world},
                  {"stop", stop},
                  {"seconds", secs},
                  {"trials", Json::array()},
                  {"not_measured", space.notes}};
  for (const auto& t : s.trials) summary["trials"].push_back(trial_record_json(t, s.world));
  std::vector<std::string> optimal_cmd;
  if (best) {
    const TrialRecord& b = s.trials[*best];
    summary["best"] = b.candidate.name();
    const Json optimal = trial_config(*user, b.candidate, s.world);
    const std::string opt_path = fs::absolute(results / "ds_config_optimal.json").string();
    if (Status st = file_write_atomic(opt_path, optimal.dump(2) + "\n", "optimal ds_config");
        !st.is_ok()) {
      return fail(st);
    }
    optimal_cmd = {req.zt_binary, "launch"};
    optimal_cmd.insert(optimal_cmd.end(), req.launch_flags.begin(), req.launch_flags.end());
    if (req.master_port) {
      optimal_cmd.insert(optimal_cmd.end(), {"--master_port", std::to_string(*req.master_port)});
    }
    optimal_cmd.push_back("--");
    const auto train = optimal_command(req.command, *cfg, opt_path, optimal);
    optimal_cmd.insert(optimal_cmd.end(), train.begin(), train.end());
    if (Status st = file_write_atomic((results / "cmd_optimal.txt").string(),
                                      shell_join(optimal_cmd) + "\n", "optimal command");
        !st.is_ok()) {
      return fail(st);
    }
    footer += fmt::format("\nBest: {} ({} {} {}): {}", b.candidate.name(),
                          tune_metric_name(cfg->metric), metric_text(cfg->metric, b.result.metric),
                          tune_metric_unit(cfg->metric), opt_path);
  } else {
    footer += "\nNo trial succeeded: no optimal configuration (see each trial's stdout.log).";
  }
  const std::string text = summary_text(s.trials, best, *cfg, s.world, header, space.notes, footer);
  if (Status st = file_write_atomic((results / "summary.txt").string(), text, "autotuning summary");
      !st.is_ok()) {
    return fail(st);
  }
  if (Status st = file_write_atomic((results / "summary.json").string(), summary.dump(2) + "\n",
                                    "autotuning summary");
      !st.is_ok()) {
    return fail(st);
  }
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (interrupted) return 128 + stop_signal();
  if (!best) {
    return fail(unavailable("no trial succeeded ({} tried); {} lists each failure", s.trials.size(),
                            (results / "summary.txt").string()));
  }
  say(fmt::format("wrote {}, {} and {}", (results / "summary.txt").string(),
                  (results / "ds_config_optimal.json").string(),
                  (results / "cmd_optimal.txt").string()));
  if (req.mode != TuneMode::kRun) return 0;

  say("training with the optimal configuration: " + shell_join(optimal_cmd));
  auto child = child_run(optimal_cmd, launcher::environ_copy(), "", 0);
  if (!child) return fail(child.status());
  return child->end == ChildEnd::kExited ? child->exit_code : 128 + stop_signal();
}

}  // namespace zt::tools
