// CUDA elementwise ops (contracts in kernels/ops.h): GELU forward/backward, residual and in-place
// add, dtype casts, scaling with the non-finite check of fp16 loss scaling, and the sum of squares
// behind the global gradient norm. Grid-stride loops over contiguous tensors (the residual and
// in-place adds kVec elements per thread when the size and alignment allow); arithmetic in f32
// (f64 for f64 tensors), one rounding at the store. Outputs may alias inputs elementwise (each
// thread reads an element before writing the same element).
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/grad_clip.h"

#include <type_traits>

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

#define ZT_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// f64 keeps its precision; every other dtype computes in f32.
template <typename T>
using arith_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
__device__ __forceinline__ arith_t<T> load_arith(T x) {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    return to_f32(x);
  }
}
template <typename T>
__device__ __forceinline__ T store_arith(arith_t<T> x) {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    return from_f32<T>(x);
  }
}

// Conversions go through f32 unless f64 is involved (then through f64), matching the host's
// convert_host: f64 -> 16-bit rounds to f32 first, as the CPU path does.
template <typename D, typename S>
__device__ __forceinline__ D convert(S x) {
  if constexpr (std::is_same_v<D, S>) {
    return x;
  } else if constexpr (std::is_same_v<D, double>) {
    return static_cast<double>(to_f32(x));  // f32 and 16-bit values are exact in f32
  } else if constexpr (std::is_same_v<S, double>) {
    return from_f32<D>(static_cast<float>(x));
  } else {
    return from_f32<D>(to_f32(x));
  }
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* in, int64_t n) {
  ZT_GRID_STRIDE(i, n) {
    const float x = to_f32(in[i]);
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = from_f32<T>(0.5f * x * (1.0f + tanhf(u)));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* din, const T* dout, const T* in, int64_t n) {
  ZT_GRID_STRIDE(i, n) {
    const float x = to_f32(in[i]);
    const float u = kGeluScale * (x + kGeluCubic * x * x * x);
    const float th = tanhf(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    din[i] = from_f32<T>(to_f32(dout[i]) * grad);
  }
}

// n_vec chunks of kV elements (16-byte loads and stores when kV > 1).
template <typename T, int kV>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n_vec) {
  ZT_GRID_STRIDE(i, n_vec) {
    float x[kV], y[kV];
    load_f32<T, kV>(x, a + i * kV);
    load_f32<T, kV>(y, b + i * kV);
#pragma unroll
    for (int k = 0; k < kV; ++k) x[k] += y[k];
    store_from_f32<T, kV>(out + i * kV, x);
  }
}

template <typename T>
__global__ void add_inplace_kernel(T* out, const T* in, int64_t n) {
  ZT_GRID_STRIDE(i, n) {
    out[i] = store_arith<T>(load_arith(out[i]) + load_arith(in[i]));
  }
}

template <typename D, typename S>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  ZT_GRID_STRIDE(i, n) {
    dst[i] = convert<D>(src[i]);
  }
}

template <typename T>
__global__ void scale_kernel(T* x, float scale, int64_t n) {
  ZT_GRID_STRIDE(i, n) {
    x[i] = store_arith<T>(load_arith(x[i]) * scale);
  }
}

template <typename T>
__global__ void scale_rows_kernel(T* x, const float* scale, int64_t cols, int64_t n) {
  ZT_GRID_STRIDE(i, n) {
    x[i] = store_arith<T>(load_arith(x[i]) * scale[i / cols]);
  }
}

// out = [out +] convert<T>(in) * scale, product and sum each rounded (no fused multiply-add: the
// same bits as cast, scale and add in turn). kV elements a thread (16-byte chunks when kV > 1).
template <typename T, typename S, int kV>
__global__ void add_scaled_kernel(T* out, const S* in, float scale, bool add, int64_t n_vec) {
  ZT_GRID_STRIDE(i, n_vec) {
    T v[kV], o[kV];
    if constexpr (kV > 1) {  // T = S = float: 16-byte chunks
      load_f32<float, kV>(v, in + i * kV);
      if (add) load_f32<float, kV>(o, out + i * kV);
    } else {
      v[0] = convert<T>(in[i]);
      if (add) o[0] = out[i];
    }
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      if constexpr (std::is_same_v<T, double>) {
        const double p = __dmul_rn(v[k], static_cast<double>(scale));
        o[k] = add ? __dadd_rn(o[k], p) : p;
      } else {
        const float p = __fmul_rn(v[k], scale);
        o[k] = add ? __fadd_rn(o[k], p) : p;
      }
    }
    if constexpr (kV > 1) {
      store_from_f32<float, kV>(out + i * kV, o);
    } else {
      out[i] = o[0];
    }
  }
}

__global__ void grad_clip_scale_kernel(float* out, const double* sumsq, double loss_scale,
                                       double max_norm) {
  out[0] = grad_clip_factor(sumsq[0], loss_scale, max_norm);
}

// The check reads the stored (rounded) value: an f16 gradient that overflows when scaled is inf
// in x, and must be reported.
template <typename T>
__global__ void scale_check_nonfinite_kernel(T* x, float scale, float* found, int64_t n) {
  bool bad = false;
  ZT_GRID_STRIDE(i, n) {
    const T y = store_arith<T>(load_arith(x[i]) * scale);
    x[i] = y;
    bad |= !isfinite(load_arith(y));
  }
  if (bad) *found = 1.0f;  // every writer stores the same value; no atomic needed
}

template <typename T>
__global__ void sum_squares_kernel(double* acc, const T* x, int64_t n) {
  __shared__ double scratch[kWarpSize];
  double sum = 0.0;
  ZT_GRID_STRIDE(i, n) {
    const double v = load_arith(x[i]);
    sum += v * v;
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) atomicAdd(acc, sum);
}

#undef ZT_GRID_STRIDE

void check_pair(const Tensor& out, const Tensor& in, const char* op, const char* out_name,
                const char* in_name) {
  check_cuda(out, op, out_name);
  check_dtype(in, out.dtype(), op, in_name);
  check_numel(in, out.numel(), op, in_name);
  check_same_device(out, in, op);
}

}  // namespace

void gelu_forward(Tensor& out, const Tensor& in, const Stream& s) {
  check_pair(out, in, "gelu_forward", "out", "in");
  const int64_t n = in.numel();
  if (n == 0) return;
  DeviceGuard guard(in.device());
  dispatch_compute(in.dtype(), "gelu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_forward_kernel<T>
        <<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(ptr<T>(out), ptr<const T>(in), n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void gelu_backward(Tensor& din, const Tensor& dout, const Tensor& in, const Stream& s) {
  check_pair(din, in, "gelu_backward", "din", "in");
  check_pair(din, dout, "gelu_backward", "din", "dout");
  const int64_t n = in.numel();
  if (n == 0) return;
  DeviceGuard guard(in.device());
  dispatch_compute(in.dtype(), "gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(din), ptr<const T>(dout), ptr<const T>(in), n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void residual_forward(Tensor& out, const Tensor& a, const Tensor& b, const Stream& s) {
  check_pair(out, a, "residual_forward", "out", "a");
  check_pair(out, b, "residual_forward", "out", "b");
  const int64_t n = a.numel();
  if (n == 0) return;
  DeviceGuard guard(a.device());
  dispatch_compute(a.dtype(), "residual_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    by_vector_width<T>(
        n,
        [&]<int V>() {
          residual_forward_kernel<T, V><<<grid_for(n / V, kThreads), kThreads, 0, stream_of(s)>>>(
              ptr<T>(out), ptr<const T>(a), ptr<const T>(b), n / V);
        },
        ptr<T>(out), ptr<const T>(a), ptr<const T>(b));
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void add_inplace(Tensor& out, const Tensor& in, const Stream& s) {
  check_pair(out, in, "add_inplace", "out", "in");
  const int64_t n = in.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device());
  dispatch_float(out.dtype(), "add_inplace", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, double>) {
      add_inplace_kernel<T>
          <<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(ptr<T>(out), ptr<const T>(in), n);
    } else {
      by_vector_width<T>(
          n,
          [&]<int V>() {  // out = out + in: each thread reads its chunk before writing it
            residual_forward_kernel<T, V><<<grid_for(n / V, kThreads), kThreads, 0, stream_of(s)>>>(
                ptr<T>(out), ptr<const T>(out), ptr<const T>(in), n / V);
          },
          ptr<T>(out), ptr<const T>(in));
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void cast(Tensor& dst, const Tensor& src, const Stream& s) {
  check_cuda(dst, "cast", "dst");
  check_cuda(src, "cast", "src");
  check_numel(dst, src.numel(), "cast", "dst");
  check_same_device(dst, src, "cast");
  const int64_t n = src.numel();
  if (n == 0) return;
  DeviceGuard guard(src.device());
  dispatch_float(dst.dtype(), "cast", [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch_float(src.dtype(), "cast", [&](auto stag) {
      using S = typename decltype(stag)::type;
      cast_kernel<D, S>
          <<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(ptr<D>(dst), ptr<const S>(src), n);
      ZT_CUDA_CHECK_LAUNCH();
    });
  });
}

void scale_inplace(Tensor& x, float scale, const Stream& s) {
  check_cuda(x, "scale_inplace", "x");
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "scale_inplace", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(ptr<T>(x), scale, n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void scale_rows(Tensor& x, const Tensor& scale, const Stream& s) {
  check_cuda(x, "scale_rows", "x");
  check_cuda(scale, "scale_rows", "scale");
  check_same_device(x, scale, "scale_rows");
  ZT_ASSERT(x.ndim() >= 1 && scale.dtype() == DType::f32 && scale.numel() == x.size(0),
            "scale_rows: scale {} {} must be ({}) f32, one per row of x {}", scale.shape().str(),
            dtype_name(scale.dtype()), x.ndim() >= 1 ? x.size(0) : 0, x.shape().str());
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "scale_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_rows_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(x), ptr<const float>(scale), n / x.size(0), n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void add_scaled(Tensor& out, const Tensor& in, float scale, Accumulate mode, const Stream& s) {
  check_cuda(out, "add_scaled", "out");
  check_cuda(in, "add_scaled", "in");
  check_numel(out, in.numel(), "add_scaled", "out");
  check_same_device(out, in, "add_scaled");
  ZT_ASSERT(out.dtype() == DType::f32 || out.dtype() == DType::f64,
            "add_scaled: out must be f32 or f64, not {}", dtype_name(out.dtype()));
  const int64_t n = in.numel();
  if (n == 0) return;
  const bool add = mode == Accumulate::kAdd;
  DeviceGuard guard(out.device());
  dispatch_float(out.dtype(), "add_scaled", [&](auto otag) {
    using T = typename decltype(otag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    dispatch_float(in.dtype(), "add_scaled", [&](auto itag) {
      using S = typename decltype(itag)::type;
      if constexpr (std::is_same_v<T, float> && std::is_same_v<S, float>) {
        if (n % 4 == 0 && vec16_aligned(ptr<const float>(out), ptr<const float>(in))) {
          add_scaled_kernel<float, float, 4>
              <<<grid_for(n / 4, kThreads), kThreads, 0, stream_of(s)>>>(
                  ptr<float>(out), ptr<const float>(in), scale, add, n / 4);
          ZT_CUDA_CHECK_LAUNCH();
          return;
        }
      }
      add_scaled_kernel<T, S, 1><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
          ptr<T>(out), ptr<const S>(in), scale, add, n);
      ZT_CUDA_CHECK_LAUNCH();
    });
    }
  });
}

void scale_check_nonfinite(Tensor& x, float scale, Tensor& found_nonfinite, const Stream& s) {
  check_cuda(x, "scale_check_nonfinite", "x");
  check_dtype(found_nonfinite, DType::f32, "scale_check_nonfinite", "found_nonfinite");
  check_numel(found_nonfinite, 1, "scale_check_nonfinite", "found_nonfinite");
  check_same_device(x, found_nonfinite, "scale_check_nonfinite");
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "scale_check_nonfinite", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_check_nonfinite_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(x), scale, ptr<float>(found_nonfinite), n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void sum_squares_accumulate(Tensor& acc, const Tensor& x, const Stream& s) {
  check_cuda(x, "sum_squares_accumulate", "x");
  check_dtype(acc, DType::f64, "sum_squares_accumulate", "acc");
  check_numel(acc, 1, "sum_squares_accumulate", "acc");
  check_same_device(x, acc, "sum_squares_accumulate");
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "sum_squares_accumulate", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Few blocks: each ends in one double atomic on the same address.
    sum_squares_kernel<T><<<grid_for(n, kThreads, 1024), kThreads, 0, stream_of(s)>>>(
        ptr<double>(acc), ptr<const T>(x), n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void grad_clip_scale(Tensor& out, const Tensor& sumsq, double loss_scale, double max_norm,
                     const Stream& s) {
  check_cuda(out, "grad_clip_scale", "out");
  check_dtype(out, DType::f32, "grad_clip_scale", "out");
  check_numel(out, 1, "grad_clip_scale", "out");
  check_dtype(sumsq, DType::f64, "grad_clip_scale", "sumsq");
  check_numel(sumsq, 1, "grad_clip_scale", "sumsq");
  check_same_device(out, sumsq, "grad_clip_scale");
  DeviceGuard guard(out.device());
  grad_clip_scale_kernel<<<1, 1, 0, stream_of(s)>>>(ptr<float>(out), ptr<const double>(sumsq),
                                                     loss_scale, max_norm);
  ZT_CUDA_CHECK_LAUNCH();
}

}  // namespace zt::kernels::cuda
