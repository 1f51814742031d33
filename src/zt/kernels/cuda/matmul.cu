// CUDA matmul forward/backward (contract in kernels/ops.h): out (N,M) = in (N,K) @ weight (M,K)^T
// (+ bias). GEMMs go through gemm.cuh (cuBLASLt, fp32 accumulation); dweight accumulates in f32
// with beta = 1 (16-bit A/B, f32 C/D), and an undefined dweight (a frozen weight) skips that GEMM;
// dbias is a deterministic column sum (cuda/column_reduce.cuh) accumulating into f32.
// Assumes contiguous row-major tensors; any leading shape of `in` is flattened into N rows.
#include "zt/kernels/cuda/column_reduce.cuh"
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/cuda/gemm.cuh"
#include "zt/kernels/matmul_cols.h"

namespace zt::kernels::cuda {
namespace {

template <typename T>
__global__ void bias_add_rows_kernel(T* c, const T* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    c[i] = from_f32<T>(to_f32(c[i]) + to_f32(bias[i % cols]));
  }
}

// dbias's term for column_reduce (cuda/column_reduce.cuh: deterministic, no atomics): dout.
template <typename T, int kV>
struct BiasGradTerm {
  const T* dout;
  int64_t cols;
  __device__ void operator()(int64_t row, int64_t c0, float (&acc)[1][kV]) const {
    float v[kV];
    load_f32<T, kV>(v, dout + row * cols + c0);
#pragma unroll
    for (int k = 0; k < kV; ++k) acc[0][k] += v[k];
  }
};

// The operands' device and dtype, and weight (M, K) (the column-block ops check the rest of
// their shapes in kernels/matmul_cols.h).
DType gemm_operands_check(const Tensor& in, const Tensor& weight, const char* op) {
  check_cuda(in, op, "in");
  check_dtype(weight, in.dtype(), op, "weight");
  check_same_device(in, weight, op);
  ZT_ASSERT(weight.ndim() == 2, "{}: weight must be (M, K), got {}", op, weight.shape().str());
  return in.dtype();
}

DType gemm_dtype_check(const Tensor& in, const Tensor& weight, const char* op) {
  gemm_operands_check(in, weight, op);
  ZT_ASSERT(weight.size(1) > 0 && in.numel() % weight.size(1) == 0,
            "{}: in {} does not have rows of K = {}", op, in.shape().str(), weight.size(1));
  return in.dtype();
}

// out (N,M) = in (N,K) @ weight (M,K)^T (+ bias): the forward GEMM.
GemmArgs forward_gemm(void* out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  GemmArgs g;
  g.rows = in.numel() / weight.size(1);
  g.cols = weight.size(0);
  g.inner = weight.size(1);
  g.a = in.data();
  g.b = weight.data();
  g.trans_b = Transpose::kYes;  // weight is stored (M, K)
  g.c = out;
  g.ab_dtype = in.dtype();
  g.c_dtype = in.dtype();
  g.bias = bias != nullptr ? bias->data() : nullptr;
  return g;
}

// din (N,K) = dout (N,M) @ weight (M,K): the input gradient's GEMM.
GemmArgs din_gemm(void* din, const Tensor& dout, const Tensor& weight) {
  GemmArgs g;
  g.rows = dout.numel() / weight.size(0);
  g.cols = weight.size(1);
  g.inner = weight.size(0);
  g.a = dout.data();
  g.b = weight.data();
  g.c = din;
  g.ab_dtype = dout.dtype();
  g.c_dtype = dout.dtype();
  return g;
}

// Checks a forward matmul's operands (in, weight; out (N,M) and bias (M) in the compute dtype)
// and returns its forward GEMM.
GemmArgs checked_forward_gemm(Tensor& out, const Tensor& in, const Tensor& weight,
                              const Tensor* bias, const char* op) {
  const DType dt = gemm_dtype_check(in, weight, op);
  const int64_t M = weight.size(0), N = in.numel() / weight.size(1);
  check_dtype(out, dt, op, "out");
  check_numel(out, N * M, op, "out");
  if (bias != nullptr) {
    check_dtype(*bias, dt, op, "bias");
    check_numel(*bias, M, op, "bias");
  }
  return forward_gemm(out.data(), in, weight, bias);
}

}  // namespace

void bias_add_rows(void* c, const void* bias, int64_t rows, int64_t cols, DType dtype,
                   cudaStream_t stream) {
  dispatch_compute(dtype, "bias_add_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kThreads = 256;
    bias_add_rows_kernel<T><<<grid_for(rows * cols, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(c), static_cast<const T*>(bias), rows, cols);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                    const Stream& s) {
  const GemmArgs g = checked_forward_gemm(out, in, weight, bias, "matmul_forward");
  DeviceGuard guard(in.device());
  gemm(g, stream_of(s));
}

void matmul_backward(Tensor* din, Tensor& dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& in, const Tensor& weight, const Stream& s) {
  const char* op = "matmul_backward";
  const DType dt = gemm_dtype_check(in, weight, op);
  const int64_t M = weight.size(0);
  const int64_t K = weight.size(1);
  const int64_t N = in.numel() / K;
  check_dtype(dout, dt, op, "dout");
  check_numel(dout, N * M, op, "dout");
  if (dweight.defined()) {
    check_dtype(dweight, DType::f32, op, "dweight");
    check_numel(dweight, M * K, op, "dweight");
  }
  DeviceGuard guard(in.device());
  const cudaStream_t stream = stream_of(s);

  if (din != nullptr) {
    check_dtype(*din, dt, op, "din");
    check_numel(*din, N * K, op, "din");
    gemm(din_gemm(din->data(), dout, weight), stream);
  }
  if (dweight.defined()) {  // dweight (M,K) += dout^T (M,N) @ in (N,K)
    Tensor dw = dweight.reshape({M, K});
    cuda::matmul_weight_grad(dw, dout, in, Accumulate::kAdd, s);
  }
  if (dbias != nullptr) {
    check_dtype(*dbias, DType::f32, op, "dbias");
    check_numel(*dbias, M, op, "dbias");
    if (N == 0 || M == 0) return;
    dispatch_compute(dt, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr int kV = kVec<T>;
      const ColumnDst<1> dst{{ptr<float>(*dbias)}};
      if (M % kV == 0 && vec16_aligned(ptr<const T>(dout))) {
        column_reduce<kV, 1>(dst, N, M, BiasGradTerm<T, kV>{ptr<const T>(dout), M}, in.device(), s);
      } else {
        column_reduce<1, 1>(dst, N, M, BiasGradTerm<T, 1>{ptr<const T>(dout), M}, in.device(), s);
      }
    });
  }
}

void matmul_weight_grad(Tensor& dweight, const Tensor& dout, const Tensor& in, Accumulate mode,
                        const Stream& s) {
  const char* op = "matmul_weight_grad";
  check_cuda(in, op, "in");
  check_dtype(dweight, DType::f32, op, "dweight");
  check_same_device(in, dweight, op);
  check_same_device(in, dout, op);
  ZT_ASSERT(dweight.ndim() == 2 && dweight.size(1) > 0 && in.numel() % dweight.size(1) == 0,
            "{}: dweight {} must be (M,K) with in {} of rows of K", op, dweight.shape().str(),
            in.shape().str());
  const DType dt = in.dtype();
  const int64_t M = dweight.size(0);
  const int64_t K = dweight.size(1);
  const int64_t N = in.numel() / K;
  check_dtype(dout, dt, op, "dout");
  check_numel(dout, N * M, op, "dout");
  DeviceGuard guard(in.device());
  if (N == 0) {
    if (mode == Accumulate::kWrite) dweight.zero(s);
    return;
  }
  GemmArgs g;  // dweight (M,K) (+)= dout^T (M,N) @ in (N,K); beta 0 does not read C
  g.rows = M;
  g.cols = K;
  g.inner = N;
  g.a = dout.data();
  g.trans_a = Transpose::kYes;  // dout is stored (N, M)
  g.b = in.data();
  g.c = dweight.data();
  g.ab_dtype = dt;
  g.c_dtype = DType::f32;
  g.beta = mode == Accumulate::kAdd ? 1.0f : 0.0f;
  gemm(g, stream_of(s));
}

void matmul_residual_forward(Tensor& out, const Tensor& in, const Tensor& weight,
                             const Tensor* bias, const Tensor& residual, const Stream& s) {
  const char* op = "matmul_residual_forward";
  GemmArgs g = checked_forward_gemm(out, in, weight, bias, op);
  check_dtype(residual, out.dtype(), op, "residual");
  check_numel(residual, out.numel(), op, "residual");
  check_same_device(out, residual, op);
  ZT_ASSERT(out.data() != residual.data(), "{}: out aliases residual", op);
  DeviceGuard guard(in.device());
  g.c_in = residual.data();
  g.beta = 1.0f;
  gemm(g, stream_of(s));
}

void matmul_act_forward(Tensor& out, Tensor& pre, const Tensor& in, const Tensor& weight,
                        const Tensor* bias, Activation act, const Stream& s) {
  const char* op = "matmul_act_forward";
  GemmArgs g = checked_forward_gemm(out, in, weight, bias, op);
  check_dtype(pre, out.dtype(), op, "pre");
  check_numel(pre, out.numel(), op, "pre");
  DeviceGuard guard(in.device());
  if (act == Activation::kGeluTanh) {
    // out = gelu(in @ weight^T + bias), pre = in @ weight^T + bias
    g.act = GemmAct::kGelu;
    g.aux = pre.data();
    if (gemm_act(g, stream_of(s))) return;
  }
  cuda::matmul_forward(pre, in, weight, bias, s);
  cuda::activation_forward(out, pre, act, s);
}

void matmul_backward_act(Tensor& dpre, Tensor& dweight, Tensor* dbias, const Tensor& dout,
                         const Tensor& in, const Tensor& weight, const Tensor& pre, Activation act,
                         const Stream& s) {
  const char* op = "matmul_backward_act";
  const DType dt = gemm_dtype_check(in, weight, op);
  const int64_t M = weight.size(0), K = weight.size(1), N = in.numel() / K;
  check_dtype(dpre, dt, op, "dpre");
  check_numel(dpre, N * K, op, "dpre");
  check_dtype(pre, dt, op, "pre");
  check_numel(pre, N * K, op, "pre");
  check_dtype(dout, dt, op, "dout");
  check_numel(dout, N * M, op, "dout");
  DeviceGuard guard(in.device());
  if (act == Activation::kGeluTanh) {
    cuda::matmul_backward(nullptr, dweight, dbias, dout, in, weight, s);
    // dpre (N,K) = (dout (N,M) @ weight (M,K)) * gelu'(pre)
    GemmArgs g = din_gemm(dpre.data(), dout, weight);
    g.act = GemmAct::kDgelu;
    g.aux = pre.data();
    if (gemm_act(g, stream_of(s))) return;
    // cuBLASLt declined the epilogue: the plain din GEMM, then the derivative's own kernel.
    g.act = GemmAct::kNone;
    g.aux = nullptr;
    gemm(g, stream_of(s));
  } else {
    cuda::matmul_backward(&dpre, dweight, dbias, dout, in, weight, s);
  }
  cuda::activation_backward(dpre, dpre, pre, act, s);
}

namespace {
// kernels/matmul_cols.h's shape checks, and the wide operand's dtype and device.
ColsDims cuda_cols_dims(const Tensor& in, const Tensor& weight, const Tensor& wide, int64_t col0,
                        int64_t in_col0, const char* op, const char* wide_name) {
  check_dtype(wide, in.dtype(), op, wide_name);
  check_same_device(in, wide, op);
  return cols_dims(in, weight, wide, col0, in_col0, op, wide_name);
}
}  // namespace

void matmul_cols_forward(Tensor& out, const Tensor& in, const Tensor& weight, int64_t col0,
                         float alpha, int64_t in_col0, const Stream& s) {
  const char* op = "matmul_cols_forward";
  const DType dt = gemm_operands_check(in, weight, op);
  const ColsDims d = cuda_cols_dims(in, weight, out, col0, in_col0, op, "out");
  const int64_t esize = static_cast<int64_t>(dtype_size(dt));
  DeviceGuard guard(in.device());
  GemmArgs g;  // out[:, col0:col0+M] (row stride Y) = alpha in[:, in block] @ weight^T + itself
  g.rows = d.N;
  g.cols = d.M;
  g.inner = d.K;
  g.a = static_cast<const char*>(in.data()) + in_col0 * esize;
  g.lda = d.W;
  g.b = weight.data();
  g.trans_b = Transpose::kYes;
  g.c = static_cast<char*>(out.data()) + col0 * esize;
  g.ldc = d.Y;
  g.ab_dtype = dt;
  g.c_dtype = dt;
  g.alpha = alpha;
  g.beta = 1.0f;
  gemm(g, stream_of(s));
}

void matmul_cols_backward(Tensor* din, Tensor& dweight, const Tensor& dout, int64_t col0,
                          float alpha, const Tensor& in, const Tensor& weight, bool din_accumulate,
                          Accumulate dweight_mode, int64_t in_col0, const Stream& s) {
  const char* op = "matmul_cols_backward";
  const DType dt = gemm_operands_check(in, weight, op);
  const ColsDims d = cuda_cols_dims(in, weight, dout, col0, in_col0, op, "dout");
  const int64_t esize = static_cast<int64_t>(dtype_size(dt));
  const void* block = static_cast<const char*>(dout.data()) + col0 * esize;
  DeviceGuard guard(in.device());
  const cudaStream_t stream = stream_of(s);
  if (din != nullptr) {
    check_dtype(*din, dt, op, "din");
    check_numel(*din, d.N * d.W, op, "din");
    GemmArgs g;  // din[:, in block] (N,K; row stride W) (+)= alpha block (N,M; stride Y) @ weight
    g.rows = d.N;
    g.cols = d.K;
    g.inner = d.M;
    g.a = block;
    g.lda = d.Y;
    g.b = weight.data();
    g.c = static_cast<char*>(din->data()) + in_col0 * esize;
    g.ldc = d.W;
    g.ab_dtype = dt;
    g.c_dtype = dt;
    g.alpha = alpha;
    g.beta = din_accumulate ? 1.0f : 0.0f;
    gemm(g, stream);
  }
  if (dweight.defined()) {
    check_dtype(dweight, DType::f32, op, "dweight");
    check_numel(dweight, d.M * d.K, op, "dweight");
    GemmArgs g;  // dweight (M,K) (+)= alpha block^T (M,N) @ in[:, in block] (N,K)
    g.rows = d.M;
    g.cols = d.K;
    g.inner = d.N;
    g.a = block;
    g.trans_a = Transpose::kYes;
    g.lda = d.Y;
    g.b = static_cast<const char*>(in.data()) + in_col0 * esize;
    g.ldb = d.W;
    g.c = dweight.data();
    g.ab_dtype = dt;
    g.c_dtype = DType::f32;
    g.alpha = alpha;
    g.beta = dweight_mode == Accumulate::kWrite ? 0.0f : 1.0f;
    if (d.N > 0) {
      gemm(g, stream);
    } else if (dweight_mode == Accumulate::kWrite) {
      dweight.zero(s);
    }
  }
}

}  // namespace zt::kernels::cuda
