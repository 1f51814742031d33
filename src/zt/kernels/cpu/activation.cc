// CPU reference of the elementwise activations (Activation in kernels/ops.h; contract in
// kernels/op_table.inc): GPT-2's tanh GELU, BERT's erf GELU, ReLU and SiLU, with their exact
// derivatives. Assumes contiguous CPU tensors in the compute dtype, f32 or f64.
#include <cmath>
#include <cstdint>
#include <numbers>

#include "zt/kernels/activation_dispatch.h"
#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi), as kernels/cpu/gelu.cc
constexpr double kGeluCubic = 0.044715;
static_assert(kGeluScale * kGeluScale - 2.0 / std::numbers::pi < 1e-15 &&
              2.0 / std::numbers::pi - kGeluScale * kGeluScale < 1e-15);
constexpr double kInvSqrt2 = 1.0 / std::numbers::sqrt2;
constexpr double kInvSqrt2Pi = std::numbers::inv_sqrtpi / std::numbers::sqrt2;  // normal pdf at 0

// sigmoid(x) = 1 / (1 + exp(-x)): for very negative x, exp(-x) overflows to inf and the result is
// the correct limit 0, never a NaN.
template <typename T>
T sigmoid(T x) {
  return T{1} / (T{1} + std::exp(-x));
}

template <Activation A, typename T>
T activation_value(T x) {
  if constexpr (A == Activation::kGeluTanh) {
    const T u = static_cast<T>(kGeluScale) * (x + static_cast<T>(kGeluCubic) * x * x * x);
    return T{0.5} * x * (T{1} + std::tanh(u));
  } else if constexpr (A == Activation::kGeluErf) {
    return T{0.5} * x * (T{1} + std::erf(x * static_cast<T>(kInvSqrt2)));
  } else if constexpr (A == Activation::kRelu) {
    return x > T{0} ? x : T{0};
  } else if constexpr (A == Activation::kTanh) {
    return std::tanh(x);
  } else {
    return x * sigmoid(x);
  }
}

template <Activation A, typename T>
T activation_derivative(T x) {
  if constexpr (A == Activation::kGeluTanh) {
    const T s = static_cast<T>(kGeluScale);
    const T k = static_cast<T>(kGeluCubic);
    const T th = std::tanh(s * (x + k * x * x * x));
    // sech^2 = 1 - tanh^2: unlike 1/cosh^2 it cannot overflow for large |x|.
    return T{0.5} * (T{1} + th) + T{0.5} * x * (T{1} - th * th) * s * (T{1} + T{3} * k * x * x);
  } else if constexpr (A == Activation::kGeluErf) {
    // Phi(x) + x phi(x), phi the standard normal density.
    const T cdf = T{0.5} * (T{1} + std::erf(x * static_cast<T>(kInvSqrt2)));
    const T pdf = std::exp(T{-0.5} * x * x) * static_cast<T>(kInvSqrt2Pi);
    return cdf + x * pdf;
  } else if constexpr (A == Activation::kRelu) {
    return x > T{0} ? T{1} : T{0};  // 0 at 0, as torch
  } else if constexpr (A == Activation::kTanh) {
    const T th = std::tanh(x);
    return T{1} - th * th;
  } else {
    const T sg = sigmoid(x);
    return sg * (T{1} + x * (T{1} - sg));
  }
}

template <Activation A, typename T>
void activation_forward_impl(T* out, const T* in, int64_t n) {
#pragma omp parallel for if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) out[i] = activation_value<A>(in[i]);
}

// din may alias dout: each element is read before it is written.
template <Activation A, typename T>
void activation_backward_impl(T* din, const T* dout, const T* in, int64_t n) {
#pragma omp parallel for if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) din[i] = activation_derivative<A>(in[i]) * dout[i];
}

}  // namespace

void activation_forward(Tensor& out, const Tensor& in, Activation act, const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && in.device().is_cpu(),
            "activation_forward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(out.numel() == in.numel() && out.dtype() == in.dtype(),
            "activation_forward: out {} {} and in {} {} must have the same numel and dtype",
            out.shape().str(), dtype_name(out.dtype()), in.shape().str(), dtype_name(in.dtype()));
  const DType dt = in.dtype();
  ZT_ASSERT(dt == DType::f32 || dt == DType::f64,
            "activation_forward: CPU compute dtype must be f32 or f64, got {}", dtype_name(dt));
  dispatch_activation(act, "activation_forward", [&](auto tag) {
    constexpr Activation A = decltype(tag)::value;
    if (dt == DType::f32) {
      activation_forward_impl<A>(out.data<float>(), in.data<float>(), in.numel());
    } else {
      activation_forward_impl<A>(out.data<double>(), in.data<double>(), in.numel());
    }
  });
}

void activation_backward(Tensor& din, const Tensor& dout, const Tensor& in, Activation act,
                         const Stream& s) {
  ZT_ASSERT(din.device().is_cpu() && dout.device().is_cpu() && in.device().is_cpu(),
            "activation_backward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(din.numel() == in.numel() && dout.numel() == in.numel() && din.dtype() == in.dtype() &&
                dout.dtype() == in.dtype(),
            "activation_backward: din {} {}, dout {} {}, in {} {} must have the same numel and "
            "dtype",
            din.shape().str(), dtype_name(din.dtype()), dout.shape().str(),
            dtype_name(dout.dtype()), in.shape().str(), dtype_name(in.dtype()));
  const DType dt = in.dtype();
  ZT_ASSERT(dt == DType::f32 || dt == DType::f64,
            "activation_backward: CPU compute dtype must be f32 or f64, got {}", dtype_name(dt));
  dispatch_activation(act, "activation_backward", [&](auto tag) {
    constexpr Activation A = decltype(tag)::value;
    if (dt == DType::f32) {
      activation_backward_impl<A>(din.data<float>(), dout.data<float>(), in.data<float>(),
                                  in.numel());
    } else {
      activation_backward_impl<A>(din.data<double>(), dout.data<double>(), in.data<double>(),
                                  in.numel());
    }
  });
}

}  // namespace zt::kernels::cpu
