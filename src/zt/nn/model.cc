#include "zt/nn/model.h"

namespace zt::nn {

int64_t Model::num_params() const {
  int64_t n = 0;
  for (const auto& u : units_) {
    for (Param* p : const_cast<Unit&>(*u).params()) n += p->numel();
  }
  return n;
}

Tensor Model::forward(Context& ctx, const Tensor& input, UnitHooks* hooks) {
  Tensor x = input;
  checkpointed_ = ctx.mode == Mode::kTrain && ctx.checkpoint_activations;
  if (checkpointed_) checkpoints_.assign(units_.size(), Tensor());
  for (size_t i = 0; i < units_.size(); ++i) {
    if (!runs_unit(i)) continue;
    if (hooks != nullptr) hooks->before_forward(static_cast<int>(i));
    const bool keep_input_only = checkpointed_ && units_[i]->checkpointable();
    Tensor in = x;
    x = units_[i]->forward(ctx, x);
    if (keep_input_only) {
      units_[i]->release_activations();
      // Units never write into their input, so the handle keeps it as it was.
      checkpoints_[i] = ctx.checkpoint_to_host && !in.device().is_cpu()
                            ? in.to(Device::cpu(), ctx.stream)
                            : in;
    }
    if (hooks != nullptr) hooks->after_forward(static_cast<int>(i));
  }
  return x;
}

void Model::backward(Context& ctx, UnitHooks* hooks) {
  (void)backward(ctx, Tensor(), hooks);  // the last unit starts from its own saved loss gradient
}

Tensor Model::backward(Context& ctx, const Tensor& dout, UnitHooks* hooks) {
  Tensor d = dout;
  for (size_t k = units_.size(); k-- > 0;) {
    if (!runs_unit(k)) continue;
    if (hooks != nullptr) hooks->before_backward(static_cast<int>(k));
    if (checkpointed_ && checkpoints_[k].defined()) {
      Tensor in = checkpoints_[k].device() == ctx.device ? checkpoints_[k]
                                                         : checkpoints_[k].to(ctx.device, ctx.stream);
      checkpoints_[k] = Tensor();
      (void)units_[k]->forward(ctx, in);  // recompute what backward reads
    }
    d = units_[k]->backward(ctx, d);
    if (hooks != nullptr) hooks->after_backward(static_cast<int>(k));
  }
  checkpointed_ = false;
  return d;
}

}  // namespace zt::nn
