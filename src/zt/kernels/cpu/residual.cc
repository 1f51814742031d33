// CPU reference of the residual connection (contract in kernels/ops.h): out = a + b, and the
// in-place out += in used to sum gradients. Assumes contiguous CPU tensors of one dtype, f32 or
// f64; outputs may alias inputs (each element is read before it is written).
#include <cstdint>

#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

template <typename T>
void residual_forward_impl(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for simd if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void add_inplace_impl(T* out, const T* in, int64_t n) {
#pragma omp parallel for simd if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) out[i] += in[i];
}

}  // namespace

void residual_forward(Tensor& out, const Tensor& a, const Tensor& b, const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && a.device().is_cpu() && b.device().is_cpu(),
            "residual_forward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(out.numel() == a.numel() && b.numel() == a.numel() && out.dtype() == a.dtype() &&
                b.dtype() == a.dtype(),
            "residual_forward: out {} {}, a {} {}, b {} {} must have the same numel and dtype",
            out.shape().str(), dtype_name(out.dtype()), a.shape().str(), dtype_name(a.dtype()),
            b.shape().str(), dtype_name(b.dtype()));
  if (a.dtype() == DType::f32) {
    residual_forward_impl(out.data<float>(), a.data<float>(), b.data<float>(), a.numel());
  } else {
    ZT_ASSERT(a.dtype() == DType::f64,
              "residual_forward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(a.dtype()));
    residual_forward_impl(out.data<double>(), a.data<double>(), b.data<double>(), a.numel());
  }
}

void add_inplace(Tensor& out, const Tensor& in, const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && in.device().is_cpu(),
            "add_inplace (cpu): all tensors must be on the CPU");
  ZT_ASSERT(out.numel() == in.numel() && out.dtype() == in.dtype(),
            "add_inplace: out {} {} and in {} {} must have the same numel and dtype",
            out.shape().str(), dtype_name(out.dtype()), in.shape().str(), dtype_name(in.dtype()));
  if (in.dtype() == DType::f32) {
    add_inplace_impl(out.data<float>(), in.data<float>(), in.numel());
  } else {
    ZT_ASSERT(in.dtype() == DType::f64, "add_inplace: CPU dtype must be f32 or f64, got {}",
              dtype_name(in.dtype()));
    add_inplace_impl(out.data<double>(), in.data<double>(), in.numel());
  }
}

}  // namespace zt::kernels::cpu
