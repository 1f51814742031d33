// fp16 loss scaling, DeepSpeed's three implementations (reference §2):
//   kZero:    DynamicLossScaler (runtime/fp16/loss_scaler.py), used by ZeRO stages 1-3: hysteresis,
//             doubles when (iter - last_overflow) % window == 0, errors at the minimum scale.
//   kFused:   FP16_Optimizer (fp16/fused_optimizer.py), stage 0 with DeepSpeed's FusedAdam: no
//             hysteresis, doubles one step later (stable interval iter - last_overflow - 1).
//   kUnfused: FP16_UnfusedOptimizer (fp16/unfused_optimizer.py), stage 0 with any other optimizer
//             (Lamb, SGD, torch_adam): as kFused, but min 0.25 by default.
//   kStatic:  a fixed scale (fp16 loss_scale > 0; bf16 and fp32 use 1 and check no overflow).
// One update() per optimizer step, with the overflow flag already MAX-reduced over ranks.
#pragma once

#include <cstdint>
#include <string>

#include "zt/core/status.h"
#include "zt/runtime/config.h"

namespace zt {

enum class LossScalerKind : unsigned char { kZero, kFused, kUnfused, kStatic };

struct LossScalerOptions {
  LossScalerKind kind = LossScalerKind::kStatic;
  double init_scale = 1.0;
  int scale_window = 1000;
  int hysteresis = 1;  // kZero only ("delayed_shift")
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;
  // fp16 checks gradients for inf/nan and skips the step on overflow, also with a static scale;
  // bf16 and fp32 do not check.
  bool check_overflow = false;
};

// From the fp16 block: bf16/fp32 -> kStatic scale 1; fp16 with loss_scale > 0 -> kStatic;
// otherwise zero stage >= 1 -> kZero (2^32 and hysteresis 1 when no dynamic keys are given),
// stage 0 -> kFused for DeepSpeed's FusedAdam (optimizer Adam/AdamW without torch_adam), else
// kUnfused, with §2's defaults.
LossScalerOptions loss_scaler_options(const DeepSpeedConfig& c);

// What a checkpoint stores (DeepSpeed: the loss_scaler object / cur_scale, cur_iter,
// last_overflow_iter; cur_hysteresis for the ZeRO scaler).
struct LossScalerState {
  double cur_scale = 1.0;
  int64_t cur_iter = 0;
  int64_t last_overflow_iter = -1;
  int cur_hysteresis = 1;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& o);
  double scale() const { return state_.cur_scale; }
  bool dynamic() const { return o_.kind != LossScalerKind::kStatic; }
  // Whether the engine must look for inf/nan gradients (fp16) before stepping.
  bool checks_overflow() const { return o_.check_overflow || dynamic(); }
  const LossScalerOptions& options() const { return o_; }
  // Called once per optimizer step with the (max-reduced) overflow flag. Returns a non-ok Status
  // only for the ZeRO scaler at its minimum ("Current loss scale already at minimum - cannot
  // decrease scale anymore. Exiting run."; the state is then unchanged). On overflow,
  // log_line() holds DeepSpeed's line for that scaler, else it is empty.
  Status update(bool overflow);
  const std::string& log_line() const { return log_line_; }

  const LossScalerState& state() const { return state_; }
  void set_state(const LossScalerState& s) { state_ = s; }

 private:
  LossScalerOptions o_;
  LossScalerState state_;
  std::string log_line_;
};

}  // namespace zt
