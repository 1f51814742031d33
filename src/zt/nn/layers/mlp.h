// The feed-forward sublayer: down(act(up(x))) (GPT-2: GELU-tanh, BERT: GELU-erf, OPT: ReLU) or
// the gated form down(silu(gate(x)) * up(x)) (Llama, Qwen2: SwiGLU), where gate and up are one
// fused projection (weight (2F, C), rows [gate | up]).
#pragma once

#include <string>

#include "zt/kernels/ops.h"
#include "zt/nn/layers/linear.h"

namespace zt::nn {

enum class Gated : unsigned char { kNo, kYes };

struct MlpConfig {
  int64_t hidden = 0;                                        // C
  int64_t inner = 0;                                         // F
  kernels::Activation act = kernels::Activation::kGeluTanh;  // kSilu when gated
  Gated gated = Gated::kNo;
  Bias bias = Bias::kWith;
  float init_std = 0.02f;
  float out_init_std = 0.02f;
  // Tensor parallelism: the width F split over tp_size ranks (the up projection's rows of this
  // rank's F / tp_size, gate and up alike when gated; the down projection's matching input
  // columns, row-parallel). `inner` is the whole layer's and must be a multiple of tp_size.
  int tp_size = 1;
  int tp_rank = 0;
};

struct MlpNames {
  std::string up, down;  // up: the fused [gate | up] projection when gated
};

class Mlp {
 public:
  Mlp(Unit& unit, const MlpNames& names, const MlpConfig& config);
  const MlpConfig& config() const { return config_; }  // (this rank's width)
  Linear& up() { return up_; }                         // (adapters attach here: nn/lora.h)
  Linear& down() { return down_; }

  // x (N, C) (any leading shape) -> (N, C), plus `residual` (N, C) when given (added by the down
  // projection's GEMM); keeps the up projection's output.
  Tensor forward(Context& ctx, const Tensor& x, const Tensor* residual = nullptr);
  // dx written; `x` is forward's input.
  void backward(Context& ctx, const Tensor& dout, const Tensor& x, Tensor& dx);
  void release() {
    h_ = Tensor();
    a_ = Tensor();
    up_.release();
    down_.release();
  }

 private:
  // act(h) (or swiglu(h)), recomputed in backward rather than kept (one elementwise pass
  // instead of F values a token).
  Tensor activate(Context& ctx, const Tensor& h) const;
  // Whether forward keeps act(h) too (Context::keep_activations; training only).
  static bool keep(const Context& ctx) { return ctx.keep_activations && ctx.mode == Mode::kTrain; }
  MlpConfig config_;
  Linear up_, down_;
  Tensor h_;
  Tensor a_;  // act(h), when kept
};

}  // namespace zt::nn
