// The Layer interface of DESIGN.md: explicit forward and backward (as in llm.c and Megatron), no
// autograd tape. forward writes its output and keeps what backward needs; backward takes the
// gradient of its output, accumulates (+=) its parameters' gradients, and returns the gradient of
// its input (written). Users may write their own units against this interface.
#pragma once

#include <string>
#include <vector>

#include "zt/comm/communicator.h"
#include "zt/core/tensor.h"
#include "zt/nn/param.h"

namespace zt::nn {

struct KvCache;

enum class Mode : unsigned char { kTrain, kEval };

// What a forward/backward pass runs with.
struct Context {
  Device device = Device::cpu();
  Stream stream;
  DType compute_dtype = DType::f32;  // kernel dtype of activations and the parameters' copy
  Mode mode = Mode::kTrain;
  const Tensor* targets = nullptr;  // (B,T) i32 on device; null: no loss (generation)
  // Encoders' inputs beside the tokens, (B,T) i32 on device, null when absent: the attention
  // mask (1 real token, 0 padding) and BERT's token types.
  const Tensor* attention_mask = nullptr;
  const Tensor* token_types = nullptr;
  // Incremental decoding (eval only, causal models): attention reads and extends this cache and
  // positions start at kv_cache->past_len (nn/kv_cache.h).
  KvCache* kv_cache = nullptr;
  // d(total loss)/d(per-token loss): the engine sets loss_scale / (GAS * tokens per micro-batch),
  // so the head's fused cross-entropy writes gradients of the scaled, averaged loss directly.
  float dloss = 1.0f;
  // Per-position weights of the loss head's gradient (N) f32 on device, N the head's rows: the
  // head's fused gradient (computed at dloss) is scaled row by row before its backward. Losses
  // built on per-token log-probabilities (PPO's actor) set it: d total / d loss_t.
  const Tensor* row_scale = nullptr;
  // Activation checkpointing (training only): the units that allow it keep only their input
  // through forward and recompute their activations just before their backward; with
  // checkpoint_to_host the kept inputs wait in host memory (DeepSpeed's cpu_checkpointing).
  bool checkpoint_activations = false;
  bool checkpoint_to_host = false;
  // Units per checkpointed segment (DeepSpeed PipelineModule's activation_checkpoint_interval):
  // consecutive running units in groups of this many, each group keeping only its first unit's
  // input and recomputed as a whole before the backward of its last unit. 1: every unit alone.
  int checkpoint_interval = 1;
  // Keep what backward would otherwise recompute from kept inputs (training only): the MLP's
  // activation a = act(h) (the down projection's weight gradient reads it) and a pre-LN block's
  // two norm outputs. Three elementwise passes less per block, for one (tokens, F) and two
  // (tokens, C) activations more per block (EngineOptions::keep_activations).
  bool keep_activations = false;
  // Training randomness (LoRA dropout): a seed the engine draws per micro-step from the run's
  // seed and step, the same for a checkpointed unit's recompute as for its first forward.
  uint64_t dropout_seed = 0;
  // Tensor parallelism (Megatron's): this rank's index in its tensor-parallel group, the group's
  // size and communicator. Tensor-parallel layers (attention's heads, the MLP's width) all-reduce
  // their partial outputs in forward and their partial input gradients in backward over it. On a
  // GPU the collectives are ordered on `stream` and their handles go to `tp_pending`, which the
  // engine waits for after the pass; on the CPU they are waited for at once (a failure is kept
  // there too as a finished handle).
  int tp_rank = 0;
  int tp_size = 1;
  Communicator* tp_comm = nullptr;
  std::vector<CommHandle>* tp_pending = nullptr;
  // Sequence parallelism (Megatron's, on top of tensor parallelism): outside attention and the
  // MLP each rank keeps 1/tp_size of the tokens and runs the norms and the residual adds on those
  // alone. A rank's part is a run of the flattened (batch x sequence) token rows, rank r's rows
  // [r N/T, (r+1) N/T), labelled (B, S/T, C); the per-token work outside the tensor-parallel
  // layers never looks across tokens, so any equal split serves, and this one is contiguous (the
  // collectives need no permutes). Attention and the MLP all-gather their input and
  // reduce-scatter their output where tensor parallelism alone all-reduces it.
  bool sequence_parallel = false;
};

// Sums (or maxes) `t` over the tensor-parallel group in place (nothing without one).
void tp_all_reduce(Context& ctx, Tensor& t, ReduceOp op = ReduceOp::kSum);

// Sequence parallelism (Context::sequence_parallel): whether this pass splits the tokens (never
// while decoding with a KV cache: every layer asks this one question, so they agree).
inline bool sp_on(const Context& ctx) {
  return ctx.sequence_parallel && ctx.tp_size > 1 && ctx.tp_comm != nullptr &&
         ctx.kv_cache == nullptr;
}
// The whole tensor (B, S, ...) from every rank's part (B, S/T, ...) (2-D: (N/T, C) -> (N, C)).
Tensor sp_gather(Context& ctx, const Tensor& part);
// The sum over the group of every rank's `whole` (B, S, ...), this rank's rows of it (written
// into `into` when given).
Tensor sp_reduce_scatter(Context& ctx, const Tensor& whole, const Tensor& into = Tensor());
// This rank's rows of a tensor every rank holds whole and equal (no communication).
Tensor sp_part_of(Context& ctx, const Tensor& whole);
// The whole (N, T * M) from every tensor-parallel rank's columns (N, M): rank r's part becomes
// columns [r M, (r + 1) M) (a vocabulary-parallel head's logits, for generation).
Tensor tp_gather_columns(Context& ctx, const Tensor& part);

class Unit {
 public:
  explicit Unit(std::string name) : name_(std::move(name)) {}
  virtual ~Unit() = default;
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;

  const std::string& name() const { return name_; }
  // Activation checkpointing: whether forward may be rerun on the same input just before
  // backward with the same result (no randomness, no state carried between calls), and the
  // hook that drops what forward kept for backward.
  virtual bool checkpointable() const { return false; }
  virtual void release_activations() {}
  // A frozen unit's parameters are not trained: ZeRO keeps no gradient, master weights or
  // optimizer state for it, its Params' grads stay unbound (undefined), and layers skip their
  // weight gradients (LoRA's --only-optimize-lora). Set before the engine is built.
  bool frozen() const { return frozen_; }
  void set_frozen(bool frozen) { frozen_ = frozen; }
  // A passive unit only holds parameters another unit computes with (LoRA adapters, read by
  // their block through extra_units()): the model never runs it, and ZeRO gathers it and
  // reduces its gradient with the unit that reads it.
  virtual bool passive() const { return false; }
  std::vector<Param*> params();
  // Elements of the unit's parameters including alignment gaps (the unpadded flat size).
  int64_t flat_numel() const { return flat_numel_; }
  // Points every Param's value/grad at its slice of the given flat buffers (numel >= flat_numel).
  // An undefined tensor unbinds (drops the views, so the buffer can be freed).
  void bind_values(const Tensor& flat_value);
  // `unwritten`: the buffer holds no values yet (Param::grad_unwritten); its alignment gaps, its
  // tail and its vector parameters' ranges (biases, norms: only ever added into) are cleared here
  // in one launch, the other parameters' ranges by their first op or clear_unwritten_grads.
  void bind_grads(const Tensor& flat_grad, bool unwritten = false, const Stream& s = {});
  // Clears the gradients no op wrote in this backward (a parameter the pass did not reach).
  void clear_unwritten_grads(const Stream& s);
  // Marks the bound gradients as holding no values (the next backward's first op on each writes
  // it), without touching the buffer: for a buffer whose gaps and tail are already zero. The
  // vector parameters' gradients are appended to `clear` instead, for the caller to clear in one
  // kernels::zero_tensors with the other units' (and marked written).
  void mark_grads_unwritten(std::vector<Tensor>& clear);
  void bind(const Tensor& flat_value, const Tensor& flat_grad) {
    bind_values(flat_value);
    bind_grads(flat_grad);
  }
  // Indices of other units whose parameters this unit also reads (tied weights, adapters): the
  // ZeRO-3 schedule gathers them too before this unit runs.
  const std::vector<int>& extra_units() const { return extra_units_; }
  void add_extra_unit(int index) { extra_units_.push_back(index); }
  // Renumbers them (a pipeline stage holds a subset of the model's units: pipe/stage_model.h).
  void set_extra_units(std::vector<int> indices) { extra_units_ = std::move(indices); }

  virtual Tensor forward(Context& ctx, const Tensor& in) = 0;
  virtual Tensor backward(Context& ctx, const Tensor& dout) = 0;

  // Registers a parameter in this unit's flat buffer (layers of nn/layers/ call it for the unit
  // that owns them: the unit, not the layer, is ZeRO's granule).
  Param& add_param(std::string name, Shape shape, ParamInit init, float std = 0.02f);

 private:
  std::string name_;
  std::vector<std::unique_ptr<Param>> params_;
  std::vector<int> extra_units_;
  int64_t flat_numel_ = 0;
  bool frozen_ = false;
};

}  // namespace zt::nn
