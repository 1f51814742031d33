// The three kinds of GPT-2 unit. Each keeps the activations its backward needs as members
// (tensors from the caching allocator, so repeated steps of the same shape reuse memory).
#pragma once

#include "zt/nn/layer.h"
#include "zt/nn/models/gpt2.h"

namespace zt::nn {

class Gpt2Embedding : public Unit {
 public:
  explicit Gpt2Embedding(const Gpt2Config& c);
  Tensor forward(Context& ctx, const Tensor& tokens) override;  // (B,T) i32 -> (B,T,C)
  Tensor backward(Context& ctx, const Tensor& dout) override;   // returns an undefined tensor
  Param& wte() { return *wte_; }

 private:
  Param* wte_;
  Param* wpe_;
  Tensor tokens_;
};

class Gpt2Block : public Unit {
 public:
  Gpt2Block(const Gpt2Config& c, int index);
  Tensor forward(Context& ctx, const Tensor& x) override;  // (B,T,C) -> (B,T,C)
  Tensor backward(Context& ctx, const Tensor& dout) override;

 private:
  static Tensor recompute_layernorm(Context& ctx, const Tensor& in, const Param& w, const Param& b);
  int n_head_;
  Param *ln1_w_, *ln1_b_, *qkv_w_, *qkv_b_, *proj_w_, *proj_b_;
  Param *ln2_w_, *ln2_b_, *fc_w_, *fc_b_, *fcproj_w_, *fcproj_b_;
  // Saved activations.
  Tensor x_, ln1_mean_, ln1_rstd_, qkvr_, att_, atty_, res2_;
  // Fused attention (use_flash_): qkv itself and the per-row log-sum-exp instead of qkvr and att.
  bool use_flash_ = false;
  Tensor qkv_, lse_;
  Tensor ln2_mean_, ln2_rstd_, fch_;
};

class Gpt2Head : public Unit {
 public:
  // `embedding` supplies the tied wte; `embedding_unit` is its index in the model.
  Gpt2Head(const Gpt2Config& c, Gpt2Embedding& embedding, int embedding_unit);
  // (B,T,C) -> per-token losses (B*T) accum dtype when ctx.targets is set, else logits (B,T,Vp).
  // In kTrain mode the logits buffer is overwritten with the loss gradient (fused).
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dout) override;

 private:
  int vocab_;
  Gpt2Embedding& embedding_;
  Param *lnf_w_, *lnf_b_;
  Tensor x_, lnf_, lnf_mean_, lnf_rstd_, logits_;
  bool have_dlogits_ = false;
};

}  // namespace zt::nn
