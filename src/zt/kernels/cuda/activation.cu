// CUDA elementwise activations (Activation in kernels/ops.h; contract in kernels/op_table.inc):
// GPT-2's tanh GELU (the same arithmetic as the gelu kernels of cuda/elementwise.cu), BERT's erf
// GELU, ReLU and SiLU, with their exact derivatives. Grid-stride loops over contiguous tensors,
// kV elements per thread (16-byte loads and stores when the size and alignment allow), the
// activation a template argument (no per-element switch), arithmetic in f32, one rounding at the
// store. din may alias dout (each thread reads a chunk before writing it).
#include "zt/kernels/activation_dispatch.h"
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi), the normal density at 0

// 1 / (1 + exp(-x)): for very negative x, expf overflows to inf and the result is 0, not NaN.
__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

template <Activation A>
__device__ __forceinline__ float activation_value(float x) {
  if constexpr (A == Activation::kGeluTanh) {
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  } else if constexpr (A == Activation::kGeluErf) {
    return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  } else if constexpr (A == Activation::kRelu) {
    return x > 0.0f ? x : 0.0f;
  } else if constexpr (A == Activation::kTanh) {
    return tanhf(x);
  } else {
    return x * sigmoid(x);
  }
}

template <Activation A>
__device__ __forceinline__ float activation_derivative(float x) {
  if constexpr (A == Activation::kGeluTanh) {
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float th = tanhf(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
  } else if constexpr (A == Activation::kGeluErf) {
    return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
  } else if constexpr (A == Activation::kRelu) {
    return x > 0.0f ? 1.0f : 0.0f;  // 0 at 0, as torch
  } else if constexpr (A == Activation::kTanh) {
    const float th = tanhf(x);
    return 1.0f - th * th;
  } else {
    const float sg = sigmoid(x);
    return sg * (1.0f + x * (1.0f - sg));
  }
}

#define ZT_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// n_vec = n / kV chunks of kV elements.
template <typename T, Activation A, int kV>
__global__ void activation_forward_kernel(T* out, const T* in, int64_t n_vec) {
  ZT_GRID_STRIDE(i, n_vec) {
    float x[kV];
    load_f32<T, kV>(x, in + i * kV);
#pragma unroll
    for (int k = 0; k < kV; ++k) x[k] = activation_value<A>(x[k]);
    store_from_f32<T, kV>(out + i * kV, x);
  }
}

template <typename T, Activation A, int kV>
__global__ void activation_backward_kernel(T* din, const T* dout, const T* in, int64_t n_vec) {
  ZT_GRID_STRIDE(i, n_vec) {
    float x[kV], g[kV];
    load_f32<T, kV>(x, in + i * kV);
    load_f32<T, kV>(g, dout + i * kV);
#pragma unroll
    for (int k = 0; k < kV; ++k) g[k] *= activation_derivative<A>(x[k]);
    store_from_f32<T, kV>(din + i * kV, g);
  }
}

#undef ZT_GRID_STRIDE

void check_pair(const Tensor& a, const Tensor& b, const char* op, const char* a_name,
                const char* b_name) {
  check_cuda(a, op, a_name);
  check_dtype(b, a.dtype(), op, b_name);
  check_numel(b, a.numel(), op, b_name);
  check_same_device(a, b, op);
}

}  // namespace

void activation_forward(Tensor& out, const Tensor& in, Activation act, const Stream& s) {
  const char* op = "activation_forward";
  check_pair(out, in, op, "out", "in");
  const int64_t n = in.numel();
  if (n == 0) return;
  DeviceGuard guard(in.device());
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_activation(act, op, [&](auto act_tag) {
      constexpr Activation A = decltype(act_tag)::value;
      by_vector_width<T>(
          n,
          [&]<int V>() {
            activation_forward_kernel<T, A, V>
                <<<grid_for(n / V, kThreads), kThreads, 0, stream_of(s)>>>(ptr<T>(out),
                                                                           ptr<const T>(in), n / V);
          },
          ptr<T>(out), ptr<const T>(in));
      ZT_CUDA_CHECK_LAUNCH();
    });
  });
}

void activation_backward(Tensor& din, const Tensor& dout, const Tensor& in, Activation act,
                         const Stream& s) {
  const char* op = "activation_backward";
  check_pair(din, in, op, "din", "in");
  check_pair(din, dout, op, "din", "dout");
  const int64_t n = in.numel();
  if (n == 0) return;
  DeviceGuard guard(in.device());
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_activation(act, op, [&](auto act_tag) {
      constexpr Activation A = decltype(act_tag)::value;
      by_vector_width<T>(
          n,
          [&]<int V>() {
            activation_backward_kernel<T, A, V>
                <<<grid_for(n / V, kThreads), kThreads, 0, stream_of(s)>>>(
                    ptr<T>(din), ptr<const T>(dout), ptr<const T>(in), n / V);
          },
          ptr<T>(din), ptr<const T>(dout), ptr<const T>(in));
      ZT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace zt::kernels::cuda
