#include "zt/nn/model.h"

namespace zt::nn {

int64_t Model::num_params() const {
  int64_t n = 0;
  for (const auto& u : units_) {
    for (Param* p : const_cast<Unit&>(*u).params()) n += p->numel();
  }
  return n;
}

Result<int64_t> Model::check_batch(const Tensor& tokens, const Tensor& targets) const {
  if (tokens.ndim() != 2 || tokens.dtype() != DType::i32 || !(tokens.shape() == targets.shape())) {
    return invalid_argument(
        "forward expects tokens and targets of one shape (batch, seq) i32, "
        "got {} and {}",
        tokens.shape().str(), targets.shape().str());
  }
  const int64_t vocab = vocab_size();
  int64_t counted = 0;
  Tensor h = tokens.device().is_cpu() ? tokens : tokens.to(Device::cpu());
  const int32_t* p = h.data<int32_t>();
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (p[i] < 0 || (vocab > 0 && p[i] >= vocab)) {
      return invalid_argument(
          "token id {} at position {} is outside the model's vocabulary "
          "of {}; use a model with a larger vocabulary (--vocab-size) or "
          "a token file made for this one",
          p[i], i, vocab);
    }
  }
  Tensor ht = targets.device().is_cpu() ? targets : targets.to(Device::cpu());
  const int32_t* q = ht.data<int32_t>();
  for (int64_t i = 0; i < ht.numel(); ++i) {
    if (q[i] == kIgnoreTarget) continue;
    if (q[i] < 0 || (vocab > 0 && q[i] >= vocab)) {
      return invalid_argument(
          "target id {} at position {} is outside the model's vocabulary of {} (-100 marks a "
          "position that is not counted)",
          q[i], i, vocab);
    }
    ++counted;
  }
  return counted;
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
