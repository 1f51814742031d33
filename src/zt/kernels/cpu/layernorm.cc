// CPU reference of layernorm over the last dimension (contract in kernels/ops.h): the caller's eps
// and the biased variance, as PyTorch and llm.c. Assumes contiguous CPU tensors; compute dtype f32
// or f64 (the accumulator dtype equals it on the CPU, so mean/rstd/dweight/dbias share its element
// type).
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
void layernorm_forward_impl(T* out, T* mean, T* rstd, const T* in, const T* weight, const T* bias,
                            int64_t N, int64_t C, T eps) {
#pragma omp parallel for if (parallel : N * C >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* x = in + i * C;
    T sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const T m = sum / static_cast<T>(C);
    // Two passes (mean, then squared deviations) rather than E[x^2] - m^2, which cancels badly.
    T var = 0;
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= static_cast<T>(C);
    const T r = T{1} / std::sqrt(var + static_cast<T>(eps));
    T* o = out + i * C;
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * r * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

// din (and dout, dresidual) may alias one another: each element is read before it is written.
// dweight and dbias may each be null (a frozen parameter, not computed).
template <typename T>
void layernorm_backward_impl(T* din, T* dweight, T* dbias, const T* dout, const T* in,
                             const T* weight, const T* mean, const T* rstd, const T* dresidual,
                             int64_t N, int64_t C) {
  // Parameter gradients first: they read dout, which din may overwrite. Threads split the
  // columns, each summing over all rows, so the accumulation (+=) has no write races.
  if (dweight || dbias) {
#pragma omp parallel for if (parallel : N * C >= kParallelMinWork)
    for (int64_t c = 0; c < C; ++c) {
      T dw = 0;
      T db = 0;
      for (int64_t i = 0; i < N; ++i) {
        const T g = dout[i * C + c];
        const T norm = (in[i * C + c] - mean[i]) * rstd[i];
        dw += norm * g;
        db += g;
      }
      if (dweight) dweight[c] += dw;
      if (dbias) dbias[c] += db;
    }
  }
  // din = rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)), dnorm = weight * dout.
#pragma omp parallel for if (parallel : N * C >= kParallelMinWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* g = dout + i * C;
    const T* x = in + i * C;
    const T m = mean[i];
    const T r = rstd[i];
    T dnorm_mean = 0;
    T dnorm_norm_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const T dnorm = weight[c] * g[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (x[c] - m) * r;
    }
    dnorm_mean /= static_cast<T>(C);
    dnorm_norm_mean /= static_cast<T>(C);
    T* dx = din + i * C;
    const T* dres = dresidual ? dresidual + i * C : nullptr;
    for (int64_t c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * r;
      T v = (weight[c] * g[c] - dnorm_mean - norm * dnorm_norm_mean) * r;
      if (dres) v += dres[c];
      dx[c] = v;
    }
  }
}

// The row count N of an (N, C) view of `t`, asserting that C divides its numel.
int64_t layernorm_rows(const Tensor& t, int64_t C, const char* op, const char* name) {
  ZT_ASSERT(C > 0 && t.numel() % C == 0 && t.size(-1) == C,
            "{}: {} {} does not end in the normalised dimension C = {}", op, name, t.shape().str(),
            C);
  return t.numel() / C;
}

}  // namespace

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& in,
                       const Tensor& weight, const Tensor& bias, float eps, const Stream& s) {
  ZT_ASSERT(eps > 0.0f, "layernorm_forward: eps {} must be positive", eps);
  ZT_ASSERT(out.device().is_cpu() && mean.device().is_cpu() && rstd.device().is_cpu() &&
                in.device().is_cpu() && weight.device().is_cpu() && bias.device().is_cpu(),
            "layernorm_forward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(weight.ndim() == 1 && bias.shape() == weight.shape(),
            "layernorm_forward: weight {} and bias {} must both be (C)", weight.shape().str(),
            bias.shape().str());
  const int64_t C = weight.size(0);
  const int64_t N = layernorm_rows(in, C, "layernorm_forward", "in");
  ZT_ASSERT(out.shape() == in.shape(), "layernorm_forward: out {} differs from in {}",
            out.shape().str(), in.shape().str());
  ZT_ASSERT(mean.numel() == N && rstd.numel() == N,
            "layernorm_forward: mean {} and rstd {} must have N = {} elements", mean.shape().str(),
            rstd.shape().str(), N);
  const DType dt = in.dtype();
  ZT_ASSERT(out.dtype() == dt && weight.dtype() == dt && bias.dtype() == dt,
            "layernorm_forward: out {}, in {}, weight {}, bias {} must share the compute dtype",
            dtype_name(out.dtype()), dtype_name(dt), dtype_name(weight.dtype()),
            dtype_name(bias.dtype()));
  ZT_ASSERT(mean.dtype() == accum_dtype(dt) && rstd.dtype() == accum_dtype(dt),
            "layernorm_forward: mean {} / rstd {} must be the accum dtype of {}",
            dtype_name(mean.dtype()), dtype_name(rstd.dtype()), dtype_name(dt));
  if (dt == DType::f32) {
    layernorm_forward_impl(out.data<float>(), mean.data<float>(), rstd.data<float>(),
                           in.data<float>(), weight.data<float>(), bias.data<float>(), N, C, eps);
  } else {
    ZT_ASSERT(dt == DType::f64, "layernorm_forward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    layernorm_forward_impl(out.data<double>(), mean.data<double>(), rstd.data<double>(),
                           in.data<double>(), weight.data<double>(), bias.data<double>(), N, C,
                           static_cast<double>(eps));
  }
}

void layernorm_backward(Tensor& din, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& in, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor* dresidual, const Stream& s) {
  // An undefined dweight or dbias is a frozen parameter: its gradient is not computed.
  const bool with_dweight = dweight.defined();
  const bool with_dbias = dbias.defined();
  ZT_ASSERT(din.device().is_cpu() && (!with_dweight || dweight.device().is_cpu()) &&
                (!with_dbias || dbias.device().is_cpu()) && dout.device().is_cpu() &&
                in.device().is_cpu() && weight.device().is_cpu() && mean.device().is_cpu() &&
                rstd.device().is_cpu() && (!dresidual || dresidual->device().is_cpu()),
            "layernorm_backward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(weight.ndim() == 1 && (!with_dweight || dweight.shape() == weight.shape()) &&
                (!with_dbias || dbias.shape() == weight.shape()),
            "layernorm_backward: weight {}, dweight {}, dbias {} must all be (C)",
            weight.shape().str(), dweight.shape().str(), dbias.shape().str());
  const int64_t C = weight.size(0);
  const int64_t N = layernorm_rows(in, C, "layernorm_backward", "in");
  ZT_ASSERT(din.shape() == in.shape() && dout.shape() == in.shape() &&
                (!dresidual || dresidual->shape() == in.shape()),
            "layernorm_backward: din {}, dout {}, dresidual {} must match in {}", din.shape().str(),
            dout.shape().str(), dresidual ? dresidual->shape().str() : "(none)", in.shape().str());
  ZT_ASSERT(mean.numel() == N && rstd.numel() == N,
            "layernorm_backward: mean {} and rstd {} must have N = {} elements", mean.shape().str(),
            rstd.shape().str(), N);
  const DType dt = in.dtype();
  const DType acc = accum_dtype(dt);
  ZT_ASSERT(din.dtype() == dt && dout.dtype() == dt && weight.dtype() == dt &&
                (!dresidual || dresidual->dtype() == dt),
            "layernorm_backward: din {}, dout {}, weight {} (and dresidual) must be the compute "
            "dtype {}",
            dtype_name(din.dtype()), dtype_name(dout.dtype()), dtype_name(weight.dtype()),
            dtype_name(dt));
  ZT_ASSERT((!with_dweight || dweight.dtype() == acc) && (!with_dbias || dbias.dtype() == acc) &&
                mean.dtype() == acc && rstd.dtype() == acc,
            "layernorm_backward: dweight {}, dbias {}, mean {}, rstd {} must be the accum dtype {}",
            dtype_name(dweight.dtype()), dtype_name(dbias.dtype()), dtype_name(mean.dtype()),
            dtype_name(rstd.dtype()), dtype_name(acc));
  if (dt == DType::f32) {
    layernorm_backward_impl(din.data<float>(), with_dweight ? dweight.data<float>() : nullptr,
                            with_dbias ? dbias.data<float>() : nullptr, dout.data<float>(),
                            in.data<float>(), weight.data<float>(), mean.data<float>(),
                            rstd.data<float>(), dresidual ? dresidual->data<float>() : nullptr, N,
                            C);
  } else {
    ZT_ASSERT(dt == DType::f64, "layernorm_backward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    layernorm_backward_impl(din.data<double>(), with_dweight ? dweight.data<double>() : nullptr,
                            with_dbias ? dbias.data<double>() : nullptr, dout.data<double>(),
                            in.data<double>(), weight.data<double>(), mean.data<double>(),
                            rstd.data<double>(), dresidual ? dresidual->data<double>() : nullptr, N,
                            C);
  }
}

}  // namespace zt::kernels::cpu
