// Self-attention: multi-head, grouped-query or multi-query (n_kv_heads divides n_heads), causal
// (decoders) or bidirectional (encoders), rotary or not, with optional q/k/v and output biases.
// q, k and v come from one fused projection (weight ((NH + 2 KV) HS, C), rows [q | k | v]): one
// GEMM instead of three; loaders split and join the families' separate tensors.
#pragma once

#include <string>

#include "zt/kernels/ops.h"
#include "zt/nn/kv_cache.h"
#include "zt/nn/layers/linear.h"
#include "zt/nn/layers/rotary.h"

namespace zt::nn {

struct AttentionConfig {
  int64_t hidden = 0;  // model width C
  int n_heads = 0;
  int n_kv_heads = 0;  // equal to n_heads: multi-head
  int64_t head_dim = 0;
  Bias qkv_bias = Bias::kWith;
  Bias out_bias = Bias::kWith;
  kernels::AttnKind kind = kernels::AttnKind::kCausal;
  float init_std = 0.02f;
  float out_init_std = 0.02f;
  int layer = 0;  // this layer's slot in a KvCache
  // Tensor parallelism: the heads (and key/value heads) split over tp_size ranks, this rank's
  // n_heads / tp_size of them (the fused projection's q, k and v rows of those heads; the output
  // projection's matching input columns, row-parallel). n_heads and n_kv_heads are the whole
  // layer's; both must be multiples of tp_size.
  int tp_size = 1;
  int tp_rank = 0;
};

struct AttentionNames {
  std::string qkv, out;  // parameter prefixes of the two projections
};

class Attention {
 public:
  // `rotary` (not owned; shared by the model's blocks) is null for learned/absolute positions.
  Attention(Unit& unit, const AttentionNames& names, const AttentionConfig& config, Rotary* rotary);
  const AttentionConfig& config() const { return config_; }  // (this rank's heads)
  const Linear& qkv() const { return qkv_; }
  const Linear& out() const { return out_; }
  Linear& qkv() { return qkv_; }  // (adapters attach here: nn/lora.h)
  Linear& out() { return out_; }

  // x (B,T,C), the normalised input -> (B,T,C), plus `residual` (B,T,C) when given (added by the
  // output projection's GEMM). Keys where ctx.attention_mask is 0 are masked.
  Tensor forward(Context& ctx, const Tensor& x, const Tensor* residual = nullptr);
  // dx written; `x` is forward's input (kept or recomputed by the caller).
  void backward(Context& ctx, const Tensor& dout, const Tensor& x, Tensor& dx);
  void release();

 private:
  Tensor forward_cached(Context& ctx, const Tensor& qkv, int64_t B, int64_t T,
                        const Tensor* residual);
  // Whether the unfused path expands the projection first (rotary, kv heads repeated).
  bool expanded() const { return rotary_ != nullptr || config_.n_kv_heads != config_.n_heads; }
  // Rotary and the kv heads' repetition in one pass: the projection's (B,T,(NH+2KV)HS) output
  // as the multi-head (B,T,3 NH HS) copy the expanded paths read, and its gradient's way back.
  Tensor expand(Context& ctx, const Tensor& qkv) const;
  Tensor expand_backward(Context& ctx, const Tensor& dfull) const;
  AttentionConfig config_;
  Rotary* rotary_;
  Linear qkv_, out_;
  // Saved: the attention output (the out projection's input) and either the fused kernel's
  // q/k/v (the projection's output with q and k rotated in place, kv heads not expanded) and row
  // log-sum-exp, or the unfused kernel's permuted q/k/v and probabilities.
  Tensor atty_, qkv_full_, lse_, qkvr_, att_;
  bool flash_ = false;
  bool flash_expanded_ = false;  // fused kernels on an expanded copy (ZT_ATTENTION_GQA=expand)
};

// Whether the fused attention kernels run for this device, dtype and head size (CUDA bf16/f16,
// head size 64 or 128; ZT_FLASH_ATTENTION=0 turns them off).
bool want_flash(Device device, DType dtype, int64_t head_size);

// Whether the fused kernels read grouped-query and rotary q/k/v in place (the default), or an
// expanded multi-head copy (ZT_ATTENTION_GQA=expand, read once: the previous path, for A/B).
bool gqa_in_place();

}  // namespace zt::nn
