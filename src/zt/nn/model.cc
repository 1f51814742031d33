#include "zt/nn/model.h"

#include <algorithm>

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
  if (checkpointed_) {
    // Segments: consecutive running units in groups of checkpoint_interval; one checkpoints
    // when every unit of it allows it.
    checkpoints_.assign(units_.size(), Tensor());
    segment_first_.assign(units_.size(), -1);
    segment_last_.assign(units_.size(), -1);
    std::vector<int> running;
    for (size_t i = 0; i < units_.size(); ++i) {
      if (runs_unit(i)) running.push_back(static_cast<int>(i));
    }
    const size_t interval = static_cast<size_t>(std::max(1, ctx.checkpoint_interval));
    for (size_t lo = 0; lo < running.size(); lo += interval) {
      const size_t hi = std::min(lo + interval, running.size());
      bool ok = true;
      for (size_t j = lo; j < hi; ++j) ok = ok && units_[static_cast<size_t>(running[j])]->checkpointable();
      if (!ok) continue;
      for (size_t j = lo; j < hi; ++j) {
        segment_first_[static_cast<size_t>(running[j])] = running[lo];
        segment_last_[static_cast<size_t>(running[j])] = running[hi - 1];
      }
    }
  }
  for (size_t i = 0; i < units_.size(); ++i) {
    if (!runs_unit(i)) continue;
    if (hooks != nullptr) hooks->before_forward(static_cast<int>(i));
    const bool in_segment = checkpointed_ && segment_first_[i] >= 0;
    Tensor in = x;
    x = units_[i]->forward(ctx, x);
    if (in_segment) {
      units_[i]->release_activations();
      if (segment_first_[i] == static_cast<int>(i)) {
        // Units never write into their input, so the handle keeps it as it was.
        checkpoints_[i] = ctx.checkpoint_to_host && !in.device().is_cpu()
                              ? in.to(Device::cpu(), ctx.stream)
                              : in;
      }
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
    if (checkpointed_ && segment_last_[k] == static_cast<int>(k)) {
      // Recompute the segment from its kept input: its units before k between their forward
      // hooks (which gather their parameters where ZeRO-3 shards them), k itself under the
      // before_backward above.
      const size_t first = static_cast<size_t>(segment_first_[k]);
      Tensor x = checkpoints_[first].device() == ctx.device
                     ? checkpoints_[first]
                     : checkpoints_[first].to(ctx.device, ctx.stream);
      checkpoints_[first] = Tensor();
      for (size_t j = first; j <= k; ++j) {
        if (!runs_unit(j)) continue;
        const bool hooked = hooks != nullptr && j != k;
        if (hooked) hooks->before_forward(static_cast<int>(j));
        x = units_[j]->forward(ctx, x);  // recompute what backward reads
        if (hooked) hooks->after_forward(static_cast<int>(j));
      }
    }
    d = units_[k]->backward(ctx, d);
    if (hooks != nullptr) hooks->after_backward(static_cast<int>(k));
  }
  checkpointed_ = false;
  return d;
}

}  // namespace zt::nn
