#include "zt/optim/optimizer.h"

namespace zt::optim {

int optimizer_state_count(const OptimizerSpec& spec) {
  switch (spec.kind) {
    case OptimizerKind::kAdam:
      return 2;
    case OptimizerKind::kLamb:
      return 2;
    case OptimizerKind::kSgd:
      return spec.momentum != 0.0 ? 1 : 0;
  }
  return 0;
}

std::vector<std::string> optimizer_state_names(const OptimizerSpec& spec) {
  switch (spec.kind) {
    case OptimizerKind::kAdam:
    case OptimizerKind::kLamb:
      return {"exp_avg", "exp_avg_sq"};
    case OptimizerKind::kSgd:
      if (spec.momentum != 0.0) return {"momentum_buffer"};
      return {};
  }
  return {};
}

std::string optimizer_name(const OptimizerSpec& spec) {
  switch (spec.kind) {
    case OptimizerKind::kAdam:
      return spec.adam_mode == kernels::AdamMode::kAdamW ? "AdamW" : "Adam";
    case OptimizerKind::kSgd:
      return "SGD";
    case OptimizerKind::kLamb:
      return "Lamb";
  }
  return "?";
}

void Optimizer::step(const StepValues& v, std::span<const kernels::OptimChunk> chunks,
                     Device device, const Stream& s) {
  begin_step();
  apply(v, chunks, device, s);
}

namespace {

kernels::AdamArgs adam_args(const OptimizerSpec& spec, const StepValues& v, int64_t step) {
  return {.lr = static_cast<float>(v.lr),
          .beta1 = static_cast<float>(v.beta1),
          .beta2 = static_cast<float>(v.beta2),
          .eps = static_cast<float>(spec.eps),
          .weight_decay = static_cast<float>(spec.weight_decay),
          .step = step,
          .grad_scale = v.grad_scale,
          .grad_scale_at = v.grad_scale_at,
          .scalars_at = v.scalars_at,
          .mode = spec.adam_mode,
          .bias_correction = spec.bias_correction};
}

}  // namespace

std::array<float, 3> Optimizer::next_adam_scalars(const StepValues& v) const {
  ZT_ASSERT(spec_.kind == OptimizerKind::kAdam, "next_adam_scalars of a non-Adam optimizer");
  return kernels::adam_step_scalars(adam_args(spec_, v, steps_ + 1));
}

void Optimizer::apply(const StepValues& v, std::span<const kernels::OptimChunk> chunks,
                      Device device, const Stream& s) const {
  ZT_ASSERT(steps_ >= 1, "Optimizer::apply before begin_step");
  ZT_ASSERT(v.scalars_at == nullptr || spec_.kind == OptimizerKind::kAdam,
            "StepValues::scalars_at is for Adam");
  switch (spec_.kind) {
    case OptimizerKind::kAdam: {
      kernels::adam_step(adam_args(spec_, v, steps_), chunks, device, s);
      break;
    }
    case OptimizerKind::kSgd: {
      kernels::SgdArgs a{.lr = static_cast<float>(v.lr),
                         .momentum = static_cast<float>(spec_.momentum),
                         .dampening = static_cast<float>(spec_.dampening),
                         .weight_decay = static_cast<float>(spec_.weight_decay),
                         .nesterov = spec_.nesterov,
                         .first_step = steps_ == 1,
                         .grad_scale = v.grad_scale,
                         .grad_scale_at = v.grad_scale_at};
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
                          .grad_scale_at = v.grad_scale_at,
                          .max_coeff = static_cast<float>(spec_.max_coeff),
                          .min_coeff = static_cast<float>(spec_.min_coeff),
                          .bias_correction = spec_.bias_correction};
      kernels::lamb_step(a, chunks, device, s);
      break;
    }
  }
}

std::vector<std::vector<kernels::OptimChunk>> split_into_groups(
    std::span<const kernels::OptimChunk> chunks, int64_t limit, Split split) {
  ZT_ASSERT(limit > 0, "split_into_groups: limit {} must be positive", limit);
  std::vector<std::vector<kernels::OptimChunk>> groups(1);
  int64_t used = 0;  // elements in the last group
  auto advance = [](kernels::OptimChunk c, int64_t k) {
    c.param += k;
    c.grad += k;
    if (c.state1) c.state1 += k;
    if (c.state2) c.state2 += k;
    if (c.param_lowp)
      c.param_lowp = static_cast<char*>(c.param_lowp) + k * dtype_size(c.lowp_dtype);
    c.n -= k;
    return c;
  };
  for (kernels::OptimChunk c : chunks) {
    while (c.n > 0) {
      if (used == limit || (split == Split::kWholeChunks && used > 0 && used + c.n > limit)) {
        groups.emplace_back();
        used = 0;
      }
      const int64_t take = split == Split::kWholeChunks ? c.n : std::min(c.n, limit - used);
      kernels::OptimChunk part = c;
      part.n = take;
      groups.back().push_back(part);
      used += take;
      c = advance(c, take);
    }
  }
  if (groups.back().empty()) groups.pop_back();
  return groups;
}

}  // namespace zt::optim
