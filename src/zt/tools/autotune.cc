// The autotuner's pure parts (autotune.h): the ds_config "autotuning" block, the candidates of
// both phases, and the tuners that order and stop the trials. Nothing here runs a process.
#include "zt/tools/autotune.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "zt/runtime/config_schema.h"

namespace zt::tools {
namespace {

using Json = nlohmann::json;
using config_detail::FieldSpec;
using K = config_detail::FieldKind;

// DeepSpeed's autotuning/constants.py, key by key (the block is a get_scalar_param dict there:
// unknown keys are ignored, so here they are warnings). Read once, below.
constexpr FieldSpec kAutotuningFields[] = {
    {"enabled", "", K::kBool, "false"},
    {"fast", "", K::kBool, "true"},
    {"results_dir", "", K::kString, "\"autotuning_results\""},
    {"exps_dir", "", K::kString, "\"autotuning_exps\""},
    {"overwrite", "", K::kBool, "true"},
    {"start_profile_step", "", K::kInt, "3", config_detail::kPositive},
    {"end_profile_step", "", K::kInt, "5", config_detail::kPositive},
    {"metric", "", K::kString, "\"throughput\"", config_detail::kFlagNone,
     "throughput|latency|flops"},
    {"tuner_type", "", K::kString, "\"gridsearch\"", config_detail::kFlagNone,
     "gridsearch|random|model_based"},
    {"tuner_early_stopping", "", K::kInt, "5", config_detail::kNonNegative},
    {"tuner_num_trials", "", K::kInt, "50", config_detail::kPositive},
    {"arg_mappings", "", K::kObject, "null", config_detail::kNullable},
    {"max_train_batch_size", "", K::kInt, "null",
     config_detail::kNullable | config_detail::kPositive},
    {"min_train_batch_size", "", K::kInt, "1",
     config_detail::kPositive | config_detail::kNotActedOn},
    {"max_train_micro_batch_size_per_gpu", "", K::kInt, "1024", config_detail::kPositive},
    {"min_train_micro_batch_size_per_gpu", "", K::kInt, "1", config_detail::kPositive},
    {"num_tuning_micro_batch_sizes", "", K::kInt, "3", config_detail::kPositive},
    {"mp_size", "", K::kInt, "1", config_detail::kPositive},
    // ZeroTrain reads each trial's metric from --metrics-out and sizes the model with its
    // estimator, so DeepSpeed's profile-run files are not needed.
    {"metric_path", "", K::kString, "null", config_detail::kNullable | config_detail::kNotActedOn},
    {"model_info_path", "", K::kString, "null",
     config_detail::kNullable | config_detail::kNotActedOn},
    {"model_info", "", K::kObject, "null", config_detail::kNullable | config_detail::kNotActedOn},
};
constexpr config_detail::BlockSpec kAutotuningBlock{"autotuning", config_detail::BlockKind::kPlain,
                                                    kAutotuningFields};

}  // namespace

const char* tune_metric_name(TuneMetric m) {
  switch (m) {
    case TuneMetric::kThroughput:
      return "throughput";
    case TuneMetric::kLatency:
      return "latency";
    case TuneMetric::kFlops:
      return "flops";
  }
  return "?";
}

const char* tune_metric_unit(TuneMetric m) {
  switch (m) {
    case TuneMetric::kThroughput:
      return "samples/s";
    case TuneMetric::kLatency:
      return "ms";
    case TuneMetric::kFlops:
      return "FLOPS/GPU";
  }
  return "?";
}

const char* tuner_type_name(TunerType t) {
  switch (t) {
    case TunerType::kGridSearch:
      return "gridsearch";
    case TunerType::kRandom:
      return "random";
    case TunerType::kModelBased:
      return "model_based";
  }
  return "?";
}

const char* trial_status_name(TrialStatus s) {
  switch (s) {
    case TrialStatus::kOk:
      return "ok";
    case TrialStatus::kOom:
      return "oom";
    case TrialStatus::kFailed:
      return "failed";
    case TrialStatus::kTimeout:
      return "timeout";
    case TrialStatus::kInvalid:
      return "invalid";
    case TrialStatus::kInterrupted:
      return "interrupted";
  }
  return "?";
}

Result<AutotuningConfig> autotuning_config_parse(const Json& block) {
  Json given = block;
  // DeepSpeed's users write "FLOPS" too (constants.py); the engine compares lower-case.
  if (given.is_object() && given.contains("metric") && given["metric"].is_string()) {
    std::string m = given["metric"].get<std::string>();
    std::transform(m.begin(), m.end(), m.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    given["metric"] = m;
  }
  AutotuningConfig c;
  ZT_ASSIGN_OR_RETURN(config_detail::ResolvedBlock r,
                      config_detail::block_resolve(given, kAutotuningBlock, c.warnings));
  const Json& v = r.values;
  c.enabled = v["enabled"].get<bool>();
  c.fast = v["fast"].get<bool>();
  c.results_dir = v["results_dir"].get<std::string>();
  c.exps_dir = v["exps_dir"].get<std::string>();
  c.overwrite = v["overwrite"].get<bool>();
  c.start_profile_step = v["start_profile_step"].get<int>();
  c.end_profile_step = v["end_profile_step"].get<int>();
  const std::string metric = v["metric"].get<std::string>();
  c.metric = metric == "latency" ? TuneMetric::kLatency
             : metric == "flops" ? TuneMetric::kFlops
                                 : TuneMetric::kThroughput;
  const std::string tuner = v["tuner_type"].get<std::string>();
  c.tuner_type = tuner == "random"        ? TunerType::kRandom
                 : tuner == "model_based" ? TunerType::kModelBased
                                          : TunerType::kGridSearch;
  c.tuner_early_stopping = v["tuner_early_stopping"].get<int>();
  c.tuner_num_trials = v["tuner_num_trials"].get<int>();
  if (!v["max_train_batch_size"].is_null()) {
    c.max_train_batch_size = v["max_train_batch_size"].get<int64_t>();
  }
  c.min_train_micro_batch_size_per_gpu = v["min_train_micro_batch_size_per_gpu"].get<int64_t>();
  c.max_train_micro_batch_size_per_gpu = v["max_train_micro_batch_size_per_gpu"].get<int64_t>();
  c.num_tuning_micro_batch_sizes = v["num_tuning_micro_batch_sizes"].get<int>();
  if (c.results_dir.empty()) return invalid_argument("autotuning.results_dir must not be empty");
  if (c.exps_dir.empty()) return invalid_argument("autotuning.exps_dir must not be empty");
  if (c.start_profile_step > c.end_profile_step) {
    return invalid_argument(
        "autotuning.start_profile_step ({}) is after autotuning.end_profile_step ({}): the "
        "metric averages the steps from start to end",
        c.start_profile_step, c.end_profile_step);
  }
  if (c.min_train_micro_batch_size_per_gpu > c.max_train_micro_batch_size_per_gpu) {
    return invalid_argument(
        "autotuning.min_train_micro_batch_size_per_gpu ({}) is larger than "
        "autotuning.max_train_micro_batch_size_per_gpu ({})",
        c.min_train_micro_batch_size_per_gpu, c.max_train_micro_batch_size_per_gpu);
  }
  if (v["mp_size"].get<int>() != 1) {
    return invalid_argument(
        "autotuning.mp_size = {}: ZeroTrain has no model parallelism; remove the key or set 1",
        v["mp_size"].get<int>());
  }
  if (!v["arg_mappings"].is_null()) {
    for (const auto& [key, flag] : v["arg_mappings"].items()) {
      if (!flag.is_string() || flag.get<std::string>().empty()) {
        return invalid_argument(
            "autotuning.arg_mappings.{} must be the training command's flag as a string "
            "(\"--per_device_train_batch_size\"), got {}",
            key, flag.dump());
      }
      c.arg_mappings[key] = flag.get<std::string>();
    }
  }
  return c;
}

Result<std::vector<int>> tuning_stages_parse(const Json& user_config) {
  const Json* stage = nullptr;
  if (user_config.contains("zero_optimization") && user_config["zero_optimization"].is_object() &&
      user_config["zero_optimization"].contains("stage")) {
    stage = &user_config["zero_optimization"]["stage"];
  }
  if (stage == nullptr || (stage->is_string() && stage->get<std::string>() == "all")) {
    return std::vector<int>{0, 1, 2, 3};
  }
  auto one = [](const Json& s) -> Result<int> {
    if (s.is_number()) {
      const double d = s.get<double>();
      if (d == std::floor(d) && d >= 0 && d <= 3) return static_cast<int>(d);
    }
    return invalid_argument(
        "zero_optimization.stage must be 0, 1, 2, 3, \"all\" or a list of stages to tune, got {}",
        s.dump());
  };
  std::vector<int> out;
  if (stage->is_array()) {
    for (const Json& s : *stage) {
      ZT_ASSIGN_OR_RETURN(int v, one(s));
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    if (out.empty())
      return invalid_argument("zero_optimization.stage: the list of stages is empty");
    std::sort(out.begin(), out.end());
    return out;
  }
  ZT_ASSIGN_OR_RETURN(int v, one(*stage));
  return std::vector<int>{v};
}

namespace {

// 5e7, 500000000 -> "5e8", 1000 -> "1000": DeepSpeed's short form of bucket sizes in names.
std::string size_short(int64_t v) {
  int exp = 0;
  int64_t m = v;
  while (m >= 10 && m % 10 == 0) {
    m /= 10;
    ++exp;
  }
  return exp >= 3 ? fmt::format("{}e{}", m, exp) : fmt::format("{}", v);
}

}  // namespace

std::string Candidate::name() const {
  std::string n = fmt::format("z{}_gas{}_tmbspg{}", stage, gas, micro_batch);
  if (knobs.reduce_bucket_size) n += "_rbs" + size_short(*knobs.reduce_bucket_size);
  if (knobs.prefetch_bucket_size) n += "_pf" + size_short(*knobs.prefetch_bucket_size);
  if (knobs.overlap_comm) n += fmt::format("_oc{}", *knobs.overlap_comm ? 1 : 0);
  if (knobs.offload_optimizer) n += fmt::format("_off{}", *knobs.offload_optimizer ? 1 : 0);
  return n;
}

std::string Candidate::knobs_text() const {
  std::vector<std::string> parts;
  if (knobs.reduce_bucket_size) parts.push_back("rbs=" + size_short(*knobs.reduce_bucket_size));
  if (knobs.prefetch_bucket_size) parts.push_back("pf=" + size_short(*knobs.prefetch_bucket_size));
  if (knobs.overlap_comm) parts.push_back(*knobs.overlap_comm ? "overlap=on" : "overlap=off");
  if (knobs.offload_optimizer) {
    parts.push_back(*knobs.offload_optimizer ? "offload=cpu" : "offload=none");
  }
  if (parts.empty()) return "-";
  std::string s = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) s += " " + parts[i];
  return s;
}

std::vector<int64_t> micro_batch_ladder(int64_t min_mb, int64_t max_mb, int count) {
  std::vector<int64_t> out;
  if (max_mb < min_mb || max_mb < 1 || count < 1) return out;
  for (int k = 0; k < count && k < 62; ++k) {
    const int64_t b = std::max(min_mb, max_mb >> k);
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
    if (b == min_mb) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t micro_batch_max_fitting(int64_t lo, int64_t hi, const std::function<bool(int64_t)>& fits) {
  if (hi < lo || !fits(lo)) return lo - 1;
  // Doubling finds a bracket [good, bad) quickly; bisection closes it.
  int64_t good = lo, bad = hi + 1;
  for (int64_t b = lo * 2; b <= hi; b *= 2) {
    if (!fits(b)) {
      bad = b;
      break;
    }
    good = b;
  }
  if (bad == hi + 1 && good != hi) {
    if (fits(hi)) return hi;
    bad = hi;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good;
}

TuningSpace fast_space(const AutotuningConfig& cfg, const SpaceInput& in, const FitFn& fits) {
  TuningSpace space;
  const int64_t min_mb = cfg.min_train_micro_batch_size_per_gpu;
  for (int stage : in.stages) {
    auto stage_fits = [&](int64_t b) {
      return !fits || fits(Candidate{.stage = stage, .micro_batch = b});
    };
    std::vector<int64_t> mbs;
    int64_t max_tbs_per_gpu = 0;
    if (in.user_micro_batches) {
      mbs = *in.user_micro_batches;
      std::sort(mbs.begin(), mbs.end());
      mbs.erase(std::unique(mbs.begin(), mbs.end()), mbs.end());
      max_tbs_per_gpu = mbs.back() * in.user_gas;
    } else {
      int64_t cap = cfg.max_train_micro_batch_size_per_gpu;
      if (cfg.max_train_batch_size) cap = std::min(cap, *cfg.max_train_batch_size / in.world);
      if (cap < min_mb) {
        space.notes.push_back(fmt::format(
            "stage {}: no micro-batch: max_train_batch_size {} over {} rank(s) is below "
            "min_train_micro_batch_size_per_gpu {}",
            stage, cfg.max_train_batch_size.value_or(0), in.world, min_mb));
        continue;
      }
      const int64_t m = micro_batch_max_fitting(min_mb, cap, stage_fits);
      if (m < min_mb) {
        space.notes.push_back(fmt::format(
            "stage {}: not measured: the estimator predicts that micro-batch {} does not fit",
            stage, min_mb));
        continue;
      }
      if (m < cap) {
        space.notes.push_back(fmt::format(
            "stage {}: micro-batches above {} left out: the estimator predicts they do not fit",
            stage, m));
      }
      mbs = micro_batch_ladder(min_mb, m, cfg.num_tuning_micro_batch_sizes);
      max_tbs_per_gpu =
          cfg.max_train_batch_size ? *cfg.max_train_batch_size / in.world : m * in.user_gas;
    }
    for (int64_t b : mbs) {
      space.candidates.push_back(Candidate{
          .stage = stage, .micro_batch = b, .gas = std::max<int64_t>(1, max_tbs_per_gpu / b)});
    }
  }
  return space;
}

namespace {

// The values phase 2 tries for one knob: the user's list, nothing (the user's fixed value), or
// DeepSpeed's defaults.
template <typename T>
std::vector<std::optional<T>> knob_values(const Json& zero, std::initializer_list<const char*> keys,
                                          const std::vector<T>& defaults) {
  for (const char* k : keys) {
    if (!zero.contains(k)) continue;
    const Json& v = zero[k];
    if (!v.is_array()) return {std::nullopt};
    std::vector<std::optional<T>> out;
    for (const Json& e : v) {
      if constexpr (std::is_same_v<T, bool>) {
        if (e.is_boolean()) out.emplace_back(e.get<bool>());
      } else {
        if (e.is_number()) out.emplace_back(static_cast<T>(e.get<double>()));
      }
    }
    if (out.empty()) return {std::nullopt};
    return out;
  }
  return {defaults.begin(), defaults.end()};
}

}  // namespace

std::vector<Candidate> knob_space(const Candidate& best, const Json& user_config, const FitFn& fits,
                                  int* pruned) {
  const Json zero = user_config.is_object() && user_config.contains("zero_optimization") &&
                            user_config["zero_optimization"].is_object()
                        ? user_config["zero_optimization"]
                        : Json::object();
  const auto rbs =
      knob_values<int64_t>(zero, {"reduce_bucket_size"}, {50000000, 500000000, 1000000000});
  std::vector<std::optional<int64_t>> pf = {std::nullopt};
  std::vector<std::optional<bool>> oc = {std::nullopt}, off = {std::nullopt};
  if (best.stage == 3) {
    pf = knob_values<int64_t>(zero, {"stage3_prefetch_bucket_size", "prefetch_bucket_size"},
                              {5000000, 50000000, 500000000});
  }
  if (best.stage >= 2) oc = knob_values<bool>(zero, {"overlap_comm"}, {true, false});
  if (best.stage >= 1 && !zero.contains("offload_optimizer")) off = {false, true};
  std::vector<Candidate> out;
  int left_out = 0;
  for (const auto& r : rbs) {
    for (const auto& p : pf) {
      for (const auto& o : oc) {
        for (const auto& f : off) {
          Candidate c = best;
          c.knobs = {.reduce_bucket_size = r,
                     .prefetch_bucket_size = p,
                     .overlap_comm = o,
                     .offload_optimizer = f};
          if (fits && !fits(c)) {
            ++left_out;
            continue;
          }
          out.push_back(c);
        }
      }
    }
  }
  if (pruned != nullptr) *pruned = left_out;
  return out;
}

bool metric_better(TuneMetric metric, double a, double b) {
  return metric == TuneMetric::kLatency ? a < b : a > b;
}

namespace {

// model_based's features of a candidate: what plausibly moves the speed, roughly linearly.
std::vector<double> candidate_features(const Candidate& c) {
  const double lmb = std::log2(static_cast<double>(c.micro_batch));
  // The stage as a number, not one-hot: its cost grows with it (more communication), and a
  // number lets the model say something about stages not yet tried.
  return {1.0,
          static_cast<double>(c.stage),
          lmb,
          lmb * lmb,
          std::log2(static_cast<double>(c.gas)),
          c.knobs.reduce_bucket_size ? std::log10(static_cast<double>(*c.knobs.reduce_bucket_size))
                                     : 0.0,
          c.knobs.prefetch_bucket_size
              ? std::log10(static_cast<double>(*c.knobs.prefetch_bucket_size))
              : 0.0,
          c.knobs.overlap_comm.value_or(false) ? 1.0 : 0.0,
          c.knobs.offload_optimizer.value_or(false) ? 1.0 : 0.0};
}

// Ridge regression: w = (X'X + lambda I)^-1 X'y, by Gaussian elimination with partial pivoting
// (a dozen unknowns at most).
std::vector<double> ridge_fit(const std::vector<std::vector<double>>& x,
                              const std::vector<double>& y, double lambda) {
  const size_t n = x.front().size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (size_t r = 0; r < x.size(); ++r) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) a[i][j] += x[r][i] * x[r][j];
      a[i][n] += x[r][i] * y[r];
    }
  }
  for (size_t i = 0; i < n; ++i) a[i][i] += lambda;
  for (size_t col = 0; col < n; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < n; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[piv][col])) piv = r;
    }
    std::swap(a[col], a[piv]);
    if (std::abs(a[col][col]) < 1e-300) continue;
    for (size_t r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (size_t k = col; k <= n; ++k) a[r][k] -= f * a[col][k];
    }
  }
  std::vector<double> w(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (std::abs(a[i][i]) > 1e-300) w[i] = a[i][n] / a[i][i];
  }
  return w;
}

constexpr int kModelInitTrials = 2;  // DeepSpeed's ModelBasedTuner INIT_NUM

// model_based's next pick among `untried` (indices into candidates), from the trials so far.
size_t model_pick(const std::vector<Candidate>& candidates, const std::vector<size_t>& untried,
                  const std::vector<TrialRecord>& trials, TuneMetric metric) {
  // Failed trials teach the model too: they count as the worst value seen (a configuration
  // near one that ran out of memory is a poor bet).
  std::optional<double> worst;
  for (const TrialRecord& t : trials) {
    if (t.result.ok() && (!worst || metric_better(metric, *worst, t.result.metric))) {
      worst = t.result.metric;
    }
  }
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (const TrialRecord& t : trials) {
    if (!t.result.ok() && !worst) continue;
    double v = t.result.ok() ? t.result.metric : *worst;
    if (!t.result.ok()) v = metric == TuneMetric::kLatency ? v * 2 : v / 2;
    x.push_back(candidate_features(t.candidate));
    y.push_back(v);
  }
  if (x.empty()) return untried.front();
  const std::vector<double> w = ridge_fit(x, y, 1e-3);
  size_t pick = untried.front();
  double best = 0;
  bool have = false;
  for (size_t idx : untried) {
    const std::vector<double> f = candidate_features(candidates[idx]);
    const double pred = std::inner_product(f.begin(), f.end(), w.begin(), 0.0);
    if (!have || metric_better(metric, pred, best)) {
      best = pred;
      pick = idx;
      have = true;
    }
  }
  return pick;
}

}  // namespace

TunerRun tuner_run(const std::vector<Candidate>& candidates, const TunerOptions& options,
                   const TrialRunner& run, int phase, const TrialObserver& observe) {
  TunerRun out;
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(options.seed);
  if (options.type != TunerType::kGridSearch) std::shuffle(order.begin(), order.end(), rng);
  std::vector<size_t> untried = order;
  int since_best = 0;
  out.stop = "all candidates tried";
  while (!untried.empty()) {
    if (static_cast<int>(out.trials.size()) >= options.num_trials) {
      out.stop = fmt::format("tuner_num_trials ({}) reached", options.num_trials);
      break;
    }
    size_t pos = 0;
    if (options.type == TunerType::kModelBased &&
        static_cast<int>(out.trials.size()) >= kModelInitTrials) {
      const size_t pick = model_pick(candidates, untried, out.trials, options.metric);
      pos = static_cast<size_t>(std::find(untried.begin(), untried.end(), pick) - untried.begin());
    }
    const size_t idx = untried[pos];
    untried.erase(untried.begin() + static_cast<std::ptrdiff_t>(pos));
    TrialRecord rec{.candidate = candidates[idx], .result = run(candidates[idx]), .phase = phase};
    const bool improved =
        rec.result.ok() && (!out.best || metric_better(options.metric, rec.result.metric,
                                                       out.trials[*out.best].result.metric));
    out.trials.push_back(rec);
    if (improved) {
      out.best = out.trials.size() - 1;
      since_best = 0;
    } else {
      ++since_best;
    }
    if (observe) observe(out.trials.back(), improved);
    if (rec.result.status == TrialStatus::kInterrupted) {
      out.stop = "interrupted";
      break;
    }
    if (options.early_stopping > 0 && since_best >= options.early_stopping && !untried.empty()) {
      out.stop =
          fmt::format("early stopping: {} trial(s) in a row without improvement", since_best);
      break;
    }
  }
  return out;
}

}  // namespace zt::tools
