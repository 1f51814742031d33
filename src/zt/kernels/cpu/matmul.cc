// CPU reference of the linear layer out = in @ weight^T + bias (contract in kernels/ops.h). The
// products go through OpenBLAS (row-major cblas_?gemm); bias add and dbias column sums are plain
// loops. Assumes contiguous CPU tensors, compute dtype f32 or f64 (the accumulator dtype equals it
// on the CPU), and that every dimension fits BLAS's 32-bit int.

#include <cstdint>
#include <limits>

#include "zt/kernels/cpu/blas_gemm.h"
#include "zt/kernels/cpu/cpu_ops.h"
#include "zt/kernels/matmul_cols.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

struct MatmulDims {
  int64_t N, K, M;
};

// Reads (N, K, M) from in (..., K) and weight (M, K), asserting the shapes agree with out/dout
// (..., M) and that BLAS can index them.
MatmulDims matmul_dims(const Tensor& in, const Tensor& weight, const Tensor& out, const char* op,
                       const char* out_name) {
  ZT_ASSERT(weight.ndim() == 2, "{}: weight {} must be (M,K)", op, weight.shape().str());
  const int64_t M = weight.size(0);
  const int64_t K = weight.size(1);
  ZT_ASSERT(in.ndim() >= 1 && in.size(-1) == K && K > 0,
            "{}: in {} does not end in K = {} (weight {})", op, in.shape().str(), K,
            weight.shape().str());
  const int64_t N = in.numel() / K;
  ZT_ASSERT(out.ndim() >= 1 && out.size(-1) == M && out.numel() == N * M,
            "{}: {} {} is not (N,M) = ({},{}) for in {} and weight {}", op, out_name,
            out.shape().str(), N, M, in.shape().str(), weight.shape().str());
  constexpr int64_t kMax = std::numeric_limits<blasint>::max();
  ZT_ASSERT(N <= kMax && M <= kMax && K <= kMax, "{}: dims N={} M={} K={} exceed BLAS int", op, N,
            M, K);
  return {N, K, M};
}

template <typename T>
void matmul_forward_impl(T* out, const T* in, const T* weight, const T* bias, const MatmulDims& d) {
  if (d.N == 0 || d.M == 0) return;
  gemm(CblasNoTrans, CblasTrans, d.N, d.M, d.K, T{1}, in, d.K, weight, d.K, T{0}, out, d.M);
  if (bias) {
#pragma omp parallel for if (parallel : d.N * d.M >= kParallelMinWork)
    for (int64_t i = 0; i < d.N; ++i) {
      T* o = out + i * d.M;
      for (int64_t j = 0; j < d.M; ++j) o[j] += bias[j];
    }
  }
}

template <typename T>
void matmul_backward_impl(T* din, T* dweight, T* dbias, const T* dout, const T* in, const T* weight,
                          const MatmulDims& d) {
  if (d.N == 0 || d.M == 0) return;
  if (din) {  // din (N,K) = dout (N,M) @ weight (M,K), written.
    gemm(CblasNoTrans, CblasNoTrans, d.N, d.K, d.M, T{1}, dout, d.M, weight, d.K, T{0}, din, d.K);
  }
  if (dweight) {  // dweight (M,K) += dout^T (M,N) @ in (N,K): beta = 1 accumulates.
    gemm(CblasTrans, CblasNoTrans, d.M, d.K, d.N, T{1}, dout, d.M, in, d.K, T{1}, dweight, d.K);
  }
  if (dbias) {
#pragma omp parallel for if (parallel : d.N * d.M >= kParallelMinWork)
    for (int64_t j = 0; j < d.M; ++j) {
      T sum = 0;
      for (int64_t i = 0; i < d.N; ++i) sum += dout[i * d.M + j];
      dbias[j] += sum;
    }
  }
}

}  // namespace

void matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                    const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && in.device().is_cpu() && weight.device().is_cpu() &&
                (!bias || bias->device().is_cpu()),
            "matmul_forward (cpu): all tensors must be on the CPU");
  const MatmulDims d = matmul_dims(in, weight, out, "matmul_forward", "out");
  ZT_ASSERT(!bias || (bias->ndim() == 1 && bias->size(0) == d.M),
            "matmul_forward: bias {} must be (M) = ({})", bias ? bias->shape().str() : "", d.M);
  const DType dt = in.dtype();
  ZT_ASSERT(out.dtype() == dt && weight.dtype() == dt && (!bias || bias->dtype() == dt),
            "matmul_forward: out {}, in {}, weight {} (and bias) must share the compute dtype",
            dtype_name(out.dtype()), dtype_name(dt), dtype_name(weight.dtype()));
  if (dt == DType::f32) {
    matmul_forward_impl(out.data<float>(), in.data<float>(), weight.data<float>(),
                        bias ? bias->data<float>() : nullptr, d);
  } else {
    ZT_ASSERT(dt == DType::f64, "matmul_forward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    matmul_forward_impl(out.data<double>(), in.data<double>(), weight.data<double>(),
                        bias ? bias->data<double>() : nullptr, d);
  }
}

void matmul_backward(Tensor* din, Tensor& dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& in, const Tensor& weight, const Stream& s) {
  // An undefined dweight is a frozen weight: its gradient is not computed.
  const bool with_dweight = dweight.defined();
  ZT_ASSERT((!din || din->device().is_cpu()) && (!with_dweight || dweight.device().is_cpu()) &&
                (!dbias || dbias->device().is_cpu()) && dout.device().is_cpu() &&
                in.device().is_cpu() && weight.device().is_cpu(),
            "matmul_backward (cpu): all tensors must be on the CPU");
  const MatmulDims d = matmul_dims(in, weight, dout, "matmul_backward", "dout");
  ZT_ASSERT(!din || din->shape() == in.shape(), "matmul_backward: din {} differs from in {}",
            din ? din->shape().str() : "", in.shape().str());
  ZT_ASSERT(!with_dweight || dweight.shape() == weight.shape(),
            "matmul_backward: dweight {} differs from weight {}", dweight.shape().str(),
            weight.shape().str());
  ZT_ASSERT(!dbias || (dbias->ndim() == 1 && dbias->size(0) == d.M),
            "matmul_backward: dbias {} must be (M) = ({})", dbias ? dbias->shape().str() : "", d.M);
  const DType dt = in.dtype();
  const DType acc = accum_dtype(dt);
  ZT_ASSERT(dout.dtype() == dt && weight.dtype() == dt && (!din || din->dtype() == dt),
            "matmul_backward: dout {}, weight {} (and din) must be the compute dtype {}",
            dtype_name(dout.dtype()), dtype_name(weight.dtype()), dtype_name(dt));
  ZT_ASSERT((!with_dweight || dweight.dtype() == acc) && (!dbias || dbias->dtype() == acc),
            "matmul_backward: dweight {} (and dbias) must be the accum dtype {}",
            dtype_name(dweight.dtype()), dtype_name(acc));
  if (dt == DType::f32) {
    matmul_backward_impl(din ? din->data<float>() : nullptr,
                         with_dweight ? dweight.data<float>() : nullptr,
                         dbias ? dbias->data<float>() : nullptr, dout.data<float>(),
                         in.data<float>(), weight.data<float>(), d);
  } else {
    ZT_ASSERT(dt == DType::f64, "matmul_backward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    matmul_backward_impl(din ? din->data<double>() : nullptr,
                         with_dweight ? dweight.data<double>() : nullptr,
                         dbias ? dbias->data<double>() : nullptr, dout.data<double>(),
                         in.data<double>(), weight.data<double>(), d);
  }
}

void matmul_weight_grad(Tensor& dweight, const Tensor& dout, const Tensor& in, Accumulate mode,
                        const Stream& s) {
  ZT_ASSERT(dweight.device().is_cpu() && dout.device().is_cpu() && in.device().is_cpu(),
            "matmul_weight_grad (cpu): all tensors must be on the CPU");
  const MatmulDims d = matmul_dims(in, dweight, dout, "matmul_weight_grad", "dout");
  const DType dt = in.dtype();
  ZT_ASSERT(dout.dtype() == dt && dweight.dtype() == accum_dtype(dt),
            "matmul_weight_grad: dout {} must be the compute dtype {} and dweight {} its accum "
            "dtype",
            dtype_name(dout.dtype()), dtype_name(dt), dtype_name(dweight.dtype()));
  if (d.M == 0) return;
  if (d.N == 0) {
    if (mode == Accumulate::kWrite) dweight.zero();
    return;
  }
  // dweight (M,K) (+)= dout^T (M,N) @ in (N,K); BLAS does not read C when beta is 0.
  if (dt == DType::f32) {
    gemm(CblasTrans, CblasNoTrans, d.M, d.K, d.N, 1.0f, dout.data<float>(), d.M, in.data<float>(),
         d.K, mode == Accumulate::kAdd ? 1.0f : 0.0f, dweight.data<float>(), d.K);
  } else {
    ZT_ASSERT(dt == DType::f64, "matmul_weight_grad: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    gemm(CblasTrans, CblasNoTrans, d.M, d.K, d.N, 1.0, dout.data<double>(), d.M,
         in.data<double>(), d.K, mode == Accumulate::kAdd ? 1.0 : 0.0, dweight.data<double>(), d.K);
  }
}

namespace {

// kernels/matmul_cols.h's checks, and the dimensions within BLAS's int.
ColsDims blas_cols_dims(const Tensor& in, const Tensor& weight, const Tensor& wide, int64_t col0,
                        int64_t in_col0, const char* op, const char* wide_name) {
  const ColsDims d = cols_dims(in, weight, wide, col0, in_col0, op, wide_name);
  constexpr int64_t kMax = std::numeric_limits<blasint>::max();
  ZT_ASSERT(d.N <= kMax && d.Y <= kMax && d.W <= kMax, "{}: dims exceed BLAS int", op);
  return d;
}

}  // namespace

void matmul_cols_forward(Tensor& out, const Tensor& in, const Tensor& weight, int64_t col0,
                         float alpha, int64_t in_col0, const Stream& s) {
  const char* op = "matmul_cols_forward";
  ZT_ASSERT(out.device().is_cpu() && in.device().is_cpu() && weight.device().is_cpu(),
            "{} (cpu): all tensors must be on the CPU", op);
  const ColsDims d = blas_cols_dims(in, weight, out, col0, in_col0, op, "out");
  const DType dt = in.dtype();
  ZT_ASSERT(out.dtype() == dt && weight.dtype() == dt && (dt == DType::f32 || dt == DType::f64),
            "{}: out, in and weight must share the CPU compute dtype f32 or f64", op);
  if (d.N == 0 || d.M == 0) return;
  if (dt == DType::f32) {
    gemm(CblasNoTrans, CblasTrans, d.N, d.M, d.K, alpha, in.data<float>() + in_col0, d.W,
         weight.data<float>(), d.K, 1.0f, out.data<float>() + col0, d.Y);
  } else {
    gemm(CblasNoTrans, CblasTrans, d.N, d.M, d.K, static_cast<double>(alpha),
         in.data<double>() + in_col0, d.W, weight.data<double>(), d.K, 1.0,
         out.data<double>() + col0, d.Y);
  }
}

void matmul_cols_backward(Tensor* din, Tensor& dweight, const Tensor& dout, int64_t col0,
                          float alpha, const Tensor& in, const Tensor& weight, bool din_accumulate,
                          Accumulate dweight_mode, int64_t in_col0, const Stream& s) {
  const char* op = "matmul_cols_backward";
  const bool with_dweight = dweight.defined();
  ZT_ASSERT((!din || din->device().is_cpu()) && (!with_dweight || dweight.device().is_cpu()) &&
                dout.device().is_cpu() && in.device().is_cpu() && weight.device().is_cpu(),
            "{} (cpu): all tensors must be on the CPU", op);
  const ColsDims d = blas_cols_dims(in, weight, dout, col0, in_col0, op, "dout");
  const DType dt = in.dtype();
  ZT_ASSERT(dout.dtype() == dt && weight.dtype() == dt && (!din || din->dtype() == dt) &&
                (dt == DType::f32 || dt == DType::f64),
            "{}: dout, in, weight (and din) must share the CPU compute dtype f32 or f64", op);
  ZT_ASSERT(!din || din->numel() == d.N * d.W, "{}: din {} is not (N,W) = ({},{}) like in", op,
            din ? din->shape().str() : "", d.N, d.W);
  ZT_ASSERT(
      !with_dweight || (dweight.dtype() == accum_dtype(dt) && dweight.shape() == weight.shape()),
      "{}: dweight must be the accum dtype with weight's shape {}", op, weight.shape().str());
  const bool write = dweight_mode == Accumulate::kWrite;
  if (d.N == 0 || d.M == 0) {
    if (with_dweight && write) dweight.zero();
    return;
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T a = static_cast<T>(alpha);
    const T* g = dout.data<T>() + col0;
    if (din) {  // din[:, in block] (N,K) (+)= alpha g (N,M) @ weight (M,K)
      gemm(CblasNoTrans, CblasNoTrans, d.N, d.K, d.M, a, g, d.Y, weight.data<T>(), d.K,
           din_accumulate ? T{1} : T{0}, din->data<T>() + in_col0, d.W);
    }
    if (with_dweight) {  // dweight (M,K) (+)= alpha g^T (M,N) @ in[:, in block] (N,K)
      gemm(CblasTrans, CblasNoTrans, d.M, d.K, d.N, a, g, d.Y, in.data<T>() + in_col0, d.W,
           write ? T{0} : T{1}, dweight.data<T>(), d.K);
    }
  };
  if (dt == DType::f32) {
    run(float{});
  } else {
    run(double{});
  }
}

// The fused forms are the plain ops in sequence here (nothing to fuse on the CPU).
void matmul_residual_forward(Tensor& out, const Tensor& in, const Tensor& weight,
                             const Tensor* bias, const Tensor& residual, const Stream& s) {
  ZT_ASSERT(out.data() != residual.data(), "matmul_residual_forward: out aliases residual");
  cpu::matmul_forward(out, in, weight, bias, s);
  cpu::add_inplace(out, residual, s);
}

void matmul_act_forward(Tensor& out, Tensor& pre, const Tensor& in, const Tensor& weight,
                        const Tensor* bias, Activation act, const Stream& s) {
  cpu::matmul_forward(pre, in, weight, bias, s);
  cpu::activation_forward(out, pre, act, s);
}

void matmul_backward_act(Tensor& dpre, Tensor& dweight, Tensor* dbias, const Tensor& dout,
                         const Tensor& in, const Tensor& weight, const Tensor& pre, Activation act,
                         const Stream& s) {
  cpu::matmul_backward(&dpre, dweight, dbias, dout, in, weight, s);
  cpu::activation_backward(dpre, dpre, pre, act, s);
}

}  // namespace zt::kernels::cpu
