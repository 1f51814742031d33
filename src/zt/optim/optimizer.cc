#include "zt/optim/optimizer.h"

namespace zt::optim {

int optimizer_state_count(const OptimizerSpec& spec) {
  switch (spec.kind) {
    case OptimizerKind::kAdam: return 2;
    case OptimizerKind::kLamb: return 2;
    case OptimizerKind::kSgd: return spec.momentum != 0.0 ? 1 : 0;
  }
  return 0;
}

std::string optimizer_name(const OptimizerSpec& spec) {
  switch (spec.kind) {
    case OptimizerKind::kAdam:
      return spec.adam_mode == kernels::AdamMode::kAdamW ? "AdamW" : "Adam";
    case OptimizerKind::kSgd: return "SGD";
    case OptimizerKind::kLamb: return "Lamb";
  }
  return "?";
}

void Optimizer::step(const StepValues& v, std::span<const kernels::OptimChunk> chunks,
                     Device device, const Stream& s) {
  begin_step();
  apply(v, chunks, device, s);
}

void Optimizer::apply(const StepValues& v, std::span<const kernels::OptimChunk> chunks,
                      Device device, const Stream& s) const {
  ZT_ASSERT(steps_ >= 1, "Optimizer::apply before begin_step");
  switch (spec_.kind) {
    case OptimizerKind::kAdam: {
      kernels::AdamArgs a{.lr = static_cast<float>(v.lr),
                          .beta1 = static_cast<float>(v.beta1),
                          .beta2 = static_cast<float>(v.beta2),
                          .eps = static_cast<float>(spec_.eps),
                          .weight_decay = static_cast<float>(spec_.weight_decay),
                          .step = steps_,
                          .grad_scale = v.grad_scale,
                          .mode = spec_.adam_mode,
                          .bias_correction = spec_.bias_correction};
      kernels::adam_step(a, chunks, device, s);
      break;
    }
    case OptimizerKind::kSgd: {
      kernels::SgdArgs a{.lr = static_cast<float>(v.lr),
                         .momentum = static_cast<float>(spec_.momentum),
                         .dampening = static_cast<float>(spec_.dampening),
                         .weight_decay = static_cast<float>(spec_.weight_decay),
                         .nesterov = spec_.nesterov,
                         .first_step = steps_ == 1,
                         .grad_scale = v.grad_scale};
      kernels::sgd_step(a, chunks, device, s);
      break;
    }
    case OptimizerKind::kLamb: {
      kernels::LambArgs a{.lr = static_cast<float>(v.lr),
                          .beta1 = static_cast<float>(v.beta1),
                          .beta2 = static_cast<float>(v.beta2),
                          .eps = static_cast<float>(spec_.eps),
                          .weight_decay = static_cast<float>(spec_.weight_decay),
                          .step = steps_,
                          .grad_scale = v.grad_scale,
                          .max_coeff = static_cast<float>(spec_.max_coeff),
                          .min_coeff = static_cast<float>(spec_.min_coeff),
                          .bias_correction = spec_.bias_correction};
      kernels::lamb_step(a, chunks, device, s);
      break;
    }
  }
}

}  // namespace zt::optim
