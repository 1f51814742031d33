// Deterministic column sums over the rows of a (rows, C) problem, for parameter gradients that
// reduce over tokens (a matmul's bias, LayerNorm's weight and bias, RMSNorm's weight):
// dst[o][c] += sum over rows r of term_o(r, c), for kOut outputs at once.
//
// Two kernels, no atomics, so the sums are the same bits on every run:
//  1. column_partial_kernel: block (32, kColRows) covers 32 x kV columns of one split of the rows;
//     each thread keeps kV consecutive columns (one 16-byte load per input row when kV > 1) and
//     walks every kColRows-th row of the split; the block adds its kColRows row-threads in shared
//     memory and writes the split's partial sums, partial[o][split][c].
//  2. column_finish_kernel adds the splits onto dst[o] in a fixed order (kColRows interleaved
//     runs, then their sums in order).
// The term is a functor F with
//   __device__ void operator()(int64_t row, int64_t c0, float (&acc)[kOut][kV]) const
// that adds row `row`, columns [c0, c0 + kV) into acc. column_reduce() picks the splits (about
// four blocks per SM, each split at least 64 rows) and launches both.
#pragma once

#include "zt/kernels/cuda/cuda_common.cuh"

namespace zt::kernels::cuda {

constexpr int kColRows = 8;  // blockDim.y of column_partial_kernel

template <int kOut>
struct ColumnDst {
  float* p[kOut];  // null: that output is not wanted (its partial sums are still computed)
};

template <int kV, int kOut, typename F>
__global__ void __launch_bounds__(kWarpSize* kColRows)
    column_partial_kernel(float* partial, int64_t rows, int64_t rows_per_split, int64_t C, F term) {
  constexpr int kCols = kWarpSize * kV;  // columns of one block
  __shared__ float s_sum[kOut][kColRows][kCols];
  const int64_t splits = gridDim.y;
  const int64_t c0 = (blockIdx.x * static_cast<int64_t>(kWarpSize) + threadIdx.x) * kV;
  const int64_t begin = blockIdx.y * rows_per_split;
  const int64_t end = begin + rows_per_split < rows ? begin + rows_per_split : rows;
  float acc[kOut][kV];
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
#pragma unroll
    for (int k = 0; k < kV; ++k) acc[o][k] = 0.0f;
  }
  if (c0 < C) {
    // Unrolled so that several rows' loads are in flight at once (the sums keep their order).
#pragma unroll 4
    for (int64_t row = begin + threadIdx.y; row < end; row += kColRows) term(row, c0, acc);
  }
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
#pragma unroll
    for (int k = 0; k < kV; ++k) s_sum[o][threadIdx.y][threadIdx.x * kV + k] = acc[o][k];
  }
  __syncthreads();
  // Every thread of the block finishes columns of the block: kCols x kOut sums of kColRows.
  const int tid = threadIdx.y * kWarpSize + threadIdx.x;
  const int64_t block_c0 = blockIdx.x * static_cast<int64_t>(kCols);
  for (int j = tid; j < kOut * kCols; j += kWarpSize * kColRows) {
    const int o = j / kCols, col = j % kCols;
    if (block_c0 + col >= C) continue;
    float v = 0.0f;
#pragma unroll
    for (int y = 0; y < kColRows; ++y) v += s_sum[o][y][col];
    partial[(o * splits + blockIdx.y) * C + block_c0 + col] = v;
  }
}

// Block (32, kColRows): 32 columns; row-thread y adds splits y, y + kColRows, ..., then the
// kColRows sums are added in order in shared memory. Deterministic (a fixed order throughout).
template <int kOut>
__global__ void __launch_bounds__(kWarpSize* kColRows)
    column_finish_kernel(ColumnDst<kOut> dst, const float* partial, int splits, int64_t C) {
  __shared__ float s_sum[kColRows][kWarpSize];
  const int64_t c = blockIdx.x * static_cast<int64_t>(kWarpSize) + threadIdx.x;
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
    if (dst.p[o] == nullptr) continue;  // (uniform across the block)
    float v = 0.0f;
    if (c < C) {
#pragma unroll 4
      for (int sp = threadIdx.y; sp < splits; sp += kColRows) {
        v += partial[(static_cast<int64_t>(o) * splits + sp) * C + c];
      }
    }
    s_sum[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      float total = 0.0f;
#pragma unroll
      for (int y = 0; y < kColRows; ++y) total += s_sum[y][threadIdx.x];
      dst.p[o][c] += total;
    }
    __syncthreads();
  }
}

// dst[o][c] += the sum over `splits` of partial[o][split][c] (kOut x splits x C f32), in a fixed
// order: column_finish_kernel, also for other kernels that leave per-split column sums
// (norm_rows.cuh's backward).
template <int kOut>
void column_finish(const ColumnDst<kOut>& dst, const float* partial, int64_t splits, int64_t C,
                   const Stream& s) {
  column_finish_kernel<kOut>
      <<<static_cast<unsigned>(ceil_div(C, kWarpSize)), dim3(kWarpSize, kColRows), 0,
         stream_of(s)>>>(dst, partial, static_cast<int>(splits), C);
  ZT_CUDA_CHECK_LAUNCH();
}

// dst[o][c] += sum_r term_o(r, c) over `rows` rows and C columns (kV columns per thread: C must
// be a multiple of kV and the term's loads aligned for them). `device` and `stream` as the
// caller's op; the partial sums live in a temporary f32 tensor of kOut x splits x C.
template <int kV, int kOut, typename F>
void column_reduce(ColumnDst<kOut> dst, int64_t rows, int64_t C, const F& term, Device device,
                   const Stream& s) {
  if (rows == 0 || C == 0) return;
  const int64_t col_blocks = ceil_div(C, kWarpSize * kV);
  const int64_t splits = std::max<int64_t>(
      1, std::min<int64_t>(ceil_div(4 * sm_count(), col_blocks), ceil_div(rows, 64)));
  const int64_t rows_per_split = ceil_div(rows, splits);
  Tensor partial = Tensor::empty({kOut * splits * C}, DType::f32, device, s);
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(splits));
  const dim3 block(kWarpSize, kColRows);
  column_partial_kernel<kV, kOut, F><<<grid, block, 0, stream_of(s)>>>(
      static_cast<float*>(partial.data()), rows, rows_per_split, C, term);
  ZT_CUDA_CHECK_LAUNCH();
  column_finish<kOut>(dst, static_cast<const float*>(partial.data()), splits, C, s);
}

}  // namespace zt::kernels::cuda
