// The layer library: the pieces every model family is built from (DESIGN.md's layers). A layer is
// not a unit: it registers its parameters with the unit that owns it (the unit stays ZeRO's
// granule) and computes through kernels/ops.h. Layers keep no activations they can do without:
// backward takes forward's input from the caller, who keeps it or recomputes it.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "zt/kernels/ops.h"
#include "zt/nn/layer.h"

namespace zt::nn {

enum class Bias : unsigned char { kNone, kWith };

// A low-rank adapter (LoRA) on output rows [row0, row0 + rows) of a Linear: y[:, rows] +=
// scale * dropout(x) A^T B^T, A (r, in), B (rows, r); the rows are the whole output or one
// projection of a fused one (q of [q | k | v]). Its parameters live in another unit (nn/lora.h).
struct LoraAdapter {
  Param* a = nullptr;
  Param* b = nullptr;
  int64_t row0 = 0, rows = 0;
  float scale = 1.0f;    // alpha / r
  float dropout = 0.0f;  // on the adapter's input, training only
  uint64_t salt = 0;     // mixed into Context::dropout_seed: each adapter its own mask
};

// Adapters [first, first + count) of a Linear that share one GEMM on the A side: consecutive,
// of one rank r, no dropout in the pass (`training` with dropout > 0 gives each adapter its own
// input), their A matrices back to back in their unit (nn/lora.h lays a Linear's adapters out
// A, A, ..., B, B, ...). Their u = h [A_1; ...; A_k]^T is one (N, k r) tensor, adapter j's in
// columns [j r, (j + 1) r); backward forms du alike and runs dA and du A as one GEMM each.
struct AdapterGroup {
  size_t first = 0, count = 1;
  int64_t r = 0;
};
std::vector<AdapterGroup> adapter_groups(std::span<const LoraAdapter> adapters, bool training);

// y = x W^T (+ b): x (N, in) -> y (N, out); W (out, in), the layout of torch.nn.Linear.
class Linear {
 public:
  // Parameters `name`.weight (N(0, init_std)) and `name`.bias (zeros) when `bias` is kWith.
  Linear(Unit& unit, const std::string& name, int64_t in, int64_t out, Bias bias,
         float init_std = 0.02f);
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Param& weight() const { return *weight_; }
  Param* bias() const { return bias_; }
  // The bias's gradient buffer to add into (cleared first when unwritten: Param::
  // grad_unwritten), or null (no bias, or a frozen unit's, unbound).
  Tensor* bias_grad(const Stream& s) const {
    return bias_ != nullptr && bias_->grad.defined() ? &grad_for_add(*bias_, s) : nullptr;
  }
  void add_adapter(const LoraAdapter& adapter) { adapters_.push_back(adapter); }
  // Tensor parallelism: a row-parallel layer (Megatron's: its input features split over the
  // ranks, so each rank's output is a partial sum the caller all-reduces) adds its bias on
  // tensor-parallel rank 0 only, so the sum holds it once; every rank computes the bias's
  // gradient (the output gradient is the same on all).
  void set_row_parallel() { row_parallel_ = true; }
  const std::vector<LoraAdapter>& adapters() const { return adapters_; }

  // x (N, in) (any leading shape) -> (N, out); plus `residual` (N, out) when given (added in the
  // GEMM where the device can: kernels::matmul_residual_forward).
  Tensor forward(Context& ctx, const Tensor& x, const Tensor* residual = nullptr) const;
  // din (N, in) is written when not null; the parameters' gradients accumulate (those of a
  // frozen unit, unbound, are skipped). `x` is forward's input.
  void backward(Context& ctx, const Tensor& dout, const Tensor& x, Tensor* din) const;
  // Drops what a training forward kept for backward (each adapter group's u = h A^T); backward
  // drops it too. The layer that owns this Linear calls it where it drops its own activations.
  void release() const { saved_u_.clear(); }

  // With an activation fused into the GEMM (kernels::matmul_act_forward and
  // matmul_backward_act), for layers without adapters (fusable()): forward_act returns act(y)
  // and writes y to `pre`; backward_act's x is act(pre_in) and it writes dpre_in = din *
  // act'(pre_in), the gradient of the activation's input, instead of din.
  bool fusable() const { return adapters_.empty(); }
  Tensor forward_act(Context& ctx, const Tensor& x, kernels::Activation act, Tensor& pre) const;
  void backward_act(Context& ctx, const Tensor& dout, const Tensor& x, const Tensor& pre_in,
                    kernels::Activation act, Tensor& dpre_in) const;

 private:
  // weight.grad (=|+=) dout2^T x2: written by the pass's first op on it, added after.
  void weight_grad(const Tensor& dout2, const Tensor& x2, const Stream& s) const;

  int64_t in_, out_;
  Param* weight_;
  Param* bias_ = nullptr;
  std::vector<LoraAdapter> adapters_;
  // Per adapter group, u = h A^T (N, k r) of the last training forward, which backward reads
  // instead of recomputing it (a GEMM over the whole input for k r values a row).
  mutable std::vector<Tensor> saved_u_;
  // The groups of this pass, checked against where the A matrices are bound (a layout that
  // puts them apart splits the group).
  std::vector<AdapterGroup> bound_groups(const Context& ctx) const;
  bool row_parallel_ = false;
  // The bias forward adds on this rank (null: none here).
  const Tensor* forward_bias(const Context& ctx) const {
    return bias_ != nullptr && !(row_parallel_ && ctx.tp_rank != 0) ? &bias_->value : nullptr;
  }
};

// Rows of a tensor viewed as (numel / cols, cols).
inline Shape as_rows(const Tensor& t, int64_t cols) {
  return {t.numel() / cols, cols};
}

}  // namespace zt::nn
