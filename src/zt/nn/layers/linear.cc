#include "zt/nn/layers/linear.h"

#include "zt/kernels/ops.h"

namespace zt::nn {

Linear::Linear(Unit& unit, const std::string& name, int64_t in, int64_t out, Bias bias,
               float init_std)
    : in_(in), out_(out) {
  weight_ = &unit.add_param(name + ".weight", {out, in}, ParamInit::kNormal, init_std);
  if (bias == Bias::kWith) bias_ = &unit.add_param(name + ".bias", {out}, ParamInit::kZeros);
}

namespace {

// The adapter's input: x, or x after dropout (training with dropout > 0). Dropout is linear in
// its input for a given mask, so the same call on a gradient is its backward.
Tensor adapter_input(const Context& ctx, const LoraAdapter& a, const Tensor& x) {
  if (a.dropout <= 0.0f || ctx.mode != Mode::kTrain) return x;
  Tensor h = Tensor::empty(x.shape(), x.dtype(), x.device(), ctx.stream);
  kernels::dropout_apply(h, x, a.dropout, ctx.dropout_seed ^ a.salt, ctx.stream);
  return h;
}

}  // namespace

Tensor Linear::forward(Context& ctx, const Tensor& x, const Tensor* residual) const {
  Tensor x2 = x.reshape(as_rows(x, in_));
  const int64_t N = x2.size(0);
  Tensor y = Tensor::empty({N, out_}, ctx.compute_dtype, ctx.device, ctx.stream);
  const Tensor* b = forward_bias(ctx);
  if (residual != nullptr) {
    kernels::matmul_residual_forward(y, x2, weight_->value, b, residual->reshape({N, out_}),
                                     ctx.stream);
  } else {
    kernels::matmul_forward(y, x2, weight_->value, b, ctx.stream);
  }
  const bool keep = ctx.mode == Mode::kTrain && !adapters_.empty();
  saved_u_.assign(keep ? adapters_.size() : 0, Tensor());
  for (size_t i = 0; i < adapters_.size(); ++i) {
    const LoraAdapter& a = adapters_[i];
    const Tensor h = adapter_input(ctx, a, x2);
    Tensor u = Tensor::empty({N, a.a->shape[0]}, ctx.compute_dtype, ctx.device, ctx.stream);
    kernels::matmul_forward(u, h, a.a->value, nullptr, ctx.stream);
    // y[:, rows] += scale u B^T, straight into the block of the fused output.
    kernels::matmul_cols_forward(y, u, a.b->value, a.row0, a.scale, ctx.stream);
    if (keep) saved_u_[i] = u;
  }
  return y;
}

void Linear::backward(Context& ctx, const Tensor& dout, const Tensor& x, Tensor* din) const {
  const Stream& s = ctx.stream;
  Tensor din2;
  if (din != nullptr) din2 = din->reshape(as_rows(*din, in_));
  const Tensor x2 = x.reshape(as_rows(x, in_));
  const Tensor dout2 = dout.reshape(as_rows(dout, out_));
  const int64_t N = x2.size(0);
  // A frozen unit's weight and bias have no gradient buffers: undefined skips them. The weight's
  // gradient is its own GEMM, which writes it when it is unwritten (weight_grad).
  Tensor no_dweight;
  kernels::matmul_backward(din != nullptr ? &din2 : nullptr, no_dweight, bias_grad(s), dout2, x2,
                           weight_->value, s);
  weight_grad(dout2, x2, s);
  for (size_t i = 0; i < adapters_.size(); ++i) {
    // With g = scale * dout[:, rows] (read in place, never copied) and u = h A^T (forward's, or
    // recomputed where forward kept none): du = g B, dB += g^T u; dA += du^T h,
    // dx += dropout(du A).
    const LoraAdapter& a = adapters_[i];
    const Tensor h = adapter_input(ctx, a, x2);
    const int64_t r = a.a->shape[0];
    Tensor u;
    if (i < saved_u_.size() && saved_u_[i].defined() && saved_u_[i].size(0) == N) {
      u = saved_u_[i];
    } else {
      u = Tensor::empty({N, r}, ctx.compute_dtype, ctx.device, s);
      kernels::matmul_forward(u, h, a.a->value, nullptr, s);
    }
    Tensor du = Tensor::empty({N, r}, ctx.compute_dtype, ctx.device, s);
    kernels::matmul_cols_backward(&du, grad_for_add(*a.b, s), dout2, a.row0, a.scale, u, a.b->value,
                                  /*din_accumulate=*/false, s);
    Tensor& da = grad_for_add(*a.a, s);
    if (din == nullptr) {
      kernels::matmul_backward(nullptr, da, nullptr, du, h, a.a->value, s);
      continue;
    }
    if (a.dropout > 0.0f && ctx.mode == Mode::kTrain) {
      Tensor dh = Tensor::empty({N, in_}, ctx.compute_dtype, ctx.device, s);
      kernels::matmul_backward(&dh, da, nullptr, du, h, a.a->value, s);
      kernels::dropout_apply(dh, dh, a.dropout, ctx.dropout_seed ^ a.salt, s);
      kernels::add_inplace(din2, dh, s);
    } else {  // dx += du A, accumulated by the GEMM itself
      kernels::matmul_cols_backward(&din2, da, du, 0, 1.0f, h, a.a->value,
                                    /*din_accumulate=*/true, s);
    }
  }
  saved_u_.clear();
}

Tensor Linear::forward_act(Context& ctx, const Tensor& x, kernels::Activation act,
                           Tensor& pre) const {
  ZT_ASSERT(fusable(),
            "Linear::forward_act: a layer with adapters runs forward and the activation");
  Tensor x2 = x.reshape(as_rows(x, in_));
  const int64_t N = x2.size(0);
  pre = Tensor::empty({N, out_}, ctx.compute_dtype, ctx.device, ctx.stream);
  Tensor y = Tensor::empty({N, out_}, ctx.compute_dtype, ctx.device, ctx.stream);
  kernels::matmul_act_forward(y, pre, x2, weight_->value, forward_bias(ctx), act, ctx.stream);
  return y;
}

void Linear::backward_act(Context& ctx, const Tensor& dout, const Tensor& x, const Tensor& pre_in,
                          kernels::Activation act, Tensor& dpre_in) const {
  ZT_ASSERT(fusable(),
            "Linear::backward_act: a layer with adapters runs backward and the "
            "activation's backward");
  const Tensor x2 = x.reshape(as_rows(x, in_));
  Tensor dpre2 = dpre_in.reshape(as_rows(dpre_in, in_));
  const Tensor dout2 = dout.reshape(as_rows(dout, out_));
  Tensor no_dweight;
  kernels::matmul_backward_act(dpre2, no_dweight, bias_grad(ctx.stream), dout2, x2, weight_->value,
                               pre_in.reshape(as_rows(pre_in, in_)), act, ctx.stream);
  weight_grad(dout2, x2, ctx.stream);
}

void Linear::weight_grad(const Tensor& dout2, const Tensor& x2, const Stream& s) const {
  if (!weight_->grad.defined()) return;  // frozen
  kernels::matmul_weight_grad(
      weight_->grad, dout2, x2,
      grad_write(*weight_) ? kernels::Accumulate::kWrite : kernels::Accumulate::kAdd, s);
}

}  // namespace zt::nn
