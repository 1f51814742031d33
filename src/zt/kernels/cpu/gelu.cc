// CPU reference of GELU in its tanh form (contract in kernels/ops.h):
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as GPT-2 and llm.c use.
// Assumes contiguous CPU tensors in the compute dtype, f32 or f64.
#include <cmath>
#include <cstdint>
#include <numbers>

#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;
static_assert(kGeluScale * kGeluScale - 2.0 / std::numbers::pi < 1e-15 &&
              2.0 / std::numbers::pi - kGeluScale * kGeluScale < 1e-15);

template <typename T>
void gelu_forward_impl(T* out, const T* in, int64_t n) {
  const T s = static_cast<T>(kGeluScale);
  const T k = static_cast<T>(kGeluCubic);
#pragma omp parallel for if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    const T x = in[i];
    out[i] = T{0.5} * x * (T{1} + std::tanh(s * (x + k * x * x * x)));
  }
}

// din = gelu'(in) dout (written). din may alias dout: each element is read before it is written.
template <typename T>
void gelu_backward_impl(T* din, const T* dout, const T* in, int64_t n) {
  const T s = static_cast<T>(kGeluScale);
  const T k = static_cast<T>(kGeluCubic);
#pragma omp parallel for if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    const T x = in[i];
    const T th = std::tanh(s * (x + k * x * x * x));
    // sech^2 = 1 - tanh^2: unlike 1/cosh^2 it cannot overflow for large |x|.
    const T sech2 = T{1} - th * th;
    const T local = T{0.5} * (T{1} + th) + T{0.5} * x * sech2 * s * (T{1} + T{3} * k * x * x);
    din[i] = local * dout[i];
  }
}

}  // namespace

void gelu_forward(Tensor& out, const Tensor& in, const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && in.device().is_cpu(),
            "gelu_forward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(out.numel() == in.numel() && out.dtype() == in.dtype(),
            "gelu_forward: out {} {} and in {} {} must have the same numel and dtype",
            out.shape().str(), dtype_name(out.dtype()), in.shape().str(), dtype_name(in.dtype()));
  if (in.dtype() == DType::f32) {
    gelu_forward_impl(out.data<float>(), in.data<float>(), in.numel());
  } else {
    ZT_ASSERT(in.dtype() == DType::f64,
              "gelu_forward: CPU compute dtype must be f32 or f64, got {}", dtype_name(in.dtype()));
    gelu_forward_impl(out.data<double>(), in.data<double>(), in.numel());
  }
}

void gelu_backward(Tensor& din, const Tensor& dout, const Tensor& in, const Stream& s) {
  ZT_ASSERT(din.device().is_cpu() && dout.device().is_cpu() && in.device().is_cpu(),
            "gelu_backward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(din.numel() == in.numel() && dout.numel() == in.numel() && din.dtype() == in.dtype() &&
                dout.dtype() == in.dtype(),
            "gelu_backward: din {} {}, dout {} {}, in {} {} must have the same numel and dtype",
            din.shape().str(), dtype_name(din.dtype()), dout.shape().str(),
            dtype_name(dout.dtype()), in.shape().str(), dtype_name(in.dtype()));
  if (in.dtype() == DType::f32) {
    gelu_backward_impl(din.data<float>(), dout.data<float>(), in.data<float>(), in.numel());
  } else {
    ZT_ASSERT(in.dtype() == DType::f64,
              "gelu_backward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(in.dtype()));
    gelu_backward_impl(din.data<double>(), dout.data<double>(), in.data<double>(), in.numel());
  }
}

}  // namespace zt::kernels::cpu
