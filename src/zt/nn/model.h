// Model: an ordered list of units run one after another. forward/backward take optional hooks
// called around each unit, which is where the ZeRO layer gathers and releases parameters and
// reduces gradients: the schedule is the unit order, known in advance, so nothing is traced.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/core/status.h"
#include "zt/nn/layer.h"

namespace zt {
// A target that is not counted (transformers' ignore index: prompt and padding positions).
inline constexpr int32_t kIgnoreTarget = -100;
}  // namespace zt

namespace zt::nn {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(int unit) {}
  virtual void after_forward(int unit) {}
  virtual void before_backward(int unit) {}
  virtual void after_backward(int unit) {}
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  // Token ids must be below this (0: not a language model).
  virtual int64_t vocab_size() const { return 0; }
  std::vector<std::unique_ptr<Unit>>& units() { return units_; }
  const std::vector<std::unique_ptr<Unit>>& units() const { return units_; }
  int64_t num_params() const;
  // Checks one training micro-batch and returns how many targets it counts (the loss is their
  // mean). Language models (this default): input tokens and targets (batch, seq) i32 of one
  // shape, every token in [0, vocab_size()), targets there too or -100 (transformers' ignore
  // index: not counted). Models of other inputs (images) override it.
  virtual Result<int64_t> check_batch(const Tensor& input, const Tensor& targets) const;  // parameters (not counting alignment gaps)
  // The model's own configuration (checkpoints record it, exports write it): null when the
  // model has none to tell.
  virtual nlohmann::json config_json() const { return nullptr; }
  // The low-rank adapters added to the model (nn/lora.h's lora_json: rank, alpha, every
  // adapter's base parameter and rows), recorded by checkpoints so exports can merge them or
  // write them as a PEFT adapter; null without adapters.
  nlohmann::json adapters_json() const { return adapters_; }
  void set_adapters_json(nlohmann::json adapters) { adapters_ = std::move(adapters); }

  // Runs every unit (but the passive ones) in order on `input`. With ctx.targets set, the last unit returns per-token
  // losses; without, it returns logits.
  Tensor forward(Context& ctx, const Tensor& input, UnitHooks* hooks = nullptr);
  // Backward through every unit in reverse order, starting from the gradient the last unit
  // computed in its forward (fused loss). Parameter gradients accumulate. With
  // ctx.checkpoint_activations, each segment of ctx.checkpoint_interval running units (all
  // checkpointable) is rerun from its kept input right before the backward of its last unit
  // (after the hooks' before_backward, which gathers that unit's parameters; the segment's other
  // units are rerun between their hooks' before_forward and after_forward, as in forward).
  void backward(Context& ctx, UnitHooks* hooks = nullptr);
  // The same from `dout`, the gradient of the last unit's output (a pipeline stage's received
  // gradient; undefined: the last unit's own saved loss gradient, as above). Returns the gradient
  // of the first unit's input (undefined when that unit takes token ids).
  Tensor backward(Context& ctx, const Tensor& dout, UnitHooks* hooks);
  // Whether forward and backward run unit i: every unit but the passive ones, unless a model
  // holds units another model runs (a pipeline stage's copy of a tied unit: pipe/stage_model.h).
  virtual bool runs_unit(size_t i) const { return !units_[i]->passive(); }

 protected:
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<Tensor> checkpoints_;  // per unit: its kept input (activation checkpointing)
  // Per unit of a checkpointed segment: the segment's first unit (where its input is kept) and
  // last unit (whose backward reruns the segment); -1 outside checkpointed segments.
  std::vector<int> segment_first_, segment_last_;
  bool checkpointed_ = false;        // the last training forward kept only inputs
  nlohmann::json adapters_;
};

}  // namespace zt::nn
