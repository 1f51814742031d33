#include "zt/nn/layers/linear.h"

#include "zt/kernels/ops.h"

namespace zt::nn {

Linear::Linear(Unit& unit, const std::string& name, int64_t in, int64_t out, Bias bias,
               float init_std)
    : in_(in), out_(out) {
  weight_ = &unit.add_param(name + ".weight", {out, in}, ParamInit::kNormal, init_std);
  if (bias == Bias::kWith) bias_ = &unit.add_param(name + ".bias", {out}, ParamInit::kZeros);
}

Tensor Linear::forward(Context& ctx, const Tensor& x) const {
  Tensor x2 = x.reshape(as_rows(x, in_));
  Tensor y = Tensor::empty({x2.size(0), out_}, ctx.compute_dtype, ctx.device, ctx.stream);
  kernels::matmul_forward(y, x2, weight_->value, bias_ != nullptr ? &bias_->value : nullptr,
                          ctx.stream);
  return y;
}

void Linear::backward(Context& ctx, const Tensor& dout, const Tensor& x, Tensor* din) const {
  Tensor din2;
  if (din != nullptr) din2 = din->reshape(as_rows(*din, in_));
  kernels::matmul_backward(
      din != nullptr ? &din2 : nullptr, weight_->grad, bias_ != nullptr ? &bias_->grad : nullptr,
      dout.reshape(as_rows(dout, out_)), x.reshape(as_rows(x, in_)), weight_->value, ctx.stream);
}

}  // namespace zt::nn
