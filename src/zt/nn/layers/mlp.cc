#include "zt/nn/layers/mlp.h"

namespace zt::nn {

Mlp::Mlp(Unit& unit, const MlpNames& names, const MlpConfig& config)
    : config_(config),
      up_(unit, names.up, config.hidden,
          config.gated == Gated::kYes ? 2 * config.inner : config.inner, config.bias,
          config.init_std),
      down_(unit, names.down, config.inner, config.hidden, config.bias, config.out_init_std) {
  ZT_ASSERT(config.gated == Gated::kNo || config.act == kernels::Activation::kSilu,
            "mlp: the gated form is SwiGLU (silu)");
}

Tensor Mlp::activate(Context& ctx, const Tensor& h) const {
  Tensor a = Tensor::empty({h.size(0), config_.inner}, ctx.compute_dtype, ctx.device, ctx.stream);
  if (config_.gated == Gated::kYes) {
    kernels::swiglu_forward(a, h, ctx.stream);
  } else {
    kernels::activation_forward(a, h, config_.act, ctx.stream);
  }
  return a;
}

Tensor Mlp::forward(Context& ctx, const Tensor& x, const Tensor* residual) {
  if (config_.gated == Gated::kNo && up_.fusable()) {
    // The activation in the up projection's GEMM (cuBLASLt's epilogue on CUDA).
    return down_.forward(ctx, up_.forward_act(ctx, x, config_.act, h_), residual);
  }
  h_ = up_.forward(ctx, x);
  return down_.forward(ctx, activate(ctx, h_), residual);
}

void Mlp::backward(Context& ctx, const Tensor& dout, const Tensor& x, Tensor& dx) {
  const int64_t N = h_.size(0);
  if (config_.gated == Gated::kNo && down_.fusable()) {
    // The activation's backward in the down projection's din GEMM: no separate da.
    Tensor dh = Tensor::empty(h_.shape(), ctx.compute_dtype, ctx.device, ctx.stream);
    down_.backward_act(ctx, dout, activate(ctx, h_), h_, config_.act, dh);
    up_.backward(ctx, dh, x, &dx);
  } else {
    Tensor da = Tensor::empty({N, config_.inner}, ctx.compute_dtype, ctx.device, ctx.stream);
    down_.backward(ctx, dout, activate(ctx, h_), &da);
    Tensor dh = Tensor::empty(h_.shape(), ctx.compute_dtype, ctx.device, ctx.stream);
    if (config_.gated == Gated::kYes) {
      kernels::swiglu_backward(dh, da, h_, ctx.stream);
    } else {
      kernels::activation_backward(dh, da, h_, config_.act, ctx.stream);
    }
    up_.backward(ctx, dh, x, &dx);
  }
  release();
}

}  // namespace zt::nn
