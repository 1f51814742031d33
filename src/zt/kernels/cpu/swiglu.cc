// CPU reference of SwiGLU, Llama's MLP nonlinearity (contract in kernels/op_table.inc): one fused
// gate/up projection gives per row [gate (F) | up (F)], and out = silu(gate) * up. Assumes
// contiguous CPU tensors in the compute dtype, f32 or f64.
#include <cmath>
#include <cstdint>

#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

// 1 / (1 + exp(-x)): for very negative x, exp(-x) overflows to inf and the result is 0, not NaN.
template <typename T>
T sigmoid(T x) {
  return T{1} / (T{1} + std::exp(-x));
}

template <typename T>
void swiglu_forward_impl(T* out, const T* gate_up, int64_t N, int64_t F) {
#pragma omp parallel for if (parallel : N * F >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* gate = gate_up + i * 2 * F;
    const T* up = gate + F;
    T* o = out + i * F;
    for (int64_t f = 0; f < F; ++f) o[f] = gate[f] * sigmoid(gate[f]) * up[f];
  }
}

// dgate = dout up silu'(gate), dup = dout silu(gate), silu' = sg (1 + x (1 - sg)).
// dgate_up may alias gate_up: both of an element's pair are read before either is written.
template <typename T>
void swiglu_backward_impl(T* dgate_up, const T* dout, const T* gate_up, int64_t N, int64_t F) {
#pragma omp parallel for if (parallel : N * F >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* gate = gate_up + i * 2 * F;
    const T* up = gate + F;
    const T* g = dout + i * F;
    T* dgate = dgate_up + i * 2 * F;
    T* dup = dgate + F;
    for (int64_t f = 0; f < F; ++f) {
      const T x = gate[f];
      const T u = up[f];
      const T sg = sigmoid(x);
      dgate[f] = g[f] * u * sg * (T{1} + x * (T{1} - sg));
      dup[f] = g[f] * x * sg;
    }
  }
}

// Checks gate_up (..., 2F) against out (..., F) and returns {N, F}.
struct SwigluShape {
  int64_t N, F;
};
SwigluShape swiglu_shape(const Tensor& gate_up, const Tensor& half, const char* op,
                         const char* half_name) {
  ZT_ASSERT(gate_up.ndim() >= 1 && half.ndim() >= 1 && gate_up.size(-1) % 2 == 0 &&
                half.size(-1) * 2 == gate_up.size(-1) && half.numel() * 2 == gate_up.numel(),
            "{}: gate_up {} must be (N, 2F) with {} {} (N, F)", op, gate_up.shape().str(),
            half_name, half.shape().str());
  const int64_t F = half.size(-1);
  return {F == 0 ? 0 : half.numel() / F, F};
}

}  // namespace

void swiglu_forward(Tensor& out, const Tensor& gate_up, const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && gate_up.device().is_cpu(),
            "swiglu_forward (cpu): all tensors must be on the CPU");
  const SwigluShape sh = swiglu_shape(gate_up, out, "swiglu_forward", "out");
  const DType dt = gate_up.dtype();
  ZT_ASSERT(out.dtype() == dt, "swiglu_forward: out {} and gate_up {} must share the compute dtype",
            dtype_name(out.dtype()), dtype_name(dt));
  if (dt == DType::f32) {
    swiglu_forward_impl(out.data<float>(), gate_up.data<float>(), sh.N, sh.F);
  } else {
    ZT_ASSERT(dt == DType::f64, "swiglu_forward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    swiglu_forward_impl(out.data<double>(), gate_up.data<double>(), sh.N, sh.F);
  }
}

void swiglu_backward(Tensor& dgate_up, const Tensor& dout, const Tensor& gate_up, const Stream& s) {
  ZT_ASSERT(dgate_up.device().is_cpu() && dout.device().is_cpu() && gate_up.device().is_cpu(),
            "swiglu_backward (cpu): all tensors must be on the CPU");
  const SwigluShape sh = swiglu_shape(gate_up, dout, "swiglu_backward", "dout");
  ZT_ASSERT(dgate_up.shape() == gate_up.shape(), "swiglu_backward: dgate_up {} differs from {}",
            dgate_up.shape().str(), gate_up.shape().str());
  const DType dt = gate_up.dtype();
  ZT_ASSERT(dgate_up.dtype() == dt && dout.dtype() == dt,
            "swiglu_backward: dgate_up {}, dout {}, gate_up {} must share the compute dtype",
            dtype_name(dgate_up.dtype()), dtype_name(dout.dtype()), dtype_name(dt));
  if (dt == DType::f32) {
    swiglu_backward_impl(dgate_up.data<float>(), dout.data<float>(), gate_up.data<float>(), sh.N,
                         sh.F);
  } else {
    ZT_ASSERT(dt == DType::f64, "swiglu_backward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    swiglu_backward_impl(dgate_up.data<double>(), dout.data<double>(), gate_up.data<double>(), sh.N,
                         sh.F);
  }
}

}  // namespace zt::kernels::cpu
