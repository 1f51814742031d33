// CPU reference of 2-D max pooling (contract in kernels/conv_ops.h), written as PyTorch's CPU
// kernel decides ties and NaNs so that the indices agree with torch's: a window starts with
// max -inf at its first element inside the input, and an element replaces the max when it is
// greater or NaN. So the first maximum in row-major order wins, a NaN wins over numbers, and a
// window of -inf keeps its first element. Assumes contiguous CPU tensors, f32 or f64.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels {

Result<Shape> maxpool2d_out_shape(const Shape& in, const Pool2dArgs& args) {
  if (in.ndim() != 4) return invalid_argument("maxpool2d: input {} must be (N,C,H,W)", in.str());
  if (args.kernel_h < 1 || args.kernel_w < 1 || args.stride_h < 1 || args.stride_w < 1) {
    return invalid_argument("maxpool2d: kernel ({}, {}) and stride ({}, {}) must be >= 1",
                            args.kernel_h, args.kernel_w, args.stride_h, args.stride_w);
  }
  // torch's rule: with more padding a window could lie wholly in the padding and have no max.
  if (args.pad_h < 0 || args.pad_w < 0 || 2 * args.pad_h > args.kernel_h ||
      2 * args.pad_w > args.kernel_w) {
    return invalid_argument(
        "maxpool2d: padding ({}, {}) must be >= 0 and at most half the kernel ({}, {})",
        args.pad_h, args.pad_w, args.kernel_h, args.kernel_w);
  }
  const int64_t P = window_out_size(in[2], args.kernel_h, args.stride_h, args.pad_h);
  const int64_t Q = window_out_size(in[3], args.kernel_w, args.stride_w, args.pad_w);
  if (P < 1 || Q < 1) {
    return invalid_argument("maxpool2d: input {} padded by ({}, {}) is smaller than the {}x{} window",
                            in.str(), args.pad_h, args.pad_w, args.kernel_h, args.kernel_w);
  }
  return Shape{in[0], in[1], P, Q};
}

}  // namespace zt::kernels

namespace zt::kernels::cpu {
namespace {

constexpr int64_t kParallelMinWork = int64_t{1} << 15;

template <typename T>
void maxpool2d_forward_impl(T* out, int32_t* indices, const T* in, int64_t planes, int64_t H,
                            int64_t W, int64_t P, int64_t Q, const Pool2dArgs& a) {
#pragma omp parallel for if (parallel : planes * P * Q * a.kernel_h * a.kernel_w >= \
                                            kParallelMinWork)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* src = in + plane * H * W;
    T* o = out + plane * P * Q;
    int32_t* idx = indices + plane * P * Q;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t h_first = p * a.stride_h - a.pad_h;
      const int64_t h0 = std::max<int64_t>(h_first, 0);
      const int64_t h1 = std::min(h_first + a.kernel_h, H);
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t w_first = q * a.stride_w - a.pad_w;
        const int64_t w0 = std::max<int64_t>(w_first, 0);
        const int64_t w1 = std::min(w_first + a.kernel_w, W);
        T best = -std::numeric_limits<T>::infinity();
        int64_t best_index = h0 * W + w0;
        for (int64_t h = h0; h < h1; ++h) {
          for (int64_t w = w0; w < w1; ++w) {
            const T v = src[h * W + w];
            if (v > best || std::isnan(v)) {
              best = v;
              best_index = h * W + w;
            }
          }
        }
        o[p * Q + q] = best;
        idx[p * Q + q] = static_cast<int32_t>(best_index);
      }
    }
  }
}

template <typename T>
void maxpool2d_backward_impl(T* din, const T* dout, const int32_t* indices, int64_t planes,
                             int64_t HW, int64_t PQ) {
#pragma omp parallel for if (parallel : planes * (HW + PQ) >= kParallelMinWork)
  for (int64_t plane = 0; plane < planes; ++plane) {
    T* d = din + plane * HW;
    std::fill(d, d + HW, T{0});
    const T* g = dout + plane * PQ;
    const int32_t* idx = indices + plane * PQ;
    for (int64_t i = 0; i < PQ; ++i) {
      ZT_ASSERT(idx[i] >= 0 && idx[i] < HW, "maxpool2d_backward: index {} outside a plane of {}",
                idx[i], HW);
      d[idx[i]] += g[i];
    }
  }
}

}  // namespace

void maxpool2d_forward(Tensor& out, Tensor& indices, const Tensor& in, const Pool2dArgs& args,
                       const Stream& s) {
  const char* op = "maxpool2d_forward";
  ZT_ASSERT(out.device().is_cpu() && indices.device().is_cpu() && in.device().is_cpu(),
            "{} (cpu): all tensors must be on the CPU", op);
  Result<Shape> expected = maxpool2d_out_shape(in.shape(), args);
  ZT_ASSERT(expected.is_ok(), "{}: {}", op, expected.status().message());
  ZT_ASSERT(out.shape() == *expected && indices.shape() == *expected,
            "{}: out {} and indices {} must be {} for input {}", op, out.shape().str(),
            indices.shape().str(), expected->str(), in.shape().str());
  ZT_ASSERT(in.size(2) * in.size(3) <= std::numeric_limits<int32_t>::max(),
            "{}: a plane of input {} is too large for i32 indices", op, in.shape().str());
  const DType dt = in.dtype();
  ZT_ASSERT((dt == DType::f32 || dt == DType::f64) && out.dtype() == dt &&
                indices.dtype() == DType::i32,
            "{}: in {} and out {} must be f32 or f64 alike, indices {} i32", op, dtype_name(dt),
            dtype_name(out.dtype()), dtype_name(indices.dtype()));
  const int64_t planes = in.size(0) * in.size(1);
  const int64_t H = in.size(2), W = in.size(3), P = out.size(2), Q = out.size(3);
  if (dt == DType::f32) {
    maxpool2d_forward_impl(out.data<float>(), indices.data<int32_t>(), in.data<float>(), planes,
                           H, W, P, Q, args);
  } else {
    maxpool2d_forward_impl(out.data<double>(), indices.data<int32_t>(), in.data<double>(),
                           planes, H, W, P, Q, args);
  }
}

void maxpool2d_backward(Tensor& din, const Tensor& dout, const Tensor& indices, const Stream& s) {
  const char* op = "maxpool2d_backward";
  ZT_ASSERT(din.device().is_cpu() && dout.device().is_cpu() && indices.device().is_cpu(),
            "{} (cpu): all tensors must be on the CPU", op);
  ZT_ASSERT(din.ndim() == 4 && dout.ndim() == 4 && indices.shape() == dout.shape() &&
                din.size(0) == dout.size(0) && din.size(1) == dout.size(1),
            "{}: din {} must be (N,C,H,W) and dout {} and indices {} (N,C,P,Q)", op,
            din.shape().str(), dout.shape().str(), indices.shape().str());
  const DType dt = din.dtype();
  ZT_ASSERT((dt == DType::f32 || dt == DType::f64) && dout.dtype() == dt &&
                indices.dtype() == DType::i32,
            "{}: din {} and dout {} must be f32 or f64 alike, indices {} i32", op, dtype_name(dt),
            dtype_name(dout.dtype()), dtype_name(indices.dtype()));
  const int64_t planes = din.size(0) * din.size(1);
  const int64_t HW = din.size(2) * din.size(3), PQ = dout.size(2) * dout.size(3);
  if (dt == DType::f32) {
    maxpool2d_backward_impl(din.data<float>(), dout.data<float>(), indices.data<int32_t>(),
                            planes, HW, PQ);
  } else {
    maxpool2d_backward_impl(din.data<double>(), dout.data<double>(), indices.data<int32_t>(),
                            planes, HW, PQ);
  }
}

}  // namespace zt::kernels::cpu
