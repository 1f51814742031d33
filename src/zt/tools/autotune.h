// Autotuning: DeepSpeed's autotuner (deepspeed/autotuning/, `deepspeed --autotuning tune|run`)
// for ZeroTrain, behind `zt tune` and `zt launch --autotuning tune|run` (docs/autotuning.md).
//
// A tuning session reads the ds_config's "autotuning" block (DeepSpeed's keys and defaults),
// builds candidates -- ZeRO stage x micro-batch (phase 1), then, when not `fast`, ZeRO knobs
// around the best of phase 1 (phase 2) -- drops those ZeroTrain's memory estimator says do not
// fit (tools/estimate.h), and measures the rest as short real runs of the user's own training
// command through `zt launch`, each with a generated ds_config. The best measured trial becomes
// results_dir/ds_config_optimal.json and results_dir/cmd_optimal.txt.
//
// The parts, in data-flow order:
//  - autotune.cc: the config block, the candidates, the tuners (gridsearch, random, a small
//    cost model for model_based). Pure: trials are run through a TrialRunner callback, so tests
//    drive the tuners with a fake runner.
//  - autotune_trial.cc: one trial as data: its ds_config, the rewritten command, the metric read
//    back from --metrics-out, the out-of-memory check of its output.
//  - autotune_results.cc: summary.txt and summary.json.
//  - autotune_process.{h,cc}: trials as `zt launch` child processes, with a timeout and signals.
//  - autotune_session.cc: the whole of `zt tune` (estimator prune, phases, results, `run`).
//
// Assumes: the training command takes `zt train`'s flags (--config/--deepspeed_config, --steps,
// --metrics-out writing JSON Lines with a "run" record and per-step tokens_per_s).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/core/status.h"

namespace zt::tools {

// ---- the ds_config "autotuning" block

enum class TuneMetric : unsigned char { kThroughput, kLatency, kFlops };
enum class TunerType : unsigned char { kGridSearch, kRandom, kModelBased };

const char* tune_metric_name(TuneMetric m);  // "throughput", "latency", "flops"
const char* tune_metric_unit(TuneMetric m);  // "samples/s", "ms", "FLOPS/GPU"
const char* tuner_type_name(TunerType t);    // "gridsearch", "random", "model_based"

// DeepSpeed's DeepSpeedAutotuningConfig (autotuning/config.py, constants.py), same defaults.
struct AutotuningConfig {
  bool enabled = false;  // not needed by zt tune (asking for tuning is enough), kept for parity
  TuneMetric metric = TuneMetric::kThroughput;
  bool fast = true;  // only stage x micro-batch; false: also the ZeRO knobs
  TunerType tuner_type = TunerType::kGridSearch;
  int tuner_num_trials = 50;     // at most this many trials in all
  int tuner_early_stopping = 5;  // phase 2 stops after this many trials without improvement
  int start_profile_step = 3;    // the metric averages steps start..end (1-based, inclusive)
  int end_profile_step = 5;      // each trial runs this many steps
  std::optional<int64_t> max_train_batch_size;
  int64_t min_train_micro_batch_size_per_gpu = 1;
  int64_t max_train_micro_batch_size_per_gpu = 1024;
  int num_tuning_micro_batch_sizes = 3;
  std::string results_dir = "autotuning_results";
  std::string exps_dir = "autotuning_exps";
  bool overwrite = true;
  std::map<std::string, std::string> arg_mappings;  // ds_config key -> training-command flag
  std::vector<std::string> warnings;                // keys accepted but not acted on, unknown keys
};

// The block's JSON (null or absent: every default). Errors name the key
// ("autotuning.tuner_type = \"grid\" is not valid; expected one of gridsearch|random|model_based").
Result<AutotuningConfig> autotuning_config_parse(const nlohmann::json& block);

// The stages to tune from the user's zero_optimization.stage: a number (that stage, as
// DeepSpeed), "all" or a list of numbers; absent: all four. Errors name the key.
Result<std::vector<int>> tuning_stages_parse(const nlohmann::json& user_config);

// ---- candidates

// Phase 2's knobs; unset = what the user's config says (or DeepSpeed's default).
struct ZeroKnobs {
  std::optional<int64_t> reduce_bucket_size;
  std::optional<int64_t> prefetch_bucket_size;  // stage3_prefetch_bucket_size (stage 3 gathers)
  std::optional<bool> overlap_comm;
  std::optional<bool> offload_optimizer;  // device cpu / none
  bool operator==(const ZeroKnobs&) const = default;
};

struct Candidate {
  int stage = 0;
  int64_t micro_batch = 1;  // train_micro_batch_size_per_gpu
  int64_t gas = 1;          // gradient_accumulation_steps
  ZeroKnobs knobs{};
  int64_t train_batch_size(int world) const { return micro_batch * gas * world; }
  // DeepSpeed's experiment names: "z2_gas1_tmbspg8", plus "_rbs5e7_pf5e7_oc1_off0" for knobs.
  std::string name() const;
  // "rbs=5e7 overlap=on offload=cpu", or "-" when no knob is set.
  std::string knobs_text() const;
  bool operator==(const Candidate&) const = default;
};

// Predicts whether a candidate fits in memory (the estimator); always true without one.
using FitFn = std::function<bool(const Candidate&)>;

// The micro-batches of one stage: the largest M and the next ones halving down from it,
// max(min_mb, M >> k) for k = 0..count-1, without repeats, ascending. Empty when M < min_mb.
std::vector<int64_t> micro_batch_ladder(int64_t min_mb, int64_t max_mb, int count);

// The largest micro-batch in [lo, hi] for which `fits` holds, assuming it holds for all smaller
// ones (doubling, then bisection); lo - 1 when not even lo fits.
int64_t micro_batch_max_fitting(int64_t lo, int64_t hi, const std::function<bool(int64_t)>& fits);

struct SpaceInput {
  int world = 1;         // data-parallel ranks of a trial
  int64_t user_gas = 1;  // the user's gradient_accumulation_steps (DeepSpeed: else 1)
  std::vector<int> stages{0, 1, 2, 3};
  // train_micro_batch_size_per_gpu given as a list: these, as given (DeepSpeed's override).
  std::optional<std::vector<int64_t>> user_micro_batches{};
};

struct TuningSpace {
  std::vector<Candidate> candidates;  // in grid order: stage, then micro-batch ascending
  std::vector<std::string> notes;     // one line per stage left out or cut, and why
};

// Phase 1: every tuned stage x its micro-batch ladder. Per stage, M = min(max micro-batch of the
// config, max_train_batch_size / world when given, the largest that `fits`); the gas of a
// micro-batch b is DeepSpeed's max_train_batch_size_per_gpu / b (at least 1), where
// max_train_batch_size_per_gpu = max_train_batch_size / world when given, else M x user_gas.
TuningSpace fast_space(const AutotuningConfig& cfg, const SpaceInput& in, const FitFn& fits);

// Phase 2: the ZeRO knob grid at the stage, micro-batch and gas of `best` (DeepSpeed's tuning
// spaces, restricted to what ZeroTrain acts on): reduce_bucket_size {5e7, 5e8, 1e9} (all
// stages), stage3_prefetch_bucket_size {5e6, 5e7, 5e8} (stage 3), overlap_comm {on, off}
// (stages 2-3), offload_optimizer {none, cpu} (stages 1-3). As in DeepSpeed, a knob the user's
// zero_optimization sets is kept as set, and one set to a list is tuned over that list.
// Candidates `fits` rejects are left out and counted in `pruned`.
std::vector<Candidate> knob_space(const Candidate& best, const nlohmann::json& user_config,
                                  const FitFn& fits, int* pruned);

// ---- trials and tuners

enum class TrialStatus : unsigned char {
  kOk,
  kOom,          // ran out of memory (the log says so)
  kFailed,       // exited non-zero for another reason, or wrote no step records
  kTimeout,      // stopped after the per-trial timeout
  kInvalid,      // its ds_config is rejected by the parser: not run
  kInterrupted,  // the tuner itself was interrupted (SIGINT/SIGTERM)
};
const char* trial_status_name(TrialStatus s);  // "ok", "oom", "failed", ...

struct TrialResult {
  TrialStatus status = TrialStatus::kFailed;
  double metric = 0;      // in the tuned metric's unit (valid when kOk)
  double throughput = 0;  // samples/s over steps start..end
  double latency_ms = 0;  // mean step time over steps start..end
  double flops_per_gpu = 0;
  std::string message{};  // one line: why it failed, or a note ("reused")
  std::string exp_dir{};  // exps_dir/<name>, empty when nothing was written
  bool ok() const { return status == TrialStatus::kOk; }
};

struct TrialRecord {
  Candidate candidate{};
  TrialResult result{};
  int phase = 1;
};

// True when metric value a is better than b (latency: lower; throughput, flops: higher).
bool metric_better(TuneMetric metric, double a, double b);

using TrialRunner = std::function<TrialResult(const Candidate&)>;
// Called after every trial, with whether it is the best so far.
using TrialObserver = std::function<void(const TrialRecord&, bool best_so_far)>;

struct TunerOptions {
  TunerType type = TunerType::kGridSearch;
  TuneMetric metric = TuneMetric::kThroughput;
  int num_trials = 50;     // at most this many trials
  int early_stopping = 0;  // stop after this many trials in a row that do not improve; 0: never
  uint64_t seed = 0x5eed;  // random order and model_based's first samples
};

struct TunerRun {
  std::vector<TrialRecord> trials;  // in the order run
  std::optional<size_t> best;       // index into trials of the best successful one
  std::string stop;                 // why it stopped: "all candidates tried", "early stopping ..."
};

// Runs `candidates` through `run` in the tuner's order: gridsearch as listed; random a seeded
// permutation; model_based two random trials, then always the untried candidate a ridge
// regression of the metric on the candidates' features predicts best. A failed trial is
// recorded and the search goes on; an interrupted one ends it.
TunerRun tuner_run(const std::vector<Candidate>& candidates, const TunerOptions& options,
                   const TrialRunner& run, int phase, const TrialObserver& observe = nullptr);

// ---- one trial (autotune_trial.cc)

// The user's ds_config (its JSON) made into a candidate's: zero_optimization.stage, the batch
// triad (train_batch_size = micro x gas x world), the knobs that are set; the "autotuning" block
// dropped.
nlohmann::json trial_config(const nlohmann::json& user_config, const Candidate& c, int world);

// A flag's value on a command line (`--flag value` or `--flag=value`; argv[0] is the program).
std::optional<std::string> command_flag(const std::vector<std::string>& cmd,
                                        const std::string& flag);
// Every occurrence of the flag replaced by `--flag value` (appended when absent).
std::vector<std::string> command_flag_set(std::vector<std::string> cmd, const std::string& flag,
                                          const std::string& value);
// Every occurrence removed; `takes_value` says whether its value follows it.
enum class FlagArity : unsigned char { kSwitch, kValue };
std::vector<std::string> command_flag_remove(std::vector<std::string> cmd, const std::string& flag,
                                             FlagArity arity);
// The config flag the command uses: "--config" or "--deepspeed_config"; nullopt when neither.
std::optional<std::string> command_config_flag(const std::vector<std::string>& cmd);

// The training command of a trial: --config replaced, --steps end_profile_step, --metrics-out
// `metrics_path`, --sample-tokens 0, checkpoint saving and loading flags removed, arg_mappings
// applied from `config`.
std::vector<std::string> trial_command(const std::vector<std::string>& user_cmd,
                                       const AutotuningConfig& cfg, const std::string& config_path,
                                       const std::string& metrics_path,
                                       const nlohmann::json& config);
// The command that trains with `config_path` (the user's own, --config replaced, arg_mappings
// applied from `config`).
std::vector<std::string> optimal_command(const std::vector<std::string>& user_cmd,
                                         const AutotuningConfig& cfg,
                                         const std::string& config_path,
                                         const nlohmann::json& config);

// The metric of a trial from its --metrics-out JSON Lines text: the step records with
// start_profile_step <= step <= end_profile_step; step time = train_batch_size x seq_len /
// tokens_per_s; latency = the mean step time; throughput = train_batch_size / latency;
// FLOPS per GPU = (6 P + 12 L C T) x tokens per step / latency / world (Megatron's count; x 4/3
// with activation checkpointing). Errors say what is missing.
Result<TrialResult> trial_metrics_read(const std::string& jsonl, const AutotuningConfig& cfg,
                                       bool activation_checkpointing);

// Whether a failed trial's output says it ran out of memory (CUDA, cuBLAS, the caching
// allocator, std::bad_alloc, ENOMEM); the matching line, trimmed, or empty.
std::string oom_line(const std::string& log_text);

// Shell-quoted command line ("a 'b c'").
std::string shell_join(const std::vector<std::string>& argv);

// ---- results files (autotune_results.cc)

// A metric's value as the summary prints it.
std::string metric_text(TuneMetric metric, double value);
// One trial as summary.json holds it (name, phase, stage, batch sizes, knobs, status, message,
// and for a successful one the metric, throughput, latency and FLOPS).
nlohmann::json trial_record_json(const TrialRecord& trial, int world);
// summary.txt: `header`, a table of every trial in the order run (the best one's note says
// "best"), the candidates not measured and why (`notes`), then `footer`.
std::string summary_text(const std::vector<TrialRecord>& trials, std::optional<size_t> best,
                         const AutotuningConfig& cfg, int world, const std::string& header,
                         const std::vector<std::string>& notes, const std::string& footer);
// Removes what an earlier session wrote (the four results files, and the exps_dir folders that
// hold a ds_config.json and a cmd.txt), nothing else: the folders may hold other files.
void previous_results_remove(const AutotuningConfig& cfg);

// ---- the session (autotune_session.cc)

enum class TuneMode : unsigned char { kTune, kRun };

struct TuneRequest {
  TuneMode mode = TuneMode::kTune;
  std::string zt_binary;                  // the zt executable that runs `zt launch`
  std::vector<std::string> launch_flags;  // zt launch flags for every trial (no --master_port)
  std::optional<int> master_port;         // the user's; trials use free ports from it upwards
  std::vector<std::string> command;       // PROGRAM ARGS...: the training command
  double trial_timeout_s = 600;
  uint64_t seed = 0x5eed;
};

// The whole of `zt tune`: checks, prune, phases, results, and for kRun the training. Progress
// and results on stderr/stdout; returns the exit code (0: tuned, and for kRun trained).
int autotune_main(const TuneRequest& request);

}  // namespace zt::tools
