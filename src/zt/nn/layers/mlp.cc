#include "zt/nn/layers/mlp.h"

namespace zt::nn {

namespace {

MlpConfig local_width(const MlpConfig& c) {
  ZT_ASSERT(c.tp_size >= 1 && c.inner % c.tp_size == 0,
            "mlp: width {} does not split over {} tensor-parallel ranks", c.inner, c.tp_size);
  MlpConfig l = c;
  l.inner = c.inner / c.tp_size;
  return l;
}

}  // namespace

Mlp::Mlp(Unit& unit, const MlpNames& names, const MlpConfig& config)
    : config_(local_width(config)),
      up_(unit, names.up, config.hidden,
          config.gated == Gated::kYes ? 2 * config_.inner : config_.inner, config.bias,
          config.init_std),
      down_(unit, names.down, config_.inner, config.hidden, config.bias, config.out_init_std) {
  ZT_ASSERT(config.gated == Gated::kNo || config.act == kernels::Activation::kSilu,
            "mlp: the gated form is SwiGLU (silu)");
  if (config.tp_size > 1) {
    const int64_t F = config.inner, f = config_.inner, r = config.tp_rank;
    std::vector<std::pair<int64_t, int64_t>> rows = {{r * f, (r + 1) * f}};
    if (config.gated == Gated::kYes) rows.emplace_back(F + r * f, F + (r + 1) * f);  // [gate | up]
    const int64_t all = config.gated == Gated::kYes ? 2 * F : F;
    up_.weight().slice = ParamSlice{.full = {all, config.hidden}, .dim = 0, .ranges = rows};
    if (up_.bias() != nullptr) {
      up_.bias()->slice = ParamSlice{.full = {all}, .dim = 0, .ranges = rows};
    }
    down_.weight().slice =
        ParamSlice{.full = {config.hidden, F}, .dim = 1, .ranges = {{r * f, (r + 1) * f}}};
    down_.set_row_parallel();
  }
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

Tensor Mlp::forward(Context& ctx, const Tensor& x_in, const Tensor* residual) {
  // Tensor-parallel: partial sums, the residual joined once: on rank 0 before the all-reduce, or
  // (sequence-parallel: x_in and the residual are this rank's tokens; the width reads them all)
  // each rank's own after the reduce-scatter.
  const bool sp = sp_on(ctx);
  const Tensor x = sp ? sp_gather(ctx, x_in) : x_in;
  const Tensor* joined = sp || ctx.tp_rank != 0 ? nullptr : residual;
  Tensor y;
  if (config_.gated == Gated::kNo && up_.fusable()) {
    // The activation in the up projection's GEMM (cuBLASLt's epilogue on CUDA).
    Tensor a = up_.forward_act(ctx, x, config_.act, h_);
    y = down_.forward(ctx, a, joined);
    if (keep(ctx)) a_ = std::move(a);
  } else {
    h_ = up_.forward(ctx, x);
    Tensor a = activate(ctx, h_);
    y = down_.forward(ctx, a, joined);
    if (keep(ctx)) a_ = std::move(a);
  }
  if (!sp) {
    tp_all_reduce(ctx, y);
    return y;
  }
  y = sp_reduce_scatter(ctx, y.reshape(x.shape()));
  if (residual != nullptr) kernels::add_inplace(y, residual->reshape(y.shape()), ctx.stream);
  return y;
}

void Mlp::backward(Context& ctx, const Tensor& dout_in, const Tensor& x_in, Tensor& dx_out) {
  // Sequence-parallel: the inputs are this rank's tokens, gathered; the input's gradient is
  // reduce-scattered back to them.
  const bool sp = sp_on(ctx);
  const Tensor x = sp ? sp_gather(ctx, x_in) : x_in;
  const Tensor dout = sp ? sp_gather(ctx, dout_in) : dout_in;
  Tensor dx = sp ? Tensor::empty(x.shape(), ctx.compute_dtype, ctx.device, ctx.stream) : dx_out;
  const int64_t N = h_.size(0);
  if (config_.gated == Gated::kNo && down_.fusable()) {
    // The activation's backward in the down projection's din GEMM: no separate da.
    Tensor dh = Tensor::empty(h_.shape(), ctx.compute_dtype, ctx.device, ctx.stream);
    down_.backward_act(ctx, dout, a_.defined() ? a_ : activate(ctx, h_), h_, config_.act, dh);
    up_.backward(ctx, dh, x, &dx);
  } else {
    Tensor da = Tensor::empty({N, config_.inner}, ctx.compute_dtype, ctx.device, ctx.stream);
    down_.backward(ctx, dout, a_.defined() ? a_ : activate(ctx, h_), &da);
    Tensor dh = Tensor::empty(h_.shape(), ctx.compute_dtype, ctx.device, ctx.stream);
    if (config_.gated == Gated::kYes) {
      kernels::swiglu_backward(dh, da, h_, ctx.stream);
    } else {
      kernels::activation_backward(dh, da, h_, config_.act, ctx.stream);
    }
    up_.backward(ctx, dh, x, &dx);
  }
  if (sp) {
    sp_reduce_scatter(ctx, dx, dx_out);
  } else {
    tp_all_reduce(ctx, dx);
  }
  release();
}

}  // namespace zt::nn
