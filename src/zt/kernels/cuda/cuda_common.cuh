// Shared pieces of the CUDA kernels (kernels/cuda/*.cu): element types and their conversions to
// and from f32, warp and block reductions, dtype dispatch over the compute dtypes, a device guard,
// and the argument checks the ops share. Every kernel computes in f32 whatever it loads and
// rounds once when it stores. Assumes contiguous tensors (core/tensor.h has no strides).
// Include it first in every .cu file (see the fmt note below).
#pragma once

// fmt 9 turns its constexpr support off when it sees nvcc, which leaves functions it declares
// constexpr calling non-constexpr helpers, and g++ -std=c++20 rejects the host pass. nvcc 13
// handles fmt's constexpr code, so turn it back on, as it is in the .cc files. This must come
// before anything includes fmt (core headers do); the build should also pass it for CUDA files.
#if defined(__CUDACC__) && !defined(FMT_USE_CONSTEXPR)
#define FMT_USE_CONSTEXPR 1
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "zt/core/cuda/cuda_check.h"
#include "zt/core/tensor.h"

namespace zt::kernels::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

constexpr int kWarpSize = 32;

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Blocks for a grid-stride loop over n elements: enough to fill the GPU several times over, never
// more than the work needs.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 4096) {
  int64_t b = ceil_div(n, threads);
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

// Streaming multiprocessors of the current device (asked once per device).
int sm_count();

inline cudaStream_t stream_of(const Stream& s) {
  return static_cast<cudaStream_t>(s.handle());
}

// Makes `d` the current device for the lifetime of the guard (kernels launch on the current
// device; the stream and the tensors must belong to it), restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device d) {
    ZT_CUDA_CHECK(cudaGetDevice(&prev_));
    if (d.is_cuda() && d.index != prev_) ZT_CUDA_CHECK(cudaSetDevice(d.index));
    set_ = d.is_cuda() && d.index != prev_;
  }
  ~DeviceGuard() {
    if (set_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool set_ = false;
};

// ---- element conversions (f32 is the arithmetic type of every kernel)
__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(double x) {
  return static_cast<float>(x);
}
__device__ __forceinline__ float to_f32(bf16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(f16 x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ double from_f32<double>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ f16 from_f32<f16>(float x) {
  return __float2half_rn(x);
}

// ---- 16-byte vectors: kVec<T> elements of T moved by one 128-bit load or store. Kernels that
// stream rows use them when the row length is a multiple of kVec<T> and the pointers are
// 16-byte aligned (vec16_ok), and fall back to one element at a time otherwise.
template <typename T>
inline constexpr int kVec = 16 / static_cast<int>(sizeof(T));
template <typename T>
struct alignas(16) Vec16 {
  T v[kVec<T>];
};
template <typename T>
__device__ __forceinline__ Vec16<T> load16(const T* p) {
  return *reinterpret_cast<const Vec16<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store16(T* p, const Vec16<T>& v) {
  *reinterpret_cast<Vec16<T>*>(p) = v;
}
// kV consecutive elements at p (one 16-byte load when kV > 1) as floats.
template <typename T, int kV>
__device__ __forceinline__ void load_f32(float (&out)[kV], const T* p) {
  if constexpr (kV > 1) {
    const Vec16<T> v = load16(p);
#pragma unroll
    for (int k = 0; k < kV; ++k) out[k] = to_f32(v.v[k]);
  } else {
    out[0] = to_f32(p[0]);
  }
}
// The same from p, or zeros when p is null (an optional operand, such as a residual gradient).
template <typename T, int kV>
__device__ __forceinline__ void load_f32_or_zero(float (&out)[kV], const T* p) {
  if (p != nullptr) {
    load_f32<T, kV>(out, p);
  } else {
#pragma unroll
    for (int k = 0; k < kV; ++k) out[k] = 0.0f;
  }
}
template <typename T, int kV>
__device__ __forceinline__ void store_from_f32(T* p, const float (&in)[kV]) {
  if constexpr (kV > 1) {
    Vec16<T> v;
#pragma unroll
    for (int k = 0; k < kV; ++k) v.v[k] = from_f32<T>(in[k]);
    store16(p, v);
  } else {
    p[0] = from_f32<T>(in[0]);
  }
}

// Whether every pointer is 16-byte aligned (null pointers count as aligned).
template <typename... P>
inline bool vec16_aligned(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

// Calls f.template operator()<V>() with V = kVec<T> when n elements and every pointer allow
// 16-byte chunks, else V = 1: the vector width of an elementwise kernel over n elements.
template <typename T, typename F, typename... P>
void by_vector_width(int64_t n, F&& f, const P*... p) {
  if (n % kVec<T> == 0 && vec16_aligned(p...)) {
    f.template operator()<kVec<T>>();
  } else {
    f.template operator()<1>();
  }
}

// ---- reductions. Every lane of the warp (every thread of the block) gets the result.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum; blockDim.x must be a multiple of 32 (at most 1024) and every thread must call
// it. `scratch` holds 32 values; the trailing barrier lets the caller reuse it at once.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < warps ? scratch[lane] : T{0};
  r = warp_sum(r);
  __syncthreads();
  return r;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();
  return r;
}

// ---- dtype dispatch: calls f(TypeTag<T>{}) with T the CUDA element type of `d`.
template <typename T>
struct TypeTag {
  using type = T;
};

// The compute dtypes of CUDA ops (kernels/ops.h): f32, bf16, f16.
template <typename F>
void dispatch_compute(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::f32:
      f(TypeTag<float>{});
      return;
    case DType::bf16:
      f(TypeTag<bf16>{});
      return;
    case DType::f16:
      f(TypeTag<f16>{});
      return;
    default:
      break;
  }
  ZT_ASSERT(false, "{}: compute dtype {} is not supported on CUDA (f32, bf16, f16)", op,
            dtype_name(d));
}

// Every float dtype, f64 included (cast, sum of squares).
template <typename F>
void dispatch_float(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::f32:
      f(TypeTag<float>{});
      return;
    case DType::bf16:
      f(TypeTag<bf16>{});
      return;
    case DType::f16:
      f(TypeTag<f16>{});
      return;
    case DType::f64:
      f(TypeTag<double>{});
      return;
    default:
      break;
  }
  ZT_ASSERT(false, "{}: dtype {} is not a float dtype", op, dtype_name(d));
}

// ---- argument checks shared by the ops (broken invariants of the calling layer).
inline void check_cuda(const Tensor& t, const char* op, const char* name) {
  ZT_ASSERT(t.defined() && t.device().is_cuda(), "{}: {} must be a defined CUDA tensor", op, name);
}
inline void check_dtype(const Tensor& t, DType d, const char* op, const char* name) {
  check_cuda(t, op, name);
  ZT_ASSERT(t.dtype() == d, "{}: {} is {}, expected {}", op, name, dtype_name(t.dtype()),
            dtype_name(d));
}
inline void check_numel(const Tensor& t, int64_t n, const char* op, const char* name) {
  ZT_ASSERT(t.numel() == n, "{}: {} has {} elements {}, expected {}", op, name, t.numel(),
            t.shape().str(), n);
}
inline void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  ZT_ASSERT(a.device() == b.device(), "{}: tensors on {} and {}", op, a.device().str(),
            b.device().str());
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

}  // namespace zt::kernels::cuda
