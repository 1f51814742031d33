// CPU reference of RMSNorm over the last dimension (contract in kernels/op_table.inc), as Llama
// and Qwen2 use it: rstd = 1 / sqrt(mean(x^2) + eps), out = weight * (x * rstd); no mean is
// subtracted and there is no bias. Assumes contiguous CPU tensors; compute dtype f32 or f64 (the
// accumulator dtype equals it on the CPU, so rstd and dweight share its element type).
#include <cmath>
#include <cstdint>

#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

template <typename T>
void rmsnorm_forward_impl(T* out, T* rstd, const T* in, const T* weight, T eps, int64_t N,
                          int64_t C) {
#pragma omp parallel for if (parallel : N * C >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* x = in + i * C;
    T sum_sq = 0;
    for (int64_t c = 0; c < C; ++c) sum_sq += x[c] * x[c];
    const T r = T{1} / std::sqrt(sum_sq / static_cast<T>(C) + eps);
    T* o = out + i * C;
    for (int64_t c = 0; c < C; ++c) o[c] = weight[c] * (x[c] * r);
    rstd[i] = r;
  }
}

// With norm = x r and dnorm = weight dout:
// din = r (dnorm - norm mean(dnorm norm)) [+ dresidual]; dweight += sum over rows of dout norm.
// din (and dout, dresidual) may alias one another: each element is read before it is written.
// dweight may be null (a frozen weight, not computed).
template <typename T>
void rmsnorm_backward_impl(T* din, T* dweight, const T* dout, const T* in, const T* weight,
                           const T* rstd, const T* dresidual, int64_t N, int64_t C) {
  // Parameter gradient first: it reads dout, which din may overwrite. Threads split the columns,
  // each summing over all rows, so the accumulation (+=) has no write races.
  if (dweight) {
#pragma omp parallel for if (parallel : N * C >= kParallelMinWork)
    for (int64_t c = 0; c < C; ++c) {
      T dw = 0;
      for (int64_t i = 0; i < N; ++i) dw += dout[i * C + c] * in[i * C + c] * rstd[i];
      dweight[c] += dw;
    }
  }
#pragma omp parallel for if (parallel : N * C >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* g = dout + i * C;
    const T* x = in + i * C;
    const T r = rstd[i];
    T dnorm_norm_mean = 0;
    for (int64_t c = 0; c < C; ++c) dnorm_norm_mean += weight[c] * g[c] * x[c] * r;
    dnorm_norm_mean /= static_cast<T>(C);
    T* dx = din + i * C;
    const T* dres = dresidual ? dresidual + i * C : nullptr;
    for (int64_t c = 0; c < C; ++c) {
      T v = (weight[c] * g[c] - x[c] * r * dnorm_norm_mean) * r;
      if (dres) v += dres[c];
      dx[c] = v;
    }
  }
}

// The row count N of an (N, C) view of `t`, asserting that C divides its numel.
int64_t rmsnorm_rows(const Tensor& t, int64_t C, const char* op, const char* name) {
  ZT_ASSERT(C > 0 && t.ndim() >= 1 && t.size(-1) == C && t.numel() % C == 0,
            "{}: {} {} does not end in the normalised dimension C = {}", op, name, t.shape().str(),
            C);
  return t.numel() / C;
}

}  // namespace

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& in, const Tensor& weight, float eps,
                     const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && rstd.device().is_cpu() && in.device().is_cpu() &&
                weight.device().is_cpu(),
            "rmsnorm_forward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(weight.ndim() == 1, "rmsnorm_forward: weight {} must be (C)", weight.shape().str());
  const int64_t C = weight.size(0);
  const int64_t N = rmsnorm_rows(in, C, "rmsnorm_forward", "in");
  ZT_ASSERT(out.shape() == in.shape(), "rmsnorm_forward: out {} differs from in {}",
            out.shape().str(), in.shape().str());
  ZT_ASSERT(rstd.numel() == N, "rmsnorm_forward: rstd {} must have N = {} elements",
            rstd.shape().str(), N);
  ZT_ASSERT(eps >= 0.0f, "rmsnorm_forward: eps {} is negative", eps);
  const DType dt = in.dtype();
  ZT_ASSERT(out.dtype() == dt && weight.dtype() == dt,
            "rmsnorm_forward: out {}, in {}, weight {} must share the compute dtype",
            dtype_name(out.dtype()), dtype_name(dt), dtype_name(weight.dtype()));
  ZT_ASSERT(rstd.dtype() == accum_dtype(dt),
            "rmsnorm_forward: rstd {} must be the accum dtype of {}", dtype_name(rstd.dtype()),
            dtype_name(dt));
  if (dt == DType::f32) {
    rmsnorm_forward_impl(out.data<float>(), rstd.data<float>(), in.data<float>(),
                         weight.data<float>(), eps, N, C);
  } else {
    ZT_ASSERT(dt == DType::f64, "rmsnorm_forward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    // eps widened from f32, as transformers passes its float config value to f32 arithmetic.
    rmsnorm_forward_impl(out.data<double>(), rstd.data<double>(), in.data<double>(),
                         weight.data<double>(), static_cast<double>(eps), N, C);
  }
}

void rmsnorm_backward(Tensor& din, Tensor& dweight, const Tensor& dout, const Tensor& in,
                      const Tensor& weight, const Tensor& rstd, const Tensor* dresidual,
                      const Stream& s) {
  // An undefined dweight is a frozen weight: its gradient is not computed.
  const bool with_dweight = dweight.defined();
  ZT_ASSERT(din.device().is_cpu() && (!with_dweight || dweight.device().is_cpu()) &&
                dout.device().is_cpu() && in.device().is_cpu() && weight.device().is_cpu() &&
                rstd.device().is_cpu() && (!dresidual || dresidual->device().is_cpu()),
            "rmsnorm_backward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(weight.ndim() == 1 && (!with_dweight || dweight.shape() == weight.shape()),
            "rmsnorm_backward: weight {} and dweight {} must both be (C)", weight.shape().str(),
            dweight.shape().str());
  const int64_t C = weight.size(0);
  const int64_t N = rmsnorm_rows(in, C, "rmsnorm_backward", "in");
  ZT_ASSERT(din.shape() == in.shape() && dout.shape() == in.shape() &&
                (!dresidual || dresidual->shape() == in.shape()),
            "rmsnorm_backward: din {}, dout {}, dresidual {} must match in {}", din.shape().str(),
            dout.shape().str(), dresidual ? dresidual->shape().str() : "(none)", in.shape().str());
  ZT_ASSERT(rstd.numel() == N, "rmsnorm_backward: rstd {} must have N = {} elements",
            rstd.shape().str(), N);
  const DType dt = in.dtype();
  const DType acc = accum_dtype(dt);
  ZT_ASSERT(din.dtype() == dt && dout.dtype() == dt && weight.dtype() == dt &&
                (!dresidual || dresidual->dtype() == dt),
            "rmsnorm_backward: din {}, dout {}, weight {} (and dresidual) must be the compute "
            "dtype {}",
            dtype_name(din.dtype()), dtype_name(dout.dtype()), dtype_name(weight.dtype()),
            dtype_name(dt));
  ZT_ASSERT((!with_dweight || dweight.dtype() == acc) && rstd.dtype() == acc,
            "rmsnorm_backward: dweight {} and rstd {} must be the accum dtype {}",
            dtype_name(dweight.dtype()), dtype_name(rstd.dtype()), dtype_name(acc));
  if (dt == DType::f32) {
    rmsnorm_backward_impl(din.data<float>(), with_dweight ? dweight.data<float>() : nullptr,
                          dout.data<float>(), in.data<float>(), weight.data<float>(),
                          rstd.data<float>(), dresidual ? dresidual->data<float>() : nullptr, N, C);
  } else {
    ZT_ASSERT(dt == DType::f64, "rmsnorm_backward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    rmsnorm_backward_impl(din.data<double>(), with_dweight ? dweight.data<double>() : nullptr,
                          dout.data<double>(), in.data<double>(), weight.data<double>(),
                          rstd.data<double>(), dresidual ? dresidual->data<double>() : nullptr, N,
                          C);
  }
}

}  // namespace zt::kernels::cpu
