// CUDA SwiGLU, Llama's MLP nonlinearity (contract in kernels/op_table.inc): per row
// [gate (F) | up (F)] -> silu(gate) * up. One thread per chunk of a row's features (eight bf16
// values through 16-byte loads and stores, or one when F or the alignment does not allow it) in a
// grid-stride loop; arithmetic in f32, one rounding at the store. dgate_up may alias gate_up: a thread reads its
// gate and up values before writing their gradients.
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

#define ZT_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// 1 / (1 + exp(-x)): for very negative x, expf overflows to inf and the result is 0, not NaN.
__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Each thread handles kV consecutive features of one row (kV = kVec<T> with 16-byte loads when
// F is a multiple of it and the tensors are aligned, else 1): i indexes those chunks.
template <typename T, int kV>
__global__ void swiglu_forward_kernel(T* out, const T* gate_up, int64_t chunks, int64_t F) {
  const int64_t per_row = F / kV;
  ZT_GRID_STRIDE(i, chunks) {
    const int64_t row = i / per_row;
    const int64_t f = (i - row * per_row) * kV;
    const T* gp = gate_up + row * 2 * F + f;
    T* op = out + row * F + f;
    float x[kV], u[kV], o[kV];
    load_f32<T, kV>(x, gp);
    load_f32<T, kV>(u, gp + F);
#pragma unroll
    for (int k = 0; k < kV; ++k) o[k] = x[k] * sigmoid(x[k]) * u[k];
    store_from_f32<T, kV>(op, o);
  }
}

template <typename T, int kV>
__global__ void swiglu_backward_kernel(T* dgate_up, const T* dout, const T* gate_up,
                                       int64_t chunks, int64_t F) {
  const int64_t per_row = F / kV;
  ZT_GRID_STRIDE(i, chunks) {
    const int64_t row = i / per_row;
    const int64_t f = (i - row * per_row) * kV;
    const int64_t gi = row * 2 * F + f;
    // Everything is read before anything is written: dgate_up may alias gate_up.
    float x[kV], u[kV], g[kV], dx[kV], du[kV];
    load_f32<T, kV>(x, gate_up + gi);
    load_f32<T, kV>(u, gate_up + gi + F);
    load_f32<T, kV>(g, dout + row * F + f);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const float sg = sigmoid(x[k]);
      dx[k] = g[k] * u[k] * sg * (1.0f + x[k] * (1.0f - sg));
      du[k] = g[k] * x[k] * sg;
    }
    store_from_f32<T, kV>(dgate_up + gi, dx);
    store_from_f32<T, kV>(dgate_up + gi + F, du);
  }
}

#undef ZT_GRID_STRIDE

// F (the width of `half`) after checking gate_up (..., 2F) against half (..., F).
int64_t swiglu_width(const Tensor& gate_up, const Tensor& half, const char* op,
                     const char* half_name) {
  check_cuda(gate_up, op, "gate_up");
  check_dtype(half, gate_up.dtype(), op, half_name);
  check_same_device(gate_up, half, op);
  ZT_ASSERT(gate_up.ndim() >= 1 && half.ndim() >= 1 && gate_up.size(-1) % 2 == 0 &&
                half.size(-1) * 2 == gate_up.size(-1) && half.numel() * 2 == gate_up.numel(),
            "{}: gate_up {} must be (N, 2F) with {} {} (N, F)", op, gate_up.shape().str(),
            half_name, half.shape().str());
  return half.size(-1);
}

}  // namespace

void swiglu_forward(Tensor& out, const Tensor& gate_up, const Stream& s) {
  const char* op = "swiglu_forward";
  const int64_t F = swiglu_width(gate_up, out, op, "out");
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(gate_up.device());
  dispatch_compute(gate_up.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kV = kVec<T>;
    if (F % kV == 0 && vec16_aligned(ptr<T>(out), ptr<const T>(gate_up))) {
      swiglu_forward_kernel<T, kV><<<grid_for(n / kV, kThreads), kThreads, 0, stream_of(s)>>>(
          ptr<T>(out), ptr<const T>(gate_up), n / kV, F);
    } else {
      swiglu_forward_kernel<T, 1><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
          ptr<T>(out), ptr<const T>(gate_up), n, F);
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void swiglu_backward(Tensor& dgate_up, const Tensor& dout, const Tensor& gate_up, const Stream& s) {
  const char* op = "swiglu_backward";
  const int64_t F = swiglu_width(gate_up, dout, op, "dout");
  check_dtype(dgate_up, gate_up.dtype(), op, "dgate_up");
  check_numel(dgate_up, gate_up.numel(), op, "dgate_up");
  check_same_device(gate_up, dgate_up, op);
  const int64_t n = dout.numel();
  if (n == 0) return;
  DeviceGuard guard(gate_up.device());
  dispatch_compute(gate_up.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kV = kVec<T>;
    if (F % kV == 0 && vec16_aligned(ptr<T>(dgate_up), ptr<const T>(dout), ptr<const T>(gate_up))) {
      swiglu_backward_kernel<T, kV><<<grid_for(n / kV, kThreads), kThreads, 0, stream_of(s)>>>(
          ptr<T>(dgate_up), ptr<const T>(dout), ptr<const T>(gate_up), n / kV, F);
    } else {
      swiglu_backward_kernel<T, 1><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
          ptr<T>(dgate_up), ptr<const T>(dout), ptr<const T>(gate_up), n, F);
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
