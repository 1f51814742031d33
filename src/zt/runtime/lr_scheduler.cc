// DeepSpeed's LR schedules (runtime/lr_schedules.py at 38327e0), one param group. The formulas
// are transcribed from get_lr()/_get_gamma()/get_lr_ratio()/_get_scale_factor(); comments note
// where DeepSpeed's behaviour is surprising, because that is what users' configs rely on.
#include "zt/runtime/lr_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "zt/core/assert.h"
#include "zt/runtime/config_keys.h"

namespace zt {
namespace {

using config_detail::Json;

enum class WarmupType : unsigned char { kLog, kLinear };

WarmupType warmup_type_of(const Json& p) {
  return p["warmup_type"].get<std::string>() == "linear" ? WarmupType::kLinear : WarmupType::kLog;
}

// gamma of WarmupLR._get_gamma for t < N (N >= 2); DeepSpeed multiplies by a precomputed
// inverse_log_warm_up = 1 / ln(N), and so does this, to round the same way.
double warmup_gamma(WarmupType type, int64_t t, int64_t n) {
  if (type == WarmupType::kLog) {
    const double inverse_log_warm_up = 1.0 / std::log(static_cast<double>(n));
    return inverse_log_warm_up * std::log(static_cast<double>(t + 1));
  }
  return static_cast<double>(t) / static_cast<double>(n);
}

class WarmupLr : public LrScheduler {
 public:
  WarmupLr(std::string type, const Json& p, double optimizer_lr)
      : LrScheduler(std::move(type), p["last_batch_iteration"].get<int64_t>(), optimizer_lr),
        min_lr_(p["warmup_min_lr"].get<double>()),
        max_lr_(p["warmup_max_lr"].get<double>()),
        n_(std::max<int64_t>(2, p["warmup_num_steps"].get<int64_t>())),
        warmup_type_(warmup_type_of(p)),
        total_(p.contains("total_num_steps") ? p["total_num_steps"].get<int64_t>() : -1) {}

 protected:
  double lr_at(int64_t t) const override {
    if (t < 0) return min_lr_;  // "Attempting to get learning rate ... before it has started"
    return min_lr_ + (max_lr_ - min_lr_) * gamma(t);
  }

 private:
  double gamma(int64_t t) const {
    if (t < n_) return warmup_gamma(warmup_type_, t, n_);
    if (total_ < 0) return 1.0;  // WarmupLR: hold warmup_max_lr
    // WarmupDecayLR: linear decay to 0 at total_num_steps.
    return std::max(
        0.0, static_cast<double>(total_ - t) / std::max(1.0, static_cast<double>(total_ - n_)));
  }

  double min_lr_, max_lr_;
  int64_t n_;
  WarmupType warmup_type_;
  int64_t total_;  // -1 for WarmupLR
};

class WarmupCosineLr : public LrScheduler {
 public:
  WarmupCosineLr(const Json& p, double optimizer_lr)
      : LrScheduler("WarmupCosineLR", p["last_batch_iteration"].get<int64_t>(), optimizer_lr),
        org_lr_(optimizer_lr),
        total_(p["total_num_steps"].get<int64_t>()),
        warmup_min_ratio_(p["warmup_min_ratio"].get<double>()),
        n_(std::max<int64_t>(2, p["warmup_num_steps"].get<int64_t>())),
        cos_min_ratio_(p["cos_min_ratio"].get<double>()),
        warmup_type_(warmup_type_of(p)) {}

 protected:
  double lr_at(int64_t t) const override {
    if (t < 0) return 0.0;  // get_lr() returns [0.0] before the first step
    return org_lr_ * ratio(t);
  }

 private:
  double ratio(int64_t t) const {
    if (t < n_) {
      double r = warmup_gamma(warmup_type_, t, n_);
      return warmup_min_ratio_ + r * (1.0 - warmup_min_ratio_);
    }
    const double s = static_cast<double>(t - n_ + 1);
    const double real_total = static_cast<double>(total_ - n_);
    const double r = (1.0 + std::cos(std::numbers::pi * s / real_total)) / 2.0;
    return std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * r);
  }

  double org_lr_;
  int64_t total_;
  double warmup_min_ratio_;
  int64_t n_;
  double cos_min_ratio_;
  WarmupType warmup_type_;
};

class OneCycle : public LrScheduler {
 public:
  OneCycle(const Json& p, double optimizer_lr)
      : LrScheduler("OneCycle", p["last_batch_iteration"].get<int64_t>(), optimizer_lr),
        min_lr_(p["cycle_min_lr"].get<double>()),
        max_lr_(p["cycle_max_lr"].get<double>()),
        decay_lr_rate_(p["decay_lr_rate"].get<double>()),
        decay_step_size_(p["decay_step_size"].get<double>()),
        cycle_momentum_(p["cycle_momentum"].get<bool>()),
        min_mom_(p["cycle_min_mom"].get<double>()),
        max_mom_(p["cycle_max_mom"].get<double>()),
        decay_mom_rate_(p["decay_mom_rate"].get<double>()) {
    const double first = p["cycle_first_step_size"].get<double>();
    const double second =
        p["cycle_second_step_size"].is_null() ? first : p["cycle_second_step_size"].get<double>();
    total_size_ = first + second;
    step_ratio_ = first / total_size_;
    // _initialize_cycle / _initialize_lr / _initialize_momentum: math.isclose(x, 0) is x == 0.
    skip_lr_decay_ = decay_step_size_ == 0 || decay_lr_rate_ == 0;
    skip_mom_decay_ = decay_step_size_ == 0 || decay_mom_rate_ == 0;
  }

 protected:
  double lr_at(int64_t t) const override {
    if (static_cast<double>(t) < total_size_) return min_lr_ + (max_lr_ - min_lr_) * scale(t);
    if (skip_lr_decay_) return min_lr_;
    const double interval = static_cast<double>(t) - total_size_ + 1.0;
    return min_lr_ / (1.0 + decay_lr_rate_ * interval / decay_step_size_);
  }
  std::optional<double> momentum_at(int64_t t) const override {
    if (!cycle_momentum_) return std::nullopt;
    // The constructor sets betas to (cycle_min_mom, 0.99), although the cycle formula at t = -1
    // would give cycle_max_mom.
    if (t == -1) return min_mom_;
    if (static_cast<double>(t) < total_size_) return max_mom_ - (max_mom_ - min_mom_) * scale(t);
    if (skip_mom_decay_) return max_mom_;
    const double interval = static_cast<double>(t) - total_size_ + 1.0;
    return max_mom_ * (1.0 + decay_mom_rate_ * interval / decay_step_size_);
  }
  std::optional<double> beta2_at(int64_t /*t*/) const override {
    if (!cycle_momentum_) return std::nullopt;
    return 0.99;  // min_moms/max_moms are (mom, 0.99): beta2 is overwritten with 0.99
  }

 private:
  double scale(int64_t t) const {  // _get_scale_factor
    const double bi = static_cast<double>(t + 1);
    const double cycle = std::floor(1.0 + bi / total_size_);
    const double x = 1.0 + bi / total_size_ - cycle;
    return x <= step_ratio_ ? x / step_ratio_ : (x - 1.0) / (step_ratio_ - 1.0);
  }

  double min_lr_, max_lr_, decay_lr_rate_, decay_step_size_;
  bool cycle_momentum_;
  double min_mom_, max_mom_, decay_mom_rate_;
  double total_size_ = 0, step_ratio_ = 0;
  bool skip_lr_decay_ = true, skip_mom_decay_ = true;
};

class LrRangeTest : public LrScheduler {
 public:
  LrRangeTest(const Json& p, double optimizer_lr)
      : LrScheduler("LRRangeTest", p["last_batch_iteration"].get<int64_t>(), optimizer_lr),
        min_lr_(p["lr_range_test_min_lr"].get<double>()),
        step_size_(p["lr_range_test_step_size"].get<double>()),
        step_rate_(p["lr_range_test_step_rate"].get<double>()),
        staircase_(p["lr_range_test_staircase"].get<bool>()) {}

 protected:
  double lr_at(int64_t t) const override {
    double q = static_cast<double>(t + 1) / step_size_;
    if (staircase_) q = std::floor(q);
    return min_lr_ * (1.0 + step_rate_ * q);
  }

 private:
  double min_lr_, step_size_, step_rate_;
  bool staircase_;
};

}  // namespace

LrScheduler::LrScheduler(std::string type, int64_t t, double optimizer_lr)
    : type_(std::move(type)), t_(t), untouched_(t != -1), optimizer_lr_(optimizer_lr) {}

void LrScheduler::step() {
  ++t_;
  untouched_ = false;
}

double LrScheduler::lr() const {
  return untouched_ ? optimizer_lr_ : lr_at(t_);
}

std::optional<double> LrScheduler::momentum() const {
  return untouched_ ? std::nullopt : momentum_at(t_);
}

std::optional<double> LrScheduler::beta2() const {
  return untouched_ ? std::nullopt : beta2_at(t_);
}

void LrScheduler::set_last_batch_iteration(int64_t t) {
  t_ = t;
  untouched_ = false;
}

nlohmann::json LrScheduler::state_dict() const {
  return {{"last_batch_iteration", t_}};
}

std::optional<double> LrScheduler::momentum_at(int64_t /*t*/) const {
  return std::nullopt;
}
std::optional<double> LrScheduler::beta2_at(int64_t /*t*/) const {
  return std::nullopt;
}

Result<nlohmann::json> lr_scheduler_params_resolve(const SchedulerConfig& cfg) {
  const config_detail::SchedulerSpec* spec = nullptr;
  for (const auto& s : config_detail::kSchedulers) {
    if (s.type == cfg.type) spec = &s;
  }
  if (spec == nullptr) {
    return invalid_argument(
        "DeepSpeed does not recognize LR scheduler {}; ZeroTrain supports "
        "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest",
        cfg.type);
  }
  const std::string path = fmt::format("scheduler.params ({})", cfg.type);
  const config_detail::BlockSpec block{path, config_detail::BlockKind::kStrict, spec->params};
  std::vector<std::string> warnings;  // kStrict blocks produce errors, not warnings
  ZT_ASSIGN_OR_RETURN(config_detail::ResolvedBlock rb,
                      config_detail::block_resolve(cfg.params, block, warnings));
  const Json& p = rb.values;
  if (cfg.type == "WarmupCosineLR") {
    const int64_t n = std::max<int64_t>(2, p["warmup_num_steps"].get<int64_t>());
    if (p["total_num_steps"].get<int64_t>() == n) {
      // DeepSpeed divides by total_num_steps - warmup_num_steps at the end of the warmup.
      return invalid_argument(
          "{}: total_num_steps ({}) equals warmup_num_steps, which leaves no "
          "steps for the cosine decay (DeepSpeed fails with "
          "ZeroDivisionError there); make total_num_steps larger",
          path, n);
    }
  }
  return p;
}

Result<std::unique_ptr<LrScheduler>> lr_scheduler_create(const SchedulerConfig& cfg,
                                                         double optimizer_lr) {
  ZT_ASSIGN_OR_RETURN(Json p, lr_scheduler_params_resolve(cfg));
  std::unique_ptr<LrScheduler> s;
  if (cfg.type == "WarmupLR" || cfg.type == "WarmupDecayLR") {
    s = std::make_unique<WarmupLr>(cfg.type, p, optimizer_lr);
  } else if (cfg.type == "WarmupCosineLR") {
    s = std::make_unique<WarmupCosineLr>(p, optimizer_lr);
  } else if (cfg.type == "OneCycle") {
    s = std::make_unique<OneCycle>(p, optimizer_lr);
  } else {
    ZT_ASSERT(cfg.type == "LRRangeTest", "scheduler table and constructors disagree: {}", cfg.type);
    s = std::make_unique<LrRangeTest>(p, optimizer_lr);
  }
  return s;
}

}  // namespace zt
