// Learning-rate schedules with DeepSpeed's semantics (deepspeed/runtime/lr_schedules.py):
// WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest.
//
// t = last_batch_iteration starts at -1 (or the "last_batch_iteration" param). DeepSpeed's
// constructors do not step: at t = -1 the optimizer holds the schedule's starting value (WarmupLR
// and WarmupDecayLR: warmup_min_lr; WarmupCosineLR: 0.0; OneCycle: cycle_min_lr with betas
// (cycle_min_mom, 0.99); LRRangeTest: lr_range_test_min_lr). The engine calls step() after each
// applied optimizer step (never after a skipped fp16 step), so the first optimizer step runs at
// the t = -1 value and the second at the t = 0 value.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "zt/core/status.h"
#include "zt/runtime/config.h"

namespace zt {

class LrScheduler {
 public:
  virtual ~LrScheduler() = default;
  void step();  // t += 1 (called only on applied optimizer steps)
  double lr() const;
  // OneCycle with cycle_momentum: beta1 at the current t (an optimizer without betas, such as
  // SGD, ignores it: DeepSpeed disables cycle_momentum there with a warning). Else nullopt.
  std::optional<double> momentum() const;
  std::optional<double> beta2() const;  // OneCycle with cycle_momentum forces 0.99
  int64_t last_batch_iteration() const { return t_; }
  void set_last_batch_iteration(int64_t t);  // load_state_dict
  // DeepSpeed's state_dict(): {"last_batch_iteration": t}.
  nlohmann::json state_dict() const;
  const std::string& type() const { return type_; }

 protected:
  LrScheduler(std::string type, int64_t t, double optimizer_lr);
  virtual double lr_at(int64_t t) const = 0;
  virtual std::optional<double> momentum_at(int64_t t) const;
  virtual std::optional<double> beta2_at(int64_t t) const;

 private:
  std::string type_;
  int64_t t_;
  // Constructed with last_batch_iteration != -1: DeepSpeed leaves the optimizer's lr (and
  // betas) untouched until the first step(), so lr() is the optimizer's lr until then.
  bool untouched_;
  double optimizer_lr_;
};

// Builds the scheduler of cfg (its type and params are checked: unknown type or param key, wrong
// types, missing required params -> a Status naming them). optimizer_lr is the optimizer's lr
// (WarmupCosineLR scales it).
Result<std::unique_ptr<LrScheduler>> lr_scheduler_create(const SchedulerConfig& cfg,
                                                         double optimizer_lr);
// cfg.params with every default filled in (config_to_json).
Result<nlohmann::json> lr_scheduler_params_resolve(const SchedulerConfig& cfg);

}  // namespace zt
