// CPU reference of the 2-D convolution (contract in kernels/conv_ops.h), as a matmul over
// unfolded patches ("im2row"): for a group of G images, col (G*P*Q, C*R*S) holds in row
// (n, p, q) the input patch under output position (p, q) of image n, zeros where the window
// hangs over the padding. Then
//   forward:  rows (G*P*Q, K) = col @ weight^T (weight viewed as (K, C*R*S)), permuted to NCHW;
//   backward: drows = dout permuted to (G*P*Q, K); dweight += drows^T @ col;
//             dcol = drows @ weight, folded back (scatter-add) into din; dbias += column sums.
// exactly matmul_forward/backward's products (kernels/cpu/matmul.cc), through OpenBLAS. One GEMM
// per group rather than per image keeps BLAS busy on the small feature maps of CIFAR-sized
// networks (AlexNet's later layers are 2x2); groups bound the column buffer's memory.
// Assumes contiguous CPU tensors, f32 or f64, dimensions that fit BLAS's 32-bit int.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "zt/kernels/cpu/blas_gemm.h"
#include "zt/kernels/cpu/cpu_ops.h"
#include "zt/kernels/ops.h"

namespace zt::kernels {

Result<Shape> conv2d_out_shape(const Shape& in, const Shape& weight, const Conv2dArgs& args) {
  if (in.ndim() != 4 || weight.ndim() != 4) {
    return invalid_argument("conv2d: input {} must be (N,C,H,W) and weight {} (K,C,R,S)",
                            in.str(), weight.str());
  }
  if (in[1] != weight[1]) {
    return invalid_argument("conv2d: input {} has {} channels, weight {} expects {}", in.str(),
                            in[1], weight.str(), weight[1]);
  }
  if (args.stride_h < 1 || args.stride_w < 1 || args.pad_h < 0 || args.pad_w < 0) {
    return invalid_argument("conv2d: stride ({}, {}) must be >= 1 and padding ({}, {}) >= 0",
                            args.stride_h, args.stride_w, args.pad_h, args.pad_w);
  }
  const int64_t P = window_out_size(in[2], weight[2], args.stride_h, args.pad_h);
  const int64_t Q = window_out_size(in[3], weight[3], args.stride_w, args.pad_w);
  if (P < 1 || Q < 1) {
    return invalid_argument(
        "conv2d: input {} padded by ({}, {}) is smaller than the {}x{} kernel of weight {}",
        in.str(), args.pad_h, args.pad_w, weight[2], weight[3], weight.str());
  }
  return Shape{in[0], weight[0], P, Q};
}

}  // namespace zt::kernels

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread, as in the other CPU
// ops: waking the OpenMP team costs more than it saves on the tiny tensors of tests.
constexpr int64_t kParallelMinWork = int64_t{1} << 15;
// Elements of the column buffer per group of images (32 MiB of f32): large enough that a
// CIFAR batch is one GEMM, small enough that a 224x224 network does not double its memory.
constexpr int64_t kColBudget = int64_t{8} << 20;

struct ConvDims {
  int64_t N, C, H, W;  // input
  int64_t K, R, S;     // weight (K, C, R, S)
  int64_t P, Q;        // output
  int64_t sh, sw, ph, pw;
  int64_t CRS() const { return C * R * S; }
  int64_t PQ() const { return P * Q; }
  // Images per GEMM: as many as fit kColBudget column elements, at least one.
  int64_t group() const {
    const int64_t per_image = std::max<int64_t>(PQ() * CRS(), 1);
    return std::clamp<int64_t>(kColBudget / per_image, 1, std::max<int64_t>(N, 1));
  }
};

// Reads the dimensions, asserting that in, weight and out (or dout) agree.
ConvDims conv_dims(const Tensor& in, const Tensor& weight, const Tensor& out,
                   const Conv2dArgs& args, const char* op, const char* out_name) {
  Result<Shape> expected = conv2d_out_shape(in.shape(), weight.shape(), args);
  ZT_ASSERT(expected.is_ok(), "{}: {}", op, expected.status().message());
  ZT_ASSERT(out.shape() == *expected, "{}: {} {} is not {} for input {} and weight {}", op,
            out_name, out.shape().str(), expected->str(), in.shape().str(),
            weight.shape().str());
  ConvDims d{in.size(0),     in.size(1),    in.size(2),    in.size(3),    weight.size(0),
             weight.size(2), weight.size(3), out.size(2),  out.size(3),   args.stride_h,
             args.stride_w,  args.pad_h,    args.pad_w};
  constexpr int64_t kMax = std::numeric_limits<blasint>::max();
  ZT_ASSERT(d.group() * d.PQ() <= kMax && d.CRS() <= kMax && d.K <= kMax,
            "{}: input {} and weight {} exceed BLAS int", op, in.shape().str(),
            weight.shape().str());
  return d;
}

// col (G*P*Q, C*R*S) from images [n0, n0 + G) of in; rows of positions in the padding are 0.
template <typename T>
void im2row(T* col, const T* in, int64_t n0, int64_t G, const ConvDims& d) {
  const int64_t rows = G * d.PQ(), crs = d.CRS();
#pragma omp parallel for if (parallel : rows * crs >= kParallelMinWork)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t n = n0 + row / d.PQ();
    const int64_t p = (row / d.Q) % d.P, q = row % d.Q;
    T* dst = col + row * crs;
    for (int64_t c = 0; c < d.C; ++c) {
      const T* plane = in + (n * d.C + c) * d.H * d.W;
      for (int64_t r = 0; r < d.R; ++r) {
        const int64_t h = p * d.sh - d.ph + r;
        const bool row_inside = h >= 0 && h < d.H;
        for (int64_t s = 0; s < d.S; ++s) {
          const int64_t w = q * d.sw - d.pw + s;
          *dst++ = row_inside && w >= 0 && w < d.W ? plane[h * d.W + w] : T{0};
        }
      }
    }
  }
}

// din[n0 .. n0+G) = the fold of dcol: each patch element added back where im2row read it.
// One thread per (image, channel) plane, so no two threads add to the same element.
template <typename T>
void row2im(T* din, const T* dcol, int64_t n0, int64_t G, const ConvDims& d) {
  const int64_t planes = G * d.C, crs = d.CRS();
#pragma omp parallel for if (parallel : G * d.PQ() * crs >= kParallelMinWork)
  for (int64_t plane_index = 0; plane_index < planes; ++plane_index) {
    const int64_t g = plane_index / d.C, c = plane_index % d.C;
    T* plane = din + ((n0 + g) * d.C + c) * d.H * d.W;
    std::fill(plane, plane + d.H * d.W, T{0});
    for (int64_t p = 0; p < d.P; ++p) {
      for (int64_t q = 0; q < d.Q; ++q) {
        const T* src = dcol + ((g * d.P + p) * d.Q + q) * crs + c * d.R * d.S;
        for (int64_t r = 0; r < d.R; ++r) {
          const int64_t h = p * d.sh - d.ph + r;
          if (h < 0 || h >= d.H) continue;
          for (int64_t s = 0; s < d.S; ++s) {
            const int64_t w = q * d.sw - d.pw + s;
            if (w >= 0 && w < d.W) plane[h * d.W + w] += src[r * d.S + s];
          }
        }
      }
    }
  }
}

template <typename T>
void conv2d_forward_impl(T* out, const T* in, const T* weight, const T* bias, const ConvDims& d) {
  if (d.N == 0 || d.K == 0) return;
  const int64_t G = d.group(), crs = d.CRS(), pq = d.PQ();
  std::vector<T> col(static_cast<size_t>(G * pq * crs));
  std::vector<T> rows(static_cast<size_t>(G * pq * d.K));
  for (int64_t n0 = 0; n0 < d.N; n0 += G) {
    const int64_t g_count = std::min(G, d.N - n0);
    im2row(col.data(), in, n0, g_count, d);
    gemm(CblasNoTrans, CblasTrans, g_count * pq, d.K, crs, T{1}, col.data(), crs, weight, crs,
         T{0}, rows.data(), d.K);
    // rows (g, pq, k) -> out (n0 + g, k, pq), plus the bias.
#pragma omp parallel for if (parallel : g_count * d.K * pq >= kParallelMinWork)
    for (int64_t gk = 0; gk < g_count * d.K; ++gk) {
      const int64_t g = gk / d.K, k = gk % d.K;
      const T b = bias ? bias[k] : T{0};
      T* o = out + ((n0 + g) * d.K + k) * pq;
      const T* src = rows.data() + g * pq * d.K + k;
      for (int64_t i = 0; i < pq; ++i) o[i] = src[i * d.K] + b;
    }
  }
}

template <typename T>
void conv2d_backward_impl(T* din, T* dweight, T* dbias, const T* dout, const T* in,
                          const T* weight, const ConvDims& d) {
  if (d.N == 0 || d.K == 0) {
    // No output channel reaches the input: its gradient is zero (written, as always).
    if (din) std::fill(din, din + d.N * d.C * d.H * d.W, T{0});
    return;
  }
  const int64_t G = d.group(), crs = d.CRS(), pq = d.PQ();
  std::vector<T> col(static_cast<size_t>(G * pq * crs));
  std::vector<T> drows(static_cast<size_t>(G * pq * d.K));
  for (int64_t n0 = 0; n0 < d.N; n0 += G) {
    const int64_t g_count = std::min(G, d.N - n0), m = g_count * pq;
    // dout (n0 + g, k, pq) -> drows (g, pq, k).
#pragma omp parallel for if (parallel : m * d.K >= kParallelMinWork)
    for (int64_t row = 0; row < m; ++row) {
      const int64_t g = row / pq, i = row % pq;
      const T* src = dout + (n0 + g) * d.K * pq + i;
      T* dst = drows.data() + row * d.K;
      for (int64_t k = 0; k < d.K; ++k) dst[k] = src[k * pq];
    }
    if (dbias) {
#pragma omp parallel for if (parallel : m * d.K >= kParallelMinWork)
      for (int64_t k = 0; k < d.K; ++k) {
        T sum = 0;
        for (int64_t row = 0; row < m; ++row) sum += drows[row * d.K + k];
        dbias[k] += sum;
      }
    }
    if (dweight) {  // dweight (K, CRS) += drows^T (K, m) @ col (m, CRS): beta = 1 accumulates.
      im2row(col.data(), in, n0, g_count, d);
      gemm(CblasTrans, CblasNoTrans, d.K, crs, m, T{1}, drows.data(), d.K, col.data(), crs, T{1},
           dweight, crs);
    }
    if (din) {  // dcol (m, CRS) = drows (m, K) @ weight (K, CRS), into the column buffer.
      gemm(CblasNoTrans, CblasNoTrans, m, crs, d.K, T{1}, drows.data(), d.K, weight, crs, T{0},
           col.data(), crs);
      row2im(din, col.data(), n0, g_count, d);
    }
  }
}

void check_cpu_dtype(DType dt, const char* op) {
  ZT_ASSERT(dt == DType::f32 || dt == DType::f64, "{}: CPU compute dtype must be f32 or f64, got {}",
            op, dtype_name(dt));
}

}  // namespace

void conv2d_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                    const Conv2dArgs& args, const Stream& s) {
  const char* op = "conv2d_forward";
  ZT_ASSERT(out.device().is_cpu() && in.device().is_cpu() && weight.device().is_cpu() &&
                (!bias || bias->device().is_cpu()),
            "{} (cpu): all tensors must be on the CPU", op);
  const ConvDims d = conv_dims(in, weight, out, args, op, "out");
  ZT_ASSERT(!bias || (bias->ndim() == 1 && bias->size(0) == d.K), "{}: bias {} must be (K) = ({})",
            op, bias ? bias->shape().str() : "", d.K);
  const DType dt = in.dtype();
  check_cpu_dtype(dt, op);
  ZT_ASSERT(out.dtype() == dt && weight.dtype() == dt && (!bias || bias->dtype() == dt),
            "{}: out {}, in {}, weight {} (and bias) must share the compute dtype", op,
            dtype_name(out.dtype()), dtype_name(dt), dtype_name(weight.dtype()));
  if (dt == DType::f32) {
    conv2d_forward_impl(out.data<float>(), in.data<float>(), weight.data<float>(),
                        bias ? bias->data<float>() : nullptr, d);
  } else {
    conv2d_forward_impl(out.data<double>(), in.data<double>(), weight.data<double>(),
                        bias ? bias->data<double>() : nullptr, d);
  }
}

void conv2d_backward(Tensor* din, Tensor& dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& in, const Tensor& weight, const Conv2dArgs& args,
                     const Stream& s) {
  const char* op = "conv2d_backward";
  // An undefined dweight is a frozen weight: its gradient is not computed.
  const bool with_dweight = dweight.defined();
  ZT_ASSERT((!din || din->device().is_cpu()) && (!with_dweight || dweight.device().is_cpu()) &&
                (!dbias || dbias->device().is_cpu()) && dout.device().is_cpu() &&
                in.device().is_cpu() && weight.device().is_cpu(),
            "{} (cpu): all tensors must be on the CPU", op);
  const ConvDims d = conv_dims(in, weight, dout, args, op, "dout");
  ZT_ASSERT(!din || din->shape() == in.shape(), "{}: din {} differs from in {}", op,
            din ? din->shape().str() : "", in.shape().str());
  ZT_ASSERT(!with_dweight || dweight.shape() == weight.shape(),
            "{}: dweight {} differs from weight {}", op, dweight.shape().str(),
            weight.shape().str());
  ZT_ASSERT(!dbias || (dbias->ndim() == 1 && dbias->size(0) == d.K),
            "{}: dbias {} must be (K) = ({})", op, dbias ? dbias->shape().str() : "", d.K);
  const DType dt = in.dtype();
  check_cpu_dtype(dt, op);
  const DType acc = accum_dtype(dt);
  ZT_ASSERT(dout.dtype() == dt && weight.dtype() == dt && (!din || din->dtype() == dt),
            "{}: dout {}, weight {} (and din) must be the compute dtype {}", op,
            dtype_name(dout.dtype()), dtype_name(weight.dtype()), dtype_name(dt));
  ZT_ASSERT((!with_dweight || dweight.dtype() == acc) && (!dbias || dbias->dtype() == acc),
            "{}: dweight {} (and dbias) must be the accum dtype {}", op,
            dtype_name(dweight.dtype()), dtype_name(acc));
  if (dt == DType::f32) {
    conv2d_backward_impl(din ? din->data<float>() : nullptr,
                         with_dweight ? dweight.data<float>() : nullptr,
                         dbias ? dbias->data<float>() : nullptr, dout.data<float>(),
                         in.data<float>(), weight.data<float>(), d);
  } else {
    conv2d_backward_impl(din ? din->data<double>() : nullptr,
                         with_dweight ? dweight.data<double>() : nullptr,
                         dbias ? dbias->data<double>() : nullptr, dout.data<double>(),
                         in.data<double>(), weight.data<double>(), d);
  }
}

}  // namespace zt::kernels::cpu
