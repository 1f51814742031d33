// CUDA layernorm forward/backward over the last dimension C (contract in kernels/ops.h), the
// caller's eps, biased variance, as the CPU reference. One warp per row; statistics and parameter
// gradients in f32; dweight and dbias (+=) added in a fixed order (no atomics: the same bits on
// every run); an undefined one (a frozen parameter) is not computed. din may alias dout or
// dresidual: a row is read before it is written.
//
// Two paths:
//  - rows (C a multiple of 16 bytes, at most 16 chunks a lane, aligned pointers; norm_rows.cuh):
//    rows are held in registers and read from memory once; the forward takes a warp a row (the
//    loop kernel's sums in the same order, so the same bits), the backward one to four warps a row
//    (at most 4 chunks a lane; with several, a row's two sums add the warps' parts in order) and
//    adds the parameter gradients' terms into shared memory as it goes (no second pass over the
//    rows);
//  - loops (any other C): the row is walked two or three times, and the backward's parameter
//    gradients are column sums over the rows before din is written (cuda/column_reduce.cuh).
#include "zt/kernels/cuda/column_reduce.cuh"
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/cuda/norm_rows.cuh"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps, 8 rows at a time per block
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

// One warp per row; each lane takes chunks of kV elements (C % kV == 0). The row is read three
// times (mean, squared deviations, output): the second and third reads come from cache.
template <typename T, int kV>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* in,
                                         const T* weight, const T* bias, int64_t rows, int C,
                                         float eps) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  const T* x = in + row * C;
  float sum = 0.0f;
  for (int c = lane * kV; c < C; c += kWarpSize * kV) {
    float v[kV];
    load_f32<T, kV>(v, x + c);
#pragma unroll
    for (int k = 0; k < kV; ++k) sum += v[k];
  }
  const float m = warp_sum(sum) / static_cast<float>(C);
  // Squared deviations from the mean rather than E[x^2] - m^2, which cancels badly when |m| is
  // large.
  float var = 0.0f;
  for (int c = lane * kV; c < C; c += kWarpSize * kV) {
    float v[kV];
    load_f32<T, kV>(v, x + c);
#pragma unroll
    for (int k = 0; k < kV; ++k) var += (v[k] - m) * (v[k] - m);
  }
  const float r = rsqrtf(warp_sum(var) / static_cast<float>(C) + eps);
  T* o = out + row * C;
  for (int c = lane * kV; c < C; c += kWarpSize * kV) {
    float v[kV], w[kV], b[kV];
    load_f32<T, kV>(v, x + c);
    load_f32<T, kV>(w, weight + c);
    load_f32<T, kV>(b, bias + c);
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = (v[k] - m) * r * w[k] + b[k];
    store_from_f32<T, kV>(o + c, v);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// din = rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)) [+ dresidual], dnorm = weight dout,
// norm = (x - mean) rstd. One warp per row, chunks of kV elements per lane.
template <typename T, int kV>
__global__ void layernorm_backward_kernel(T* din, const T* dout, const T* in, const T* weight,
                                          const float* mean, const float* rstd, const T* dresidual,
                                          int64_t rows, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const T* g = dout + row * C;
  const T* x = in + row * C;
  const float m = mean[row];
  const float r = rstd[row];
  float sum_dnorm = 0.0f;
  float sum_dnorm_norm = 0.0f;
  for (int c = lane * kV; c < C; c += kWarpSize * kV) {
    float gv[kV], xv[kV], wv[kV];
    load_f32<T, kV>(gv, g + c);
    load_f32<T, kV>(xv, x + c);
    load_f32<T, kV>(wv, weight + c);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const float dnorm = wv[k] * gv[k];
      sum_dnorm += dnorm;
      sum_dnorm_norm += dnorm * (xv[k] - m) * r;
    }
  }
  const float mean_dnorm = warp_sum(sum_dnorm) / static_cast<float>(C);
  const float mean_dnorm_norm = warp_sum(sum_dnorm_norm) / static_cast<float>(C);
  T* d = din + row * C;
  const T* dres = dresidual != nullptr ? dresidual + row * C : nullptr;
  for (int c = lane * kV; c < C; c += kWarpSize * kV) {
    float gv[kV], xv[kV], wv[kV], rv[kV];
    load_f32<T, kV>(gv, g + c);
    load_f32<T, kV>(xv, x + c);
    load_f32<T, kV>(wv, weight + c);
    load_f32_or_zero<T, kV>(rv, dres != nullptr ? dres + c : nullptr);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const float norm = (xv[k] - m) * r;
      gv[k] = (wv[k] * gv[k] - mean_dnorm - norm * mean_dnorm_norm) * r + rv[k];
    }
    store_from_f32<T, kV>(d + c, gv);
  }
}

// The forward of one row held in registers (RowRegs): the same sums in the same order as
// layernorm_forward_kernel.
template <typename T, int kN>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_rows_kernel(T* out, float* mean, float* rstd, const T* in, const T* weight,
                                  const T* bias, int64_t rows, int C, float eps) {
  using R = RowRegs<T, kN>;
  constexpr int kV = R::kV;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  R x;
  x.load(in + row * C, 0, lane, C);
  const float m =
      warp_sum(x.lane_sum(0, lane, C, [](float v) { return v; })) / static_cast<float>(C);
  const float var = x.lane_sum(0, lane, C, [m](float v) { return (v - m) * (v - m); });
  const float r = rsqrtf(warp_sum(var) / static_cast<float>(C) + eps);
  T* o = out + row * C;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const int c = R::col(j, 0, lane);
    if (c >= C) continue;
    float v[kV], w[kV], b[kV];
    x.get(j, v);
    load_f32<T, kV>(w, weight + c);
    load_f32<T, kV>(b, bias + c);
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = (v[k] - m) * r * w[k] + b[k];
    store_from_f32<T, kV>(o + c, v);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// LayerNorm's terms for norm_backward_rows_kernel (norm_rows.cuh), the same arithmetic as
// layernorm_backward_kernel: row sums dnorm and dnorm * norm (dnorm = weight dout,
// norm = (x - mean) rstd); din = rstd (dnorm - mean(dnorm) - norm mean(dnorm norm));
// dweight += dout * norm, dbias += dout.
struct LnRowsOp {
  static constexpr int kSums = 2;
  static constexpr int kOut = 2;
  struct Row {
    float m, r;
  };
  const float* mean;
  const float* rstd;
  __device__ Row row(int64_t i) const { return {mean[i], rstd[i]}; }
  __device__ void add_sums(float (&sums)[2], float g, float x, float w, const Row& st) const {
    const float dnorm = w * g;
    sums[0] += dnorm;
    sums[1] += dnorm * (x - st.m) * st.r;
  }
  __device__ float din(float g, float x, float w, const Row& st, const float (&means)[2]) const {
    const float norm = (x - st.m) * st.r;
    return (w * g - means[0] - norm * means[1]) * st.r;
  }
  __device__ void grad_terms(float (&t)[2], float g, float x, const Row& st) const {
    t[0] = g * ((x - st.m) * st.r);
    t[1] = g;
  }
};

// The parameter gradients' terms for column_reduce: dweight += dout * norm, dbias += dout.
template <typename T, int kV>
struct LnParamTerm {
  const T* dout;
  const T* in;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t row, int64_t c0, float (&acc)[2][kV]) const {
    float gv[kV], xv[kV];
    load_f32<T, kV>(gv, dout + row * C + c0);
    load_f32<T, kV>(xv, in + row * C + c0);
    const float m = mean[row], r = rstd[row];
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      acc[0][k] += gv[k] * ((xv[k] - m) * r);
      acc[1][k] += gv[k];
    }
  }
};

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
    constexpr int kV = kVec<T>;
    auto launch = [&]<int V>() {
      layernorm_forward_kernel<T, V><<<grid, kThreads, 0, stream_of(s)>>>(
          ptr<T>(out), ptr<float>(mean), ptr<float>(rstd), ptr<const T>(in), ptr<const T>(weight),
          ptr<const T>(bias), sh.rows, sh.C, eps);
    };
    auto launch_rows = [&]<int N>() {
      layernorm_forward_rows_kernel<T, N><<<grid, kThreads, 0, stream_of(s)>>>(
          ptr<T>(out), ptr<float>(mean), ptr<float>(rstd), ptr<const T>(in), ptr<const T>(weight),
          ptr<const T>(bias), sh.rows, sh.C, eps);
    };
    if (sh.C % kV == 0 &&
        vec16_aligned(ptr<T>(out), ptr<const T>(in), ptr<const T>(weight), ptr<const T>(bias))) {
      if (!norm_rows_path() || !by_row_chunks<T>(sh.C, launch_rows)) {
        launch.template operator()<kV>();
      }
    } else {
      launch.template operator()<1>();
    }
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
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dres = dresidual != nullptr ? ptr<const T>(*dresidual) : nullptr;
    constexpr int kV = kVec<T>;
    const bool vec = sh.C % kV == 0 && vec16_aligned(ptr<T>(din), ptr<const T>(dout),
                                                     ptr<const T>(in), ptr<const T>(weight), dres);
    const ColumnDst<2> dst{
        {with_dweight ? ptr<float>(dweight) : nullptr, with_dbias ? ptr<float>(dbias) : nullptr}};
    auto launch = [&]<int V>() {
      // The parameter gradients first: din may overwrite dout.
      if (with_dweight || with_dbias) {
        column_reduce<V, 2>(dst, sh.rows, sh.C,
                            LnParamTerm<T, V>{ptr<const T>(dout), ptr<const T>(in),
                                              ptr<const float>(mean), ptr<const float>(rstd), sh.C},
                            in.device(), s);
      }
      const unsigned grid = static_cast<unsigned>(ceil_div(sh.rows, kWarpsPerBlock));
      layernorm_backward_kernel<T, V><<<grid, kThreads, 0, stream_of(s)>>>(
          ptr<T>(din), ptr<const T>(dout), ptr<const T>(in), ptr<const T>(weight),
          ptr<const float>(mean), ptr<const float>(rstd), dres, sh.rows, sh.C);
      ZT_CUDA_CHECK_LAUNCH();
    };
    // The rows path: the kernel, then (with any parameter gradient) the blocks' sums.
    if (vec && norm_rows_path() &&
        norm_backward_rows<T>(
            ptr<T>(din), ptr<const T>(dout), ptr<const T>(in), ptr<const T>(weight), dres, sh.rows,
            sh.C, LnRowsOp{ptr<const float>(mean), ptr<const float>(rstd)}, dst, in.device(), s)) {
      return;
    }
    if (vec) {
      launch.template operator()<kV>();
    } else {
      launch.template operator()<1>();
    }
  });
}

}  // namespace zt::kernels::cuda
