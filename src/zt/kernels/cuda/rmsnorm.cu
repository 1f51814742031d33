// CUDA RMSNorm forward/backward over the last dimension C (contract in kernels/op_table.inc), as
// the CPU reference: rstd = 1 / sqrt(mean(x^2) + eps), out = weight * (x * rstd). One warp per
// row; statistics and the parameter gradient in f32. The forward rounds x * rstd to the compute
// dtype before multiplying by the weight, as transformers' LlamaRMSNorm does
// (`weight * hidden.to(input_dtype)`), so bf16 outputs match it; the backward differentiates the
// unrounded function in f32. Backward: each block sums its rows' dweight contributions in shared
// memory, then adds them to the f32 gradient with one atomic per column (dweight +=); an undefined
// dweight (a frozen weight) is not computed, and the kernel then uses no shared memory.
// din may alias dout or dresidual: each lane reads an element before it writes the same element.
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps, 8 rows at a time per block
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

// x rounded to T and back (a no-op for f32).
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* in, const T* weight, float eps,
                                       int64_t rows, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  const T* x = in + row * C;
  float sum_sq = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float v = to_f32(x[c]);
    sum_sq += v * v;
  }
  const float r = rsqrtf(warp_sum(sum_sq) / static_cast<float>(C) + eps);
  T* o = out + row * C;
  for (int c = lane; c < C; c += kWarpSize) {
    o[c] = from_f32<T>(to_f32(weight[c]) * round_to<T>(to_f32(x[c]) * r));
  }
  if (lane == 0) rstd[row] = r;
}

// din = rstd (dnorm - norm mean(dnorm norm)) [+ dresidual], dnorm = weight dout, norm = x rstd.
// Shared memory: the block's dweight partial sums, C floats; none when dweight is null (not
// computed).
template <typename T>
__global__ void rmsnorm_backward_kernel(T* din, float* dweight, const T* dout, const T* in,
                                        const T* weight, const float* rstd, const T* dresidual,
                                        int64_t rows, int C) {
  extern __shared__ float s_dw[];
  if (dweight != nullptr) {
    for (int c = threadIdx.x; c < C; c += blockDim.x) s_dw[c] = 0.0f;
    __syncthreads();
  }

  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps_total = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
       row < rows; row += warps_total) {
    const T* g = dout + row * C;
    const T* x = in + row * C;
    const float r = rstd[row];
    float sum_dnorm_norm = 0.0f;
    for (int c = lane; c < C; c += kWarpSize) {
      sum_dnorm_norm += to_f32(weight[c]) * to_f32(g[c]) * to_f32(x[c]) * r;
    }
    const float mean_dnorm_norm = warp_sum(sum_dnorm_norm) / static_cast<float>(C);
    T* d = din + row * C;
    const T* dres = dresidual != nullptr ? dresidual + row * C : nullptr;
    for (int c = lane; c < C; c += kWarpSize) {
      const float gc = to_f32(g[c]);
      const float norm = to_f32(x[c]) * r;
      float v = (to_f32(weight[c]) * gc - norm * mean_dnorm_norm) * r;
      if (dres != nullptr) v += to_f32(dres[c]);
      d[c] = from_f32<T>(v);
      if (dweight != nullptr) atomicAdd(s_dw + c, gc * norm);
    }
  }
  if (dweight == nullptr) return;
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(dweight + c, s_dw[c]);
}

int sm_count() {
  int device = 0;
  int n = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  ZT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

struct RmsShape {
  int64_t rows;
  int C;
};

// Rows and C of an RMSNorm call; checks in and weight.
RmsShape rmsnorm_shape(const Tensor& in, const Tensor& weight, const char* op) {
  check_cuda(in, op, "in");
  check_dtype(weight, in.dtype(), op, "weight");
  check_same_device(in, weight, op);
  const int64_t C = weight.numel();
  ZT_ASSERT(C > 0 && in.ndim() >= 1 && in.size(-1) == C && in.numel() % C == 0,
            "{}: in {} does not end in the normalised dimension C = {}", op, in.shape().str(), C);
  ZT_ASSERT(C < (int64_t{1} << 30), "{}: C = {} is too large", op, C);
  return {in.numel() / C, static_cast<int>(C)};
}

}  // namespace

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& in, const Tensor& weight, float eps,
                     const Stream& s) {
  const char* op = "rmsnorm_forward";
  const RmsShape sh = rmsnorm_shape(in, weight, op);
  check_dtype(out, in.dtype(), op, "out");
  check_numel(out, in.numel(), op, "out");
  check_dtype(rstd, DType::f32, op, "rstd");
  check_numel(rstd, sh.rows, op, "rstd");
  ZT_ASSERT(eps >= 0.0f, "{}: eps {} is negative", op, eps);
  if (sh.rows == 0) return;
  DeviceGuard guard(in.device());
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const unsigned grid = static_cast<unsigned>(ceil_div(sh.rows, kWarpsPerBlock));
    rmsnorm_forward_kernel<T><<<grid, kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<float>(rstd), ptr<const T>(in), ptr<const T>(weight), eps, sh.rows, sh.C);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void rmsnorm_backward(Tensor& din, Tensor& dweight, const Tensor& dout, const Tensor& in,
                      const Tensor& weight, const Tensor& rstd, const Tensor* dresidual,
                      const Stream& s) {
  const char* op = "rmsnorm_backward";
  const RmsShape sh = rmsnorm_shape(in, weight, op);
  check_dtype(din, in.dtype(), op, "din");
  check_numel(din, in.numel(), op, "din");
  check_dtype(dout, in.dtype(), op, "dout");
  check_numel(dout, in.numel(), op, "dout");
  // An undefined dweight is a frozen weight: its gradient is not computed.
  const bool with_dweight = dweight.defined();
  if (with_dweight) {
    check_dtype(dweight, DType::f32, op, "dweight");
    check_numel(dweight, sh.C, op, "dweight");
  }
  check_dtype(rstd, DType::f32, op, "rstd");
  check_numel(rstd, sh.rows, op, "rstd");
  if (dresidual != nullptr) {
    check_dtype(*dresidual, in.dtype(), op, "dresidual");
    check_numel(*dresidual, in.numel(), op, "dresidual");
  }
  if (sh.rows == 0) return;
  DeviceGuard guard(in.device());
  const size_t smem = with_dweight ? static_cast<size_t>(sh.C) * sizeof(float) : 0;
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (smem > 48 * 1024) {  // above the default limit a kernel must opt in
      ZT_CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_backward_kernel<T>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
    }
    // About two blocks per SM: enough warps in flight, few shared-to-global flushes.
    const int64_t blocks = std::min<int64_t>(ceil_div(sh.rows, kWarpsPerBlock), 2 * sm_count());
    rmsnorm_backward_kernel<T><<<static_cast<unsigned>(blocks), kThreads, smem, stream_of(s)>>>(
        ptr<T>(din), with_dweight ? ptr<float>(dweight) : nullptr, ptr<const T>(dout),
        ptr<const T>(in), ptr<const T>(weight), ptr<const float>(rstd),
        dresidual != nullptr ? ptr<const T>(*dresidual) : nullptr, sh.rows, sh.C);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
