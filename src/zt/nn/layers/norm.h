// Normalisation over the last dimension: LayerNorm (GPT-2, OPT, BERT: weight and bias) or
// RMSNorm (Llama, Qwen2: weight only). forward keeps the per-row statistics (N values) for
// backward; the normalised output itself is not kept: recompute() gives it again, bit for bit,
// from the same input when backward needs it (one memory-bound pass instead of C values a row).
#pragma once

#include <string>

#include "zt/nn/layer.h"

namespace zt::nn {

enum class NormKind : unsigned char { kLayerNorm, kRMSNorm };

class Norm {
 public:
  Norm(Unit& unit, const std::string& name, int64_t width, NormKind kind, float eps);
  NormKind kind() const { return kind_; }

  // x (..., C) -> the same shape; keeps the statistics.
  Tensor forward(Context& ctx, const Tensor& x);
  // forward's output for the same x, without touching the kept statistics.
  Tensor recompute(Context& ctx, const Tensor& x) const;
  // din written (plus *dresidual when given, fused); the parameters' gradients accumulate. `x` is
  // forward's input; `din` may alias dout or *dresidual.
  void backward(Context& ctx, const Tensor& dout, const Tensor& x, Tensor& din,
                const Tensor* dresidual);
  void release();  // drops the kept statistics

 private:
  Tensor run(Context& ctx, const Tensor& x, Tensor& mean, Tensor& rstd) const;
  int64_t width_;
  NormKind kind_;
  float eps_;
  Param* weight_;
  Param* bias_ = nullptr;
  Tensor mean_, rstd_;
};

}  // namespace zt::nn
