// CUDA RMSNorm forward/backward over the last dimension C (contract in kernels/op_table.inc), as
// the CPU reference: rstd = 1 / sqrt(mean(x^2) + eps), out = weight * (x * rstd). One warp per
// row; statistics and the parameter gradient in f32. The forward rounds x * rstd to the compute
// dtype before multiplying by the weight, as transformers' LlamaRMSNorm does
// (`weight * hidden.to(input_dtype)`), so bf16 outputs match it; the backward differentiates the
// unrounded function in f32. dweight (+=) is added in a fixed order (no atomics: the same bits on
// every run); an undefined dweight (a frozen weight) is not computed. din may alias dout or
// dresidual: a row is read before it is written.
//
// Two paths, as layernorm.cu's: rows (16-byte chunks, at most 16 a lane; norm_rows.cuh: rows in
// registers, the forward a warp a row with the loop kernel's bits, the backward one to four warps
// a row with dweight's terms summed in shared memory as it goes) and loops (any other C: dweight
// from column sums over the rows, cuda/column_reduce.cuh, before din is written).
#include "zt/kernels/cuda/column_reduce.cuh"
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/cuda/norm_rows.cuh"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps, 8 rows at a time per block
constexpr int kWarpsPerBlock = kThreads / kWarpSize;

// x rounded to T and back (a no-op for f32).
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

// One warp per row; each lane takes chunks of kV elements (C % kV == 0).
template <typename T, int kV>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* in, const T* weight, float eps,
                                       int64_t rows, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  const T* x = in + row * C;
  float sum_sq = 0.0f;
  for (int c = lane * kV; c < C; c += kWarpSize * kV) {
    float v[kV];
    load_f32<T, kV>(v, x + c);
#pragma unroll
    for (int k = 0; k < kV; ++k) sum_sq += v[k] * v[k];
  }
  const float r = rsqrtf(warp_sum(sum_sq) / static_cast<float>(C) + eps);
  T* o = out + row * C;
  for (int c = lane * kV; c < C; c += kWarpSize * kV) {
    float v[kV], w[kV];
    load_f32<T, kV>(v, x + c);
    load_f32<T, kV>(w, weight + c);
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = w[k] * round_to<T>(v[k] * r);
    store_from_f32<T, kV>(o + c, v);
  }
  if (lane == 0) rstd[row] = r;
}

// din = rstd (dnorm - norm mean(dnorm norm)) [+ dresidual], dnorm = weight dout, norm = x rstd.
// One warp per row, chunks of kV elements per lane. Each lane reads the elements of a chunk
// before writing the same chunk of din, so din may alias dout or dresidual.
template <typename T, int kV>
__global__ void rmsnorm_backward_kernel(T* din, const T* dout, const T* in, const T* weight,
                                        const float* rstd, const T* dresidual, int64_t rows,
                                        int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const T* g = dout + row * C;
  const T* x = in + row * C;
  const float r = rstd[row];
  float sum_dnorm_norm = 0.0f;
  for (int c = lane * kV; c < C; c += kWarpSize * kV) {
    float gv[kV], xv[kV], wv[kV];
    load_f32<T, kV>(gv, g + c);
    load_f32<T, kV>(xv, x + c);
    load_f32<T, kV>(wv, weight + c);
#pragma unroll
    for (int k = 0; k < kV; ++k) sum_dnorm_norm += wv[k] * gv[k] * xv[k] * r;
  }
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
    for (int k = 0; k < kV; ++k) gv[k] = (wv[k] * gv[k] - xv[k] * r * mean_dnorm_norm) * r + rv[k];
    store_from_f32<T, kV>(d + c, gv);
  }
}

// The forward of one row held in registers (RowRegs), as rmsnorm_forward_kernel.
template <typename T, int kN>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_rows_kernel(T* out, float* rstd, const T* in, const T* weight, float eps,
                                int64_t rows, int C) {
  using R = RowRegs<T, kN>;
  constexpr int kV = R::kV;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  R x;
  x.load(in + row * C, 0, lane, C);
  const float sum_sq = x.lane_sum(0, lane, C, [](float v) { return v * v; });
  const float r = rsqrtf(warp_sum(sum_sq) / static_cast<float>(C) + eps);
  T* o = out + row * C;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const int c = R::col(j, 0, lane);
    if (c >= C) continue;
    float v[kV], w[kV];
    x.get(j, v);
    load_f32<T, kV>(w, weight + c);
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = w[k] * round_to<T>(v[k] * r);
    store_from_f32<T, kV>(o + c, v);
  }
  if (lane == 0) rstd[row] = r;
}

// RMSNorm's terms for norm_backward_rows_kernel (norm_rows.cuh), the same arithmetic as
// rmsnorm_backward_kernel: the row sum dnorm * norm (dnorm = weight dout, norm = x rstd);
// din = rstd (dnorm - norm mean(dnorm norm)); dweight += dout * norm.
struct RmsRowsOp {
  static constexpr int kSums = 1;
  static constexpr int kOut = 1;
  struct Row {
    float r;
  };
  const float* rstd;
  __device__ Row row(int64_t i) const { return {rstd[i]}; }
  __device__ void add_sums(float (&sums)[1], float g, float x, float w, const Row& st) const {
    sums[0] += w * g * x * st.r;
  }
  __device__ float din(float g, float x, float w, const Row& st, const float (&means)[1]) const {
    return (w * g - x * st.r * means[0]) * st.r;
  }
  __device__ void grad_terms(float (&t)[1], float g, float x, const Row& st) const {
    t[0] = g * (x * st.r);
  }
};

// dweight's term for column_reduce (cuda/column_reduce.cuh: deterministic, no atomics):
// dout * x * rstd.
template <typename T, int kV>
struct RmsDweightTerm {
  const T* dout;
  const T* in;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t row, int64_t c0, float (&acc)[1][kV]) const {
    float gv[kV], xv[kV];
    load_f32<T, kV>(gv, dout + row * C + c0);
    load_f32<T, kV>(xv, in + row * C + c0);
    const float r = rstd[row];
#pragma unroll
    for (int k = 0; k < kV; ++k) acc[0][k] += gv[k] * (xv[k] * r);
  }
};

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
    constexpr int kV = kVec<T>;
    auto launch_rows = [&]<int N>() {
      rmsnorm_forward_rows_kernel<T, N>
          <<<grid, kThreads, 0, stream_of(s)>>>(ptr<T>(out), ptr<float>(rstd), ptr<const T>(in),
                                                ptr<const T>(weight), eps, sh.rows, sh.C);
    };
    if (sh.C % kV == 0 && vec16_aligned(ptr<T>(out), ptr<const T>(in), ptr<const T>(weight))) {
      if (!norm_rows_path() || !by_row_chunks<T>(sh.C, launch_rows)) {
        rmsnorm_forward_kernel<T, kV>
            <<<grid, kThreads, 0, stream_of(s)>>>(ptr<T>(out), ptr<float>(rstd), ptr<const T>(in),
                                                  ptr<const T>(weight), eps, sh.rows, sh.C);
      }
    } else {
      rmsnorm_forward_kernel<T, 1>
          <<<grid, kThreads, 0, stream_of(s)>>>(ptr<T>(out), ptr<float>(rstd), ptr<const T>(in),
                                                ptr<const T>(weight), eps, sh.rows, sh.C);
    }
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
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dres = dresidual != nullptr ? ptr<const T>(*dresidual) : nullptr;
    constexpr int kV = kVec<T>;
    const bool vec = sh.C % kV == 0 && vec16_aligned(ptr<T>(din), ptr<const T>(dout),
                                                     ptr<const T>(in), ptr<const T>(weight), dres);
    const ColumnDst<1> dst{{with_dweight ? ptr<float>(dweight) : nullptr}};
    // The rows path: the kernel, then (with dweight) the blocks' sums.
    if (vec && norm_rows_path() &&
        norm_backward_rows<T>(ptr<T>(din), ptr<const T>(dout), ptr<const T>(in),
                              ptr<const T>(weight), dres, sh.rows, sh.C,
                              RmsRowsOp{ptr<const float>(rstd)}, dst, in.device(), s)) {
      return;
    }
    // dweight first: din may overwrite dout.
    if (with_dweight) {
      if (vec) {
        column_reduce<kV, 1>(dst, sh.rows, sh.C,
                             RmsDweightTerm<T, kV>{ptr<const T>(dout), ptr<const T>(in),
                                                   ptr<const float>(rstd), sh.C},
                             in.device(), s);
      } else {
        column_reduce<1, 1>(dst, sh.rows, sh.C,
                            RmsDweightTerm<T, 1>{ptr<const T>(dout), ptr<const T>(in),
                                                 ptr<const float>(rstd), sh.C},
                            in.device(), s);
      }
    }
    const unsigned grid = static_cast<unsigned>(ceil_div(sh.rows, kWarpsPerBlock));
    if (vec) {
      rmsnorm_backward_kernel<T, kV><<<grid, kThreads, 0, stream_of(s)>>>(
          ptr<T>(din), ptr<const T>(dout), ptr<const T>(in), ptr<const T>(weight),
          ptr<const float>(rstd), dres, sh.rows, sh.C);
    } else {
      rmsnorm_backward_kernel<T, 1><<<grid, kThreads, 0, stream_of(s)>>>(
          ptr<T>(din), ptr<const T>(dout), ptr<const T>(in), ptr<const T>(weight),
          ptr<const float>(rstd), dres, sh.rows, sh.C);
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
