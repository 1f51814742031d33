// CUDA layernorm forward/backward over the last dimension C (contract in kernels/ops.h), the
// caller's eps, biased variance, as the CPU reference. One warp per row; statistics and parameter
// gradients in f32. Backward: each block sums its rows' dweight/dbias contributions in shared
// memory, then adds them to the f32 gradients with one atomic per column, so dweight/dbias
// accumulate (+=); an undefined one (a frozen parameter) is not computed, and with neither the
// kernel uses no shared memory. din may alias dout or dresidual: each lane reads an element before
// it writes the same element.
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps, 8 rows at a time per block
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* in,
                                         const T* weight, const T* bias, int64_t rows, int C,
                                         float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  const T* x = in + row * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) sum += to_f32(x[c]);
  const float m = warp_sum(sum) / static_cast<float>(C);
  // Squared deviations from the mean (a second pass over the row, from cache) rather than
  // E[x^2] - m^2, which cancels badly when |m| is large.
  float var = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float d = to_f32(x[c]) - m;
    var += d * d;
  }
  const float r = rsqrtf(warp_sum(var) / static_cast<float>(C) + eps);
  T* o = out + row * C;
  for (int c = lane; c < C; c += kWarpSize) {
    o[c] = from_f32<T>((to_f32(x[c]) - m) * r * to_f32(weight[c]) + to_f32(bias[c]));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// din = rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)) [+ dresidual], dnorm = weight dout,
// norm = (x - mean) rstd. Shared memory: dweight then dbias partial sums, C floats each, when
// either is given (null: not computed); none when neither is.
template <typename T>
__global__ void layernorm_backward_kernel(T* din, float* dweight, float* dbias, const T* dout,
                                          const T* in, const T* weight, const float* mean,
                                          const float* rstd, const T* dresidual, int64_t rows,
                                          int C) {
  extern __shared__ float smem[];
  const bool grads = dweight != nullptr || dbias != nullptr;
  float* s_dw = smem;
  float* s_db = smem + C;
  if (grads) {
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) smem[c] = 0.0f;
    __syncthreads();
  }

  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps_total = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
       row < rows; row += warps_total) {
    const T* g = dout + row * C;
    const T* x = in + row * C;
    const float m = mean[row];
    const float r = rstd[row];
    float sum_dnorm = 0.0f;
    float sum_dnorm_norm = 0.0f;
    for (int c = lane; c < C; c += kWarpSize) {
      const float dnorm = to_f32(weight[c]) * to_f32(g[c]);
      sum_dnorm += dnorm;
      sum_dnorm_norm += dnorm * (to_f32(x[c]) - m) * r;
    }
    const float mean_dnorm = warp_sum(sum_dnorm) / static_cast<float>(C);
    const float mean_dnorm_norm = warp_sum(sum_dnorm_norm) / static_cast<float>(C);
    T* d = din + row * C;
    const T* dres = dresidual != nullptr ? dresidual + row * C : nullptr;
    for (int c = lane; c < C; c += kWarpSize) {
      const float gc = to_f32(g[c]);
      const float norm = (to_f32(x[c]) - m) * r;
      float v = (to_f32(weight[c]) * gc - mean_dnorm - norm * mean_dnorm_norm) * r;
      if (dres != nullptr) v += to_f32(dres[c]);
      d[c] = from_f32<T>(v);
      if (dweight != nullptr) atomicAdd(s_dw + c, gc * norm);
      if (dbias != nullptr) atomicAdd(s_db + c, gc);
    }
  }
  if (!grads) return;
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    if (dweight != nullptr) atomicAdd(dweight + c, s_dw[c]);
    if (dbias != nullptr) atomicAdd(dbias + c, s_db[c]);
  }
}

int sm_count() {
  int device = 0;
  int n = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  ZT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

// Rows and C of a layernorm call; checks the parameter tensors against C.
struct LnShape {
  int64_t rows;
  int C;
};

LnShape layernorm_shape(const Tensor& in, const Tensor& weight, const Tensor& bias,
                        const char* op) {
  check_cuda(in, op, "in");
  check_dtype(weight, in.dtype(), op, "weight");
  check_same_device(in, weight, op);
  const int64_t C = weight.numel();
  ZT_ASSERT(C > 0 && in.numel() % C == 0, "{}: in {} does not have rows of C = {}", op,
            in.shape().str(), C);
  ZT_ASSERT(C < (int64_t{1} << 30), "{}: C = {} is too large", op, C);
  check_dtype(bias, in.dtype(), op, "bias");
  check_numel(bias, C, op, "bias");
  return {in.numel() / C, static_cast<int>(C)};
}

}  // namespace

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& in,
                       const Tensor& weight, const Tensor& bias, float eps, const Stream& s) {
  const char* op = "layernorm_forward";
  ZT_ASSERT(eps > 0.0f, "{}: eps {} must be positive", op, eps);
  const LnShape sh = layernorm_shape(in, weight, bias, op);
  check_dtype(out, in.dtype(), op, "out");
  check_numel(out, in.numel(), op, "out");
  check_dtype(mean, DType::f32, op, "mean");
  check_numel(mean, sh.rows, op, "mean");
  check_dtype(rstd, DType::f32, op, "rstd");
  check_numel(rstd, sh.rows, op, "rstd");
  if (sh.rows == 0) return;
  DeviceGuard guard(in.device());
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const unsigned grid = static_cast<unsigned>(ceil_div(sh.rows, kWarpsPerBlock));
    layernorm_forward_kernel<T><<<grid, kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<float>(mean), ptr<float>(rstd), ptr<const T>(in), ptr<const T>(weight),
        ptr<const T>(bias), sh.rows, sh.C, eps);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void layernorm_backward(Tensor& din, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& in, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor* dresidual, const Stream& s) {
  const char* op = "layernorm_backward";
  // bias is not an input of the backward; check the gradients' shapes against weight.
  const LnShape sh = layernorm_shape(in, weight, weight, op);
  check_dtype(din, in.dtype(), op, "din");
  check_numel(din, in.numel(), op, "din");
  check_dtype(dout, in.dtype(), op, "dout");
  check_numel(dout, in.numel(), op, "dout");
  // An undefined dweight or dbias is a frozen parameter: its gradient is not computed.
  const bool with_dweight = dweight.defined();
  const bool with_dbias = dbias.defined();
  if (with_dweight) {
    check_dtype(dweight, DType::f32, op, "dweight");
    check_numel(dweight, sh.C, op, "dweight");
  }
  if (with_dbias) {
    check_dtype(dbias, DType::f32, op, "dbias");
    check_numel(dbias, sh.C, op, "dbias");
  }
  check_dtype(mean, DType::f32, op, "mean");
  check_numel(mean, sh.rows, op, "mean");
  check_dtype(rstd, DType::f32, op, "rstd");
  check_numel(rstd, sh.rows, op, "rstd");
  if (dresidual != nullptr) {
    check_dtype(*dresidual, in.dtype(), op, "dresidual");
    check_numel(*dresidual, in.numel(), op, "dresidual");
  }
  if (sh.rows == 0) return;
  DeviceGuard guard(in.device());
  const size_t smem =
      with_dweight || with_dbias ? 2 * static_cast<size_t>(sh.C) * sizeof(float) : 0;
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (smem > 48 * 1024) {  // above the default limit a kernel must opt in
      ZT_CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
    }
    // About two blocks per SM: enough warps in flight, few shared-to-global flushes.
    const int64_t blocks = std::min<int64_t>(ceil_div(sh.rows, kWarpsPerBlock), 2 * sm_count());
    layernorm_backward_kernel<T><<<static_cast<unsigned>(blocks), kThreads, smem, stream_of(s)>>>(
        ptr<T>(din), with_dweight ? ptr<float>(dweight) : nullptr,
        with_dbias ? ptr<float>(dbias) : nullptr, ptr<const T>(dout), ptr<const T>(in),
        ptr<const T>(weight), ptr<const float>(mean), ptr<const float>(rstd),
        dresidual != nullptr ? ptr<const T>(*dresidual) : nullptr, sh.rows, sh.C);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
