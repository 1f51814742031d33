// The autotuner's pure parts (tools/autotune.h) against independent oracles: DeepSpeed's
// defaults as written in deepspeed/autotuning/constants.py, candidate sets worked out by hand
// from DeepSpeed's batch rules, brute-force searches, the real ds_config parser accepting the
// generated configs, arithmetic done here on made-up metrics files, and tuners driven by a fake
// trial runner whose metric is a known function of the candidate.
#include "zt/tools/autotune.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "zt/launcher/launch_options.h"
#include "zt/runtime/config.h"

namespace zt::tools {
namespace {

using Json = nlohmann::json;

// ---- the config block

TEST(AutotuneConfig, DefaultsAreDeepSpeeds) {
  auto c = autotuning_config_parse(Json());
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  // deepspeed/autotuning/constants.py: AUTOTUNING_*_DEFAULT.
  EXPECT_FALSE(c->enabled);
  EXPECT_TRUE(c->fast);
  EXPECT_EQ(c->metric, TuneMetric::kThroughput);
  EXPECT_EQ(c->tuner_type, TunerType::kGridSearch);
  EXPECT_EQ(c->tuner_num_trials, 50);
  EXPECT_EQ(c->tuner_early_stopping, 5);
  EXPECT_EQ(c->start_profile_step, 3);
  EXPECT_EQ(c->end_profile_step, 5);
  EXPECT_FALSE(c->max_train_batch_size.has_value());
  EXPECT_EQ(c->min_train_micro_batch_size_per_gpu, 1);
  EXPECT_EQ(c->max_train_micro_batch_size_per_gpu, 1024);
  EXPECT_EQ(c->num_tuning_micro_batch_sizes, 3);
  EXPECT_EQ(c->results_dir, "autotuning_results");
  EXPECT_EQ(c->exps_dir, "autotuning_exps");
  EXPECT_TRUE(c->overwrite);
  EXPECT_TRUE(c->arg_mappings.empty());
  EXPECT_TRUE(c->warnings.empty());
}

TEST(AutotuneConfig, ValuesAreRead) {
  auto c = autotuning_config_parse(Json::parse(R"({
    "enabled": true, "metric": "FLOPS", "fast": false, "tuner_type": "model_based",
    "tuner_num_trials": 7, "tuner_early_stopping": 2, "start_profile_step": 2,
    "end_profile_step": 4, "max_train_batch_size": 64, "min_train_micro_batch_size_per_gpu": 2,
    "max_train_micro_batch_size_per_gpu": 16, "num_tuning_micro_batch_sizes": 4,
    "results_dir": "r", "exps_dir": "e", "overwrite": false,
    "arg_mappings": {"train_micro_batch_size_per_gpu": "--per_device_train_batch_size"}})"));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->metric, TuneMetric::kFlops);  // DeepSpeed's users write "FLOPS" too
  EXPECT_FALSE(c->fast);
  EXPECT_EQ(c->tuner_type, TunerType::kModelBased);
  EXPECT_EQ(c->tuner_num_trials, 7);
  EXPECT_EQ(c->tuner_early_stopping, 2);
  EXPECT_EQ(c->start_profile_step, 2);
  EXPECT_EQ(c->end_profile_step, 4);
  EXPECT_EQ(c->max_train_batch_size, 64);
  EXPECT_EQ(c->min_train_micro_batch_size_per_gpu, 2);
  EXPECT_EQ(c->max_train_micro_batch_size_per_gpu, 16);
  EXPECT_EQ(c->num_tuning_micro_batch_sizes, 4);
  EXPECT_EQ(c->results_dir, "r");
  EXPECT_EQ(c->exps_dir, "e");
  EXPECT_FALSE(c->overwrite);
  EXPECT_EQ(c->arg_mappings.at("train_micro_batch_size_per_gpu"), "--per_device_train_batch_size");
}

std::string error_of(const char* block) {
  auto c = autotuning_config_parse(Json::parse(block));
  return c.is_ok() ? "" : c.status().message();
}

TEST(AutotuneConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of(R"({"tuner_type": "grid"})").find("autotuning.tuner_type"), std::string::npos);
  EXPECT_NE(error_of(R"({"metric": "speed"})").find("autotuning.metric"), std::string::npos);
  EXPECT_NE(error_of(R"({"tuner_num_trials": 0})").find("autotuning.tuner_num_trials"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"fast": "maybe"})").find("autotuning.fast"), std::string::npos);
  EXPECT_NE(error_of(R"({"end_profile_step": "auto"})").find("autotuning.end_profile_step"),
            std::string::npos);
  const std::string order = error_of(R"({"start_profile_step": 6, "end_profile_step": 5})");
  EXPECT_NE(order.find("autotuning.start_profile_step"), std::string::npos) << order;
  EXPECT_NE(order.find("autotuning.end_profile_step"), std::string::npos) << order;
  EXPECT_NE(error_of(R"({"min_train_micro_batch_size_per_gpu": 8,
                         "max_train_micro_batch_size_per_gpu": 4})")
                .find("autotuning.min_train_micro_batch_size_per_gpu"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"mp_size": 2})").find("autotuning.mp_size"), std::string::npos);
  EXPECT_NE(error_of(R"({"arg_mappings": {"gradient_accumulation_steps": 3}})")
                .find("autotuning.arg_mappings.gradient_accumulation_steps"),
            std::string::npos);
  // Unknown keys are ignored as DeepSpeed ignores them, with a warning that suggests the key.
  auto c = autotuning_config_parse(Json::parse(R"({"tuner_num_trial": 3})"));
  ASSERT_TRUE(c.is_ok());
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_NE(c->warnings[0].find("tuner_num_trials"), std::string::npos) << c->warnings[0];
}

TEST(AutotuneConfig, StagesToTune) {
  auto stages = [](const char* user) { return tuning_stages_parse(Json::parse(user)); };
  EXPECT_EQ(*stages("{}"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*stages(R"({"zero_optimization": {"stage": "all"}})"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*stages(R"({"zero_optimization": {"stage": 2}})"), (std::vector<int>{2}));
  EXPECT_EQ(*stages(R"({"zero_optimization": {"stage": [3, 1, 1]}})"), (std::vector<int>{1, 3}));
  auto bad = stages(R"({"zero_optimization": {"stage": 5}})");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("zero_optimization.stage"), std::string::npos);
}

// ---- candidates

TEST(AutotuneSpace, MicroBatchLadderHalvesDownFromTheLargest) {
  EXPECT_EQ(micro_batch_ladder(1, 100, 3), (std::vector<int64_t>{25, 50, 100}));
  EXPECT_EQ(micro_batch_ladder(1, 3, 3), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(micro_batch_ladder(300, 1024, 3), (std::vector<int64_t>{300, 512, 1024}));
  EXPECT_EQ(micro_batch_ladder(1, 1, 3), (std::vector<int64_t>{1}));
  EXPECT_EQ(micro_batch_ladder(1, 64, 1), (std::vector<int64_t>{64}));
  EXPECT_TRUE(micro_batch_ladder(5, 4, 3).empty());
}

TEST(AutotuneSpace, LargestFittingMicroBatchMatchesABruteForceSearch) {
  for (int64_t lo : {1, 3}) {
    for (int64_t hi : {1, 7, 64, 150}) {
      for (int64_t limit = 0; limit <= 160; ++limit) {
        int calls = 0;
        auto fits = [&](int64_t b) {
          ++calls;
          return b <= limit;
        };
        int64_t want = lo - 1;
        for (int64_t b = lo; b <= hi; ++b) {
          if (b <= limit) want = b;
        }
        EXPECT_EQ(micro_batch_max_fitting(lo, hi, fits), want)
            << "lo " << lo << " hi " << hi << " limit " << limit;
        EXPECT_LE(calls, 20);  // logarithmic, not a scan
      }
    }
  }
}

// A fake estimator: stage s fits micro-batches up to 8 << s.
bool fake_fits(const Candidate& c) {
  return c.micro_batch <= (int64_t{8} << c.stage);
}

TEST(AutotuneSpace, StageTimesMicroBatchWithDeepSpeedsGradientAccumulation) {
  AutotuningConfig cfg;
  cfg.max_train_micro_batch_size_per_gpu = 48;
  SpaceInput in{.world = 2, .user_gas = 1, .stages = {0, 1, 2, 3}};
  TuningSpace s = fast_space(cfg, in, fake_fits);
  // Stage 0: M = 8, ladder 2 4 8, gas = M / b. Stage 1: 16. Stage 2: 32. Stage 3: the config's
  // cap 48 (64 would fit): ladder 12 24 48.
  std::vector<Candidate> want = {{0, 2, 4},  {0, 4, 2},  {0, 8, 1},  {1, 4, 4},
                                 {1, 8, 2},  {1, 16, 1}, {2, 8, 4},  {2, 16, 2},
                                 {2, 32, 1}, {3, 12, 4}, {3, 24, 2}, {3, 48, 1}};
  EXPECT_EQ(s.candidates, want);
  // Stages 0-2 are cut by the estimator, which the notes say.
  EXPECT_EQ(s.notes.size(), 3u);
  for (const Candidate& c : s.candidates) EXPECT_TRUE(fake_fits(c)) << c.name();
}

TEST(AutotuneSpace, MaxTrainBatchSizeFixesTheGlobalBatch) {
  AutotuningConfig cfg;
  cfg.max_train_batch_size = 64;  // 32 per rank on 2 ranks
  SpaceInput in{.world = 2, .user_gas = 3, .stages = {0, 3}};
  TuningSpace s = fast_space(cfg, in, fake_fits);
  // Stage 0: M = 8; gas = 32 / b. Stage 3: M = min(1024, 64 / 2, 64) = 32.
  std::vector<Candidate> want = {{0, 2, 16}, {0, 4, 8},  {0, 8, 4},
                                 {3, 8, 4},  {3, 16, 2}, {3, 32, 1}};
  EXPECT_EQ(s.candidates, want);
  for (const Candidate& c : s.candidates) EXPECT_EQ(c.train_batch_size(2), 64) << c.name();
}

TEST(AutotuneSpace, AStageWhereNothingFitsIsLeftOutWithANote) {
  AutotuningConfig cfg;
  cfg.min_train_micro_batch_size_per_gpu = 12;
  SpaceInput in{.world = 1, .stages = {0, 1}};
  TuningSpace s = fast_space(cfg, in, fake_fits);  // stage 0 fits up to 8 only
  ASSERT_EQ(s.candidates.size(), 2u);              // stage 1: M = 16, ladder max(12, 8) 16
  EXPECT_EQ(s.candidates[0], (Candidate{1, 12, 1}));
  EXPECT_EQ(s.candidates[1], (Candidate{1, 16, 1}));
  ASSERT_FALSE(s.notes.empty());
  EXPECT_NE(s.notes[0].find("stage 0"), std::string::npos) << s.notes[0];
}

TEST(AutotuneSpace, AUserListOfMicroBatchesIsTakenAsGiven) {
  AutotuningConfig cfg;
  SpaceInput in{.world = 1, .user_gas = 2, .stages = {1}, .user_micro_batches = {{6, 2, 6}}};
  TuningSpace s = fast_space(cfg, in, fake_fits);
  EXPECT_EQ(s.candidates, (std::vector<Candidate>{{1, 2, 6}, {1, 6, 2}}));
}

TEST(AutotuneSpace, KnobGridFollowsDeepSpeedsTuningSpaces) {
  const Candidate base{.stage = 3, .micro_batch = 4, .gas = 2};
  int pruned = -1;
  auto grid = knob_space(base, Json::object(), nullptr, &pruned);
  EXPECT_EQ(pruned, 0);
  EXPECT_EQ(grid.size(), 3u * 3u * 2u * 2u);  // rbs x prefetch x overlap x offload
  std::set<std::string> names;
  for (const Candidate& c : grid) {
    EXPECT_EQ(c.stage, 3);
    EXPECT_EQ(c.micro_batch, 4);
    EXPECT_EQ(c.gas, 2);
    names.insert(c.name());
  }
  EXPECT_EQ(names.size(), grid.size());
  EXPECT_TRUE(names.count("z3_gas2_tmbspg4_rbs5e7_pf5e6_oc1_off0")) << *names.begin();
  EXPECT_EQ(knob_space({.stage = 0}, Json::object(), nullptr, nullptr).size(), 3u);
  EXPECT_EQ(knob_space({.stage = 1}, Json::object(), nullptr, nullptr).size(), 6u);
  EXPECT_EQ(knob_space({.stage = 2}, Json::object(), nullptr, nullptr).size(), 12u);

  // A knob the user set is kept; one set to a list is tuned over the list (DeepSpeed).
  const Json user = Json::parse(
      R"({"zero_optimization": {"overlap_comm": false, "reduce_bucket_size": [1e7, 2e7]}})");
  auto fixed = knob_space({.stage = 2}, user, nullptr, nullptr);
  ASSERT_EQ(fixed.size(), 2u * 2u);  // rbs list x offload
  for (const Candidate& c : fixed) {
    EXPECT_FALSE(c.knobs.overlap_comm.has_value());
    EXPECT_TRUE(*c.knobs.reduce_bucket_size == 10000000 || *c.knobs.reduce_bucket_size == 20000000);
  }
  // The estimator's verdict removes candidates and counts them.
  auto no_offload = [](const Candidate& c) { return !c.knobs.offload_optimizer.value_or(false); };
  auto kept = knob_space({.stage = 2}, Json::object(), no_offload, &pruned);
  EXPECT_EQ(kept.size(), 6u);
  EXPECT_EQ(pruned, 6);
}

TEST(AutotuneTrial, ConfigHasTheCandidateAndAConsistentBatchTriad) {
  const Json user = Json::parse(R"({
    "train_batch_size": 999, "train_micro_batch_size_per_gpu": [1, 2],
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "zero_optimization": {"stage": "all", "prefetch_bucket_size": 1000,
                          "reduce_bucket_size": [30000, 40000]},
    "autotuning": {"enabled": true}})");
  Candidate c{.stage = 3, .micro_batch = 4, .gas = 2};
  c.knobs.prefetch_bucket_size = 5000000;
  c.knobs.offload_optimizer = true;
  const Json t = trial_config(user, c, 2);
  EXPECT_FALSE(t.contains("autotuning"));
  EXPECT_EQ(t["zero_optimization"]["stage"], 3);
  EXPECT_EQ(t["train_batch_size"], 16);
  EXPECT_EQ(t["zero_optimization"]["reduce_bucket_size"], 30000);  // a list's first value
  EXPECT_FALSE(t["zero_optimization"].contains("prefetch_bucket_size"));
  // The real parser accepts it, at the trial's world size, with the candidate's values.
  auto parsed = config_parse(t.dump(), "trial", 2);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed->zero.stage, 3);
  EXPECT_EQ(parsed->train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(parsed->gradient_accumulation_steps, 2);
  EXPECT_EQ(parsed->zero.stage3_prefetch_bucket_size, 5000000);
  EXPECT_EQ(parsed->zero.reduce_bucket_size, 30000);
  EXPECT_TRUE(parsed->zero.offload_optimizer.enabled());
}

TEST(AutotuneTrial, CommandIsRewrittenForAShortMeasuredRun) {
  AutotuningConfig cfg;
  cfg.end_profile_step = 6;
  cfg.arg_mappings = {{"train_micro_batch_size_per_gpu", "--per_device_train_batch_size"},
                      {"gradient_accumulation_steps", "--gas"}};
  const std::vector<std::string> user = {"zt",
                                         "train",
                                         "--config=user.json",
                                         "--steps",
                                         "100",
                                         "--save",
                                         "ckpt",
                                         "--save-async",
                                         "--model",
                                         "gpt2-tiny",
                                         "--metrics-out",
                                         "m.jsonl",
                                         "--per_device_train_batch_size",
                                         "3",
                                         "--load=ckpt"};
  const Json config = {{"train_micro_batch_size_per_gpu", 8}, {"gradient_accumulation_steps", 2}};
  const auto cmd = trial_command(user, cfg, "/e/ds_config.json", "/e/metrics.jsonl", config);
  const std::vector<std::string> want = {"zt",
                                         "train",
                                         "--config",
                                         "/e/ds_config.json",
                                         "--steps",
                                         "6",
                                         "--model",
                                         "gpt2-tiny",
                                         "--metrics-out",
                                         "/e/metrics.jsonl",
                                         "--per_device_train_batch_size",
                                         "8",
                                         "--sample-tokens",
                                         "0",
                                         "--gas",
                                         "2"};
  EXPECT_EQ(cmd, want);
  // The optimal command is the user's own, with the config (and the mapped flags) replaced.
  const auto opt = optimal_command(user, cfg, "/r/ds_config_optimal.json", config);
  EXPECT_EQ(command_flag(opt, "--config"), "/r/ds_config_optimal.json");
  EXPECT_EQ(command_flag(opt, "--save"), "ckpt");
  EXPECT_EQ(command_flag(opt, "--steps"), "100");
  EXPECT_EQ(command_flag(opt, "--per_device_train_batch_size"), "8");
  EXPECT_EQ(command_config_flag({"p", "--deepspeed_config", "x.json"}), "--deepspeed_config");
  EXPECT_FALSE(command_config_flag({"p", "--model", "x"}).has_value());
  EXPECT_EQ(shell_join({"zt", "a b", "it's", "--x=1,2"}), "zt 'a b' 'it'\\''s' --x=1,2");
}

TEST(AutotuneTrial, MetricAveragesTheProfiledSteps) {
  AutotuningConfig cfg;  // steps 3..5
  const std::string jsonl =
      R"({"type":"run","train_batch_size":16,"seq_len":32,"parameters":1000,"n_layer":2,"n_embd":8,"world_size":2})"
      "\n"
      R"({"step":1,"tokens_per_s":100,"loss":5})"
      "\n"
      R"({"step":2,"tokens_per_s":200})"
      "\n"
      R"({"step":3,"tokens_per_s":512})"
      "\n"
      R"({"step":4,"tokens_per_s":256})"
      "\n"
      R"({"step":4,"eval_loss":1.0})"
      "\n"
      R"({"step":5,"tokens_per_s":1024})"
      "\n";
  auto r = trial_metrics_read(jsonl, cfg, false);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  // 512 tokens per step: 1 s, 2 s, 0.5 s.
  const double mean = (1.0 + 2.0 + 0.5) / 3.0;
  EXPECT_NEAR(r->latency_ms, mean * 1000, 1e-9);
  EXPECT_NEAR(r->throughput, 16 / mean, 1e-9);
  EXPECT_NEAR(r->flops_per_gpu, (6.0 * 1000 + 12.0 * 2 * 8 * 32) * 512 / mean / 2, 1e-6);
  EXPECT_DOUBLE_EQ(r->metric, r->throughput);
  cfg.metric = TuneMetric::kLatency;
  EXPECT_DOUBLE_EQ(trial_metrics_read(jsonl, cfg, false)->metric, mean * 1000);
  cfg.start_profile_step = 7;
  cfg.end_profile_step = 9;
  auto none = trial_metrics_read(jsonl, cfg, false);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("start_profile_step"), std::string::npos);
}

TEST(AutotuneTrial, OutOfMemoryIsRecognised) {
  EXPECT_FALSE(oom_line("step 1\nzt: error: out of GPU memory on cuda:0 allocating 2.0 MiB "
                        "(...); lower the micro-batch size")
                   .empty());
  EXPECT_FALSE(oom_line("RuntimeError: CUDA out of memory. Tried to allocate 2 GiB").empty());
  EXPECT_FALSE(oom_line("terminate called after throwing an instance of 'std::bad_alloc'").empty());
  EXPECT_FALSE(oom_line("CUBLAS_STATUS_ALLOC_FAILED").empty());
  EXPECT_EQ(oom_line("zt: error: Check batch related parameters.\n[rank 1] exited with code 1"),
            "");
}

// ---- tuners, with a fake runner

std::vector<Candidate> line_of(int n) {
  std::vector<Candidate> out;
  for (int i = 0; i < n; ++i) out.push_back({.stage = i % 4, .micro_batch = i + 1});
  return out;
}

TrialResult ok_with(double metric) {
  TrialResult r;
  r.status = TrialStatus::kOk;
  r.metric = metric;
  return r;
}

TEST(AutotuneTuner, GridsearchVisitsEveryCandidateInOrder) {
  const auto cands = line_of(7);
  const std::vector<double> metric = {3, 1, 4, 1, 5, 9, 2};
  std::vector<Candidate> seen;
  auto run = [&](const Candidate& c) {
    seen.push_back(c);
    return ok_with(metric[static_cast<size_t>(c.micro_batch - 1)]);
  };
  TunerRun r = tuner_run(cands, {.num_trials = 50, .early_stopping = 0}, run, 1);
  EXPECT_EQ(seen, cands);
  ASSERT_EQ(r.trials.size(), 7u);
  ASSERT_TRUE(r.best.has_value());
  EXPECT_EQ(r.trials[*r.best].candidate.micro_batch, 6);  // metric 9
  EXPECT_EQ(r.stop, "all candidates tried");
}

TEST(AutotuneTuner, EarlyStoppingAfterNTrialsWithoutImprovement) {
  const auto cands = line_of(7);
  const std::vector<double> metric = {1, 5, 4, 3, 2, 1, 9};
  auto run = [&](const Candidate& c) {
    return ok_with(metric[static_cast<size_t>(c.micro_batch - 1)]);
  };
  TunerRun r = tuner_run(cands, {.num_trials = 50, .early_stopping = 3}, run, 2);
  // 1 (best), 5 (best), then 4, 3, 2 do not improve: stop; 1 and 9 never run.
  ASSERT_EQ(r.trials.size(), 5u);
  EXPECT_EQ(r.trials[*r.best].candidate.micro_batch, 2);
  EXPECT_NE(r.stop.find("early stopping"), std::string::npos) << r.stop;
  EXPECT_EQ(r.trials.back().phase, 2);
  // Latency: lower is better, so the first trial (1) stays best and 5, 4, 3 end the search.
  TunerRun l = tuner_run(cands, {.metric = TuneMetric::kLatency, .early_stopping = 3}, run, 2);
  EXPECT_EQ(l.trials.size(), 4u);
  EXPECT_EQ(*l.best, 0u);
}

TEST(AutotuneTuner, AFailingTrialIsRecordedAndSkipped) {
  const auto cands = line_of(5);
  auto run = [&](const Candidate& c) {
    if (c.micro_batch == 3) {
      TrialResult r;
      r.status = TrialStatus::kOom;
      r.metric = 1e9;  // must not count
      r.message = "out of GPU memory";
      return r;
    }
    return ok_with(static_cast<double>(c.micro_batch));
  };
  std::vector<bool> best_flags;
  TunerRun r = tuner_run(cands, {.early_stopping = 0}, run, 1,
                         [&](const TrialRecord&, bool best) { best_flags.push_back(best); });
  ASSERT_EQ(r.trials.size(), 5u);
  EXPECT_EQ(r.trials[2].result.status, TrialStatus::kOom);
  EXPECT_EQ(r.trials[*r.best].candidate.micro_batch, 5);
  EXPECT_EQ(best_flags, (std::vector<bool>{true, true, false, true, true}));
  // Every trial failing: no best, and early stopping still ends the search.
  auto fail_all = [](const Candidate&) { return TrialResult{}; };
  TunerRun f = tuner_run(cands, {.early_stopping = 2}, fail_all, 1);
  EXPECT_EQ(f.trials.size(), 2u);
  EXPECT_FALSE(f.best.has_value());
}

TEST(AutotuneTuner, NumTrialsAndInterruptionStopTheSearch) {
  const auto cands = line_of(10);
  auto run = [](const Candidate& c) { return ok_with(static_cast<double>(c.micro_batch)); };
  EXPECT_EQ(tuner_run(cands, {.num_trials = 3, .early_stopping = 0}, run, 1).trials.size(), 3u);
  auto interrupt = [](const Candidate& c) {
    if (c.micro_batch == 2) {
      TrialResult r;
      r.status = TrialStatus::kInterrupted;
      return r;
    }
    return ok_with(1);
  };
  TunerRun r = tuner_run(cands, {.early_stopping = 0}, interrupt, 1);
  EXPECT_EQ(r.trials.size(), 2u);
  EXPECT_EQ(r.stop, "interrupted");
}

TEST(AutotuneTuner, RandomVisitsEachCandidateOnceInASeededOrder) {
  const auto cands = line_of(12);
  auto order_of = [&](uint64_t seed) {
    std::vector<int64_t> seen;
    auto run = [&](const Candidate& c) {
      seen.push_back(c.micro_batch);
      return ok_with(1);
    };
    tuner_run(cands, {.type = TunerType::kRandom, .early_stopping = 0, .seed = seed}, run, 1);
    return seen;
  };
  const auto a = order_of(1), b = order_of(1), c = order_of(2);
  EXPECT_EQ(a, b);
  std::vector<int64_t> sorted = a, grid;
  std::sort(sorted.begin(), sorted.end());
  for (const Candidate& x : cands) grid.push_back(x.micro_batch);
  EXPECT_EQ(sorted, grid);
  EXPECT_TRUE(a != grid || c != grid);  // some seed does not follow the grid
}

TEST(AutotuneTuner, ModelBasedFindsALinearOptimumInFewTrials) {
  // Throughput falls with the stage and rises with log2 of the micro-batch: the best is stage 0
  // at micro-batch 64, listed last so that a grid search would need every trial.
  std::vector<Candidate> cands;
  for (int stage = 3; stage >= 0; --stage) {
    for (int64_t mb : {1, 2, 4, 8, 16, 32, 64})
      cands.push_back({.stage = stage, .micro_batch = mb});
  }
  auto value = [](const Candidate& c) {
    return 100.0 + 10.0 * std::log2(static_cast<double>(c.micro_batch)) - 25.0 * c.stage;
  };
  auto run = [&](const Candidate& c) { return ok_with(value(c)); };
  TunerRun r = tuner_run(
      cands, {.type = TunerType::kModelBased, .num_trials = 6, .early_stopping = 0, .seed = 7}, run,
      2);
  ASSERT_TRUE(r.best.has_value());
  EXPECT_EQ(r.trials[*r.best].candidate, (Candidate{.stage = 0, .micro_batch = 64}));
  TunerRun g = tuner_run(cands, {.num_trials = 6, .early_stopping = 0}, run, 2);
  EXPECT_NE(g.trials[*g.best].candidate, (Candidate{.stage = 0, .micro_batch = 64}));
}

TEST(AutotuneResults, SummaryListsEveryTrialAndMarksTheBest) {
  AutotuningConfig cfg;
  std::vector<TrialRecord> trials = {
      {.candidate = {.stage = 0, .micro_batch = 2, .gas = 4}, .result = ok_with(10.5)},
      {.candidate = {.stage = 2, .micro_batch = 8, .gas = 1},
       .result = {.status = TrialStatus::kOom, .message = "out of GPU memory"}},
      {.candidate = {.stage = 2, .micro_batch = 4, .gas = 2}, .result = ok_with(12.25)}};
  const std::string text =
      summary_text(trials, 2, cfg, 2, "HEADER", {"stage 3: not measured"}, "FOOTER");
  EXPECT_EQ(text.rfind("HEADER", 0), 0u);
  EXPECT_NE(text.find("FOOTER"), std::string::npos);
  EXPECT_NE(text.find("stage 3: not measured"), std::string::npos);
  for (const char* row : {"| z0_gas4_tmbspg2 ", "| z2_gas1_tmbspg8 ", "| z2_gas2_tmbspg4 "}) {
    EXPECT_NE(text.find(row), std::string::npos) << row << "\n" << text;
  }
  const size_t oom = text.find("| z2_gas1_tmbspg8 ");
  EXPECT_NE(text.find("oom", oom), std::string::npos);
  EXPECT_NE(text.find("out of GPU memory", oom), std::string::npos);
  const size_t best = text.find("| z2_gas2_tmbspg4 ");
  EXPECT_NE(text.find("12.25", best), std::string::npos);
  EXPECT_NE(text.find("best", best), std::string::npos);
  const Json j = trial_record_json(trials[2], 2);
  EXPECT_EQ(j["train_batch_size"], 16);
  EXPECT_EQ(j["status"], "ok");
  EXPECT_DOUBLE_EQ(j["metric"].get<double>(), 12.25);
  EXPECT_FALSE(trial_record_json(trials[1], 2).contains("metric"));
}

TEST(AutotuneResults, OverwriteRemovesOnlyWhatTheAutotunerWrote) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("zt_autotune_test_" + std::to_string(getpid()));
  fs::remove_all(root);
  AutotuningConfig cfg;
  cfg.results_dir = (root / "res").string();
  cfg.exps_dir = (root / "exps").string();
  fs::create_directories(root / "res");
  fs::create_directories(root / "exps" / "z0_gas1_tmbspg1");
  fs::create_directories(root / "exps" / "mine");
  auto touch = [](const fs::path& p) { std::ofstream(p) << "x"; };
  touch(root / "res" / "summary.txt");
  touch(root / "res" / "ds_config_optimal.json");
  touch(root / "res" / "notes.txt");
  touch(root / "exps" / "z0_gas1_tmbspg1" / "ds_config.json");
  touch(root / "exps" / "z0_gas1_tmbspg1" / "cmd.txt");
  touch(root / "exps" / "mine" / "ds_config.json");
  previous_results_remove(cfg);
  EXPECT_FALSE(fs::exists(root / "res" / "summary.txt"));
  EXPECT_FALSE(fs::exists(root / "res" / "ds_config_optimal.json"));
  EXPECT_TRUE(fs::exists(root / "res" / "notes.txt"));
  EXPECT_FALSE(fs::exists(root / "exps" / "z0_gas1_tmbspg1"));
  EXPECT_TRUE(fs::exists(root / "exps" / "mine" / "ds_config.json"));
  fs::remove_all(root);
}

TEST(AutotuneLaunch, AutotuningFlagIsParsedByTheLauncher) {
  auto o =
      launcher::launch_options_parse({"--autotuning", "run", "--num_procs", "2", "zt", "train"});
  ASSERT_TRUE(o.is_ok()) << o.status().message();
  EXPECT_EQ(o->autotuning, "run");
  EXPECT_EQ(o->program, "zt");
  EXPECT_EQ(launcher::launch_options_parse({"--autotuning=tune", "p"})->autotuning, "tune");
  auto bad = launcher::launch_options_parse({"--autotuning", "fast", "p"});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--autotuning"), std::string::npos);
}

}  // namespace
}  // namespace zt::tools
