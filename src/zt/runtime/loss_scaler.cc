// The loss scalers of reference §2, transcribed from DeepSpeed 38327e0:
// DynamicLossScaler.update_scale (fp16/loss_scaler.py) and FP16_Optimizer._update_scale /
// FP16_UnfusedOptimizer._update_scale. The log lines are DeepSpeed's, because users grep them.
#include "zt/runtime/loss_scaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "zt/core/assert.h"
#include "zt/runtime/py_format.h"

namespace zt {
namespace {

// Python's int(x) of a float, printed.
std::string py_int(double x) {
  return fmt::format("{:.0f}", std::trunc(x));
}

}  // namespace

LossScalerOptions loss_scaler_options(const DeepSpeedConfig& c) {
  LossScalerOptions o;
  const Fp16Config& f = c.fp16;
  if (!f.enabled) {
    // bf16 / fp32: LossScaler(1.0) and no overflow check.
    o.kind = LossScalerKind::kStatic;
    o.init_scale = 1.0;
    o.check_overflow = false;
    return o;
  }
  o.check_overflow = true;
  if (f.loss_scale > 0) {
    o.kind = LossScalerKind::kStatic;
    o.init_scale = f.loss_scale;
    return o;
  }
  const double init = std::ldexp(1.0, f.initial_scale_power);
  if (c.zero.stage >= 1) {
    o.kind = LossScalerKind::kZero;
    if (f.has_dynamic_keys) {
      o.init_scale = init;
      o.scale_window = f.loss_scale_window;
      o.hysteresis = f.hysteresis;
      o.consecutive_hysteresis = f.consecutive_hysteresis;
      o.min_scale = f.min_loss_scale;
    } else {
      // CreateLossScaler(dynamic_loss_args=None) -> DynamicLossScaler's own defaults.
      o.init_scale = std::ldexp(1.0, 32);
      o.scale_window = 1000;
      o.hysteresis = 1;
      o.consecutive_hysteresis = false;
      o.min_scale = 1.0;
    }
    return o;
  }
  // Stage 0: FP16_Optimizer wraps DeepSpeed's FusedAdam; anything else gets the unfused one.
  // Without an optimizer block ZeroTrain's engine builds its FusedAdam-equivalent AdamW.
  const OptimizerConfig& opt = c.optimizer;
  const bool fused =
      !opt.present || ((opt.type == "adam" || opt.type == "adamw") && !opt.torch_adam);
  o.kind = fused ? LossScalerKind::kFused : LossScalerKind::kUnfused;
  o.hysteresis = 1;
  o.consecutive_hysteresis = false;
  if (f.has_dynamic_keys) {
    o.init_scale = init;
    o.scale_window = f.loss_scale_window;
    o.min_scale = f.min_loss_scale;
  } else {
    o.init_scale = fused ? init : std::ldexp(1.0, 16);  // fused: 2**initial_scale_power (16)
    o.scale_window = 1000;
    o.min_scale = fused ? 1.0 : 0.25;
  }
  return o;
}

LossScaler::LossScaler(const LossScalerOptions& o) : o_(o) {
  ZT_ASSERT(o.scale_window > 0 && o.hysteresis > 0 && o.init_scale > 0,
            "loss scaler options out of range (window {}, hysteresis {}, scale {})", o.scale_window,
            o.hysteresis, o.init_scale);
  state_.cur_scale = o.init_scale;
  state_.cur_iter = 0;
  state_.last_overflow_iter = -1;
  state_.cur_hysteresis = o.hysteresis;
}

Status LossScaler::update(bool overflow) {
  log_line_.clear();
  LossScalerState& s = state_;
  switch (o_.kind) {
    case LossScalerKind::kStatic:
      if (overflow && o_.check_overflow) {
        log_line_ = fmt::format("Grad overflow on iteration: {}. Using static loss scale of: {}",
                                s.cur_iter, py_float(s.cur_scale));
      }
      break;
    case LossScalerKind::kZero:
      if (overflow) {
        if (o_.hysteresis == 1 || s.cur_hysteresis == 1) {
          if (s.cur_scale == o_.min_scale) {
            return invalid_argument(
                "Current loss scale already at minimum - cannot decrease scale anymore. Exiting "
                "run. (fp16 gradients overflowed at every scale down to min_loss_scale {}; bf16 "
                "avoids loss scaling altogether, or lower the learning rate)",
                py_float(o_.min_scale));
          }
          const double next = std::max(s.cur_scale / 2.0, o_.min_scale);
          log_line_ = fmt::format(
              "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss "
              "scale: {}, reducing to {}",
              py_int(s.cur_scale), py_int(next));
          s.cur_scale = next;
        } else {
          log_line_ = fmt::format(
              "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss "
              "scale: {}, but hysteresis is {}. Reducing hysteresis to {}",
              py_int(s.cur_scale), s.cur_hysteresis, s.cur_hysteresis - 1);
          s.cur_hysteresis -= 1;
        }
        s.last_overflow_iter = s.cur_iter;
      } else {
        if (o_.consecutive_hysteresis) s.cur_hysteresis = o_.hysteresis;
        if ((s.cur_iter - s.last_overflow_iter) % o_.scale_window == 0) {
          if (!o_.consecutive_hysteresis) s.cur_hysteresis = o_.hysteresis;
          s.cur_scale *= 2.0;
        }
      }
      break;
    case LossScalerKind::kFused:
    case LossScalerKind::kUnfused:
      if (overflow) {
        const double prev = s.cur_scale;
        s.cur_scale = std::max(s.cur_scale / 2.0, o_.min_scale);
        s.last_overflow_iter = s.cur_iter;
        log_line_ = fmt::format("{}Attempted loss scale: {}, reducing to {}",
                                o_.kind == LossScalerKind::kFused
                                    ? "Overflow detected. Skipping step. "
                                    : "[deepspeed] fp16 dynamic loss scale overflow! Skipping "
                                      "step. ",
                                py_float(prev), py_float(s.cur_scale));
      } else {
        // "Ensure self.scale_window updates since last overflow": one step later than kZero.
        const int64_t stable = s.cur_iter - s.last_overflow_iter - 1;
        if (stable > 0 && stable % o_.scale_window == 0) s.cur_scale *= 2.0;
      }
      break;
  }
  s.cur_iter += 1;
  return Status::ok();
}

}  // namespace zt
