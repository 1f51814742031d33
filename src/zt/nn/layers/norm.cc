#include "zt/nn/layers/norm.h"

#include "zt/kernels/ops.h"
#include "zt/nn/layers/linear.h"

namespace zt::nn {

Norm::Norm(Unit& unit, const std::string& name, int64_t width, NormKind kind, float eps)
    : width_(width), kind_(kind), eps_(eps) {
  weight_ = &unit.add_param(name + ".weight", {width}, ParamInit::kOnes);
  if (kind == NormKind::kLayerNorm) {
    bias_ = &unit.add_param(name + ".bias", {width}, ParamInit::kZeros);
  }
}

Tensor Norm::run(Context& ctx, const Tensor& x, Tensor& mean, Tensor& rstd) const {
  const Shape rows = as_rows(x, width_);
  const DType acc = kernels::accum_dtype(ctx.compute_dtype);
  Tensor x2 = x.reshape(rows);
  Tensor out = Tensor::empty(rows, ctx.compute_dtype, ctx.device, ctx.stream);
  rstd = Tensor::empty({rows[0]}, acc, ctx.device, ctx.stream);
  if (kind_ == NormKind::kLayerNorm) {
    mean = Tensor::empty({rows[0]}, acc, ctx.device, ctx.stream);
    kernels::layernorm_forward(out, mean, rstd, x2, weight_->value, bias_->value, eps_, ctx.stream);
  } else {
    kernels::rmsnorm_forward(out, rstd, x2, weight_->value, eps_, ctx.stream);
  }
  return out.reshape(x.shape());
}

Tensor Norm::forward(Context& ctx, const Tensor& x) {
  return run(ctx, x, mean_, rstd_);
}

Tensor Norm::recompute(Context& ctx, const Tensor& x) const {
  Tensor mean, rstd;
  return run(ctx, x, mean, rstd);
}

void Norm::backward(Context& ctx, const Tensor& dout, const Tensor& x, Tensor& din,
                    const Tensor* dresidual) {
  const Shape rows = as_rows(x, width_);
  Tensor din2 = din.reshape(rows);
  Tensor dres2;
  if (dresidual != nullptr) dres2 = dresidual->reshape(rows);
  const Tensor* dres = dresidual != nullptr ? &dres2 : nullptr;
  // Sequence-parallel: this rank's tokens give part of the weight's and bias's gradients; the
  // parts are summed over the group (in one collective) before they join the gradients.
  const bool sp = sp_on(ctx) && weight_->grad.defined();
  Tensor parts, dw, db;
  if (sp) {
    const int n = bias_ != nullptr ? 2 : 1;
    parts = Tensor::zeros({n * width_}, weight_->grad.dtype(), ctx.device, ctx.stream);
    dw = parts.view(0, {width_});
    if (bias_ != nullptr) db = parts.view(width_, {width_});
  } else {
    dw = grad_for_add(*weight_, ctx.stream);
    if (bias_ != nullptr) db = grad_for_add(*bias_, ctx.stream);
  }
  if (kind_ == NormKind::kLayerNorm) {
    kernels::layernorm_backward(din2, dw, db, dout.reshape(rows), x.reshape(rows), weight_->value,
                                mean_, rstd_, dres, ctx.stream);
  } else {
    kernels::rmsnorm_backward(din2, dw, dout.reshape(rows), x.reshape(rows), weight_->value,
                              rstd_, dres, ctx.stream);
  }
  if (sp) {
    tp_all_reduce(ctx, parts);
    kernels::add_inplace(grad_for_add(*weight_, ctx.stream), dw, ctx.stream);
    if (bias_ != nullptr) kernels::add_inplace(grad_for_add(*bias_, ctx.stream), db, ctx.stream);
  }
}

void Norm::release() {
  mean_ = Tensor();
  rstd_ = Tensor();
}

}  // namespace zt::nn
