// Fused ("flash") attention, causal or bidirectional, on the tensor cores, forward and backward
// (contract in kernels/op_table.inc), in the manner of FlashAttention-2: the (T, T) probabilities
// never reach device memory. Reads q, k, v straight from qkv (B, T, 3C) and writes out (B, T, C)
// without permutes.
//
// Forward: a block takes 64 queries of one (batch, head), four warps of 16 rows; it streams the
// 64-key tiles up to the diagonal (causal) or to T through shared memory (cp.async,
// double-buffered), computes S = q k^T with mma.sync m16n8k16 (16-bit inputs, f32 accumulators),
// keeps the running row max and sum (online softmax, base 2) and accumulates P v in registers. It
// stores the normalised output and lse = log sum exp(scaled scores) per row (f32), all that
// backward needs.
//
// Backward recomputes P from q, k and lse. It runs as two kernels rather than one with atomics:
// one per 64-key block accumulating dK and dV over the query tiles at or below the diagonal (all
// of them when bidirectional), one per 64-query block accumulating dQ over the key tiles. That
// recomputes S and dP once more than a fused kernel but needs no f32 dQ scratch and no atomics, so
// the result is deterministic. Both read D = rowsum(dO * O), made by a small kernel first.
//
// Supported: bf16 and f16, head size 64 or 128 (flash_attention_supported); rows must be 16-byte
// aligned, which holds for contiguous tensors from the caching allocator. Fragment layouts are
// those of the PTX ISA for mma.m16n8k16 and ldmatrix; the comments at each load say which.
#include <cmath>

#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/cuda/cudnn_attention.h"
#include "zt/kernels/qkv_layout.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = 16;
constexpr int kBlockRows = kWarps * kRowsPerWarp;  // queries (forward, dQ) or keys (dK/dV)
constexpr int kPad =
    8;  // elements added to each shared-memory row: ldmatrix rows hit 8 bank groups
constexpr float kLog2e = 1.4426950408889634f;

// ---- PTX wrappers

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, zero-filled when !valid (the source is then not read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Four 8x8 b16 matrices; lane L gives the address of row L % 8 of matrix L / 8 and receives, of
// matrix i in r[i], the elements (L / 4, 2 (L % 4)) and (L / 4, 2 (L % 4) + 1) — or with .trans
// the elements (2 (L % 4), L / 4) and (2 (L % 4) + 1, L / 4).
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c (16x8 f32) += a (16x16, row) b (16x8, col). Lane L, g = L / 4, t = L % 4:
// a: {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}; b: {(k 2t..2t+1, n g), (k 2t+8..,
// g)}; c: {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
template <typename T>
__device__ __forceinline__ void mma16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma16816<bf16>(float c[4], const unsigned a[4], unsigned b0,
                                               unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<f16>(float c[4], const unsigned a[4], unsigned b0,
                                              unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one register of two 16-bit values, the first in the low half (lower column).
template <typename T>
__device__ __forceinline__ unsigned pack2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack2<bf16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}
template <>
__device__ __forceinline__ unsigned pack2<f16>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}

// ---- tiles

// Copies rows [r0, r0 + kRows) of a (T, D) matrix with row stride `ld` elements into shared memory
// (row stride D + kPad), zero-filling rows at or past T. Every thread of the block takes part.
template <typename T, int D, int kRows>
__device__ __forceinline__ void load_tile(T* smem, const T* g, int64_t ld, int64_t r0,
                                          int64_t T_len) {
  constexpr int kChunksPerRow = D / 8;
  for (int c = threadIdx.x; c < kRows * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * 8;
    const int64_t row = r0 + r;
    const bool valid = row < T_len;
    cp_async16(smem + r * (D + kPad) + col, g + (valid ? row : 0) * ld + col, valid);
  }
}

// The A fragment (16x16) at (row0, k0) of a row-major shared tile: matrices (rows 0-7, k 0-7),
// (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
template <typename T, int D>
__device__ __forceinline__ void load_a(unsigned a[4], const T* smem, int row0, int k0) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = row0 + (lane % 8) + ((lane / 8) % 2) * 8;
  const int col = k0 + (lane / 16) * 8;
  ldmatrix_x4(a, smem + row * (D + kPad) + col);
}

// B fragments of two n-tiles (n0, n0 + 8) over k0..k0+15 from a tile stored [n][k] (keys by head
// dimension, B = tile^T): matrices (n0, k0), (n0, k0+8), (n0+8, k0), (n0+8, k0+8).
// b[0], b[1] serve n-tile n0; b[2], b[3] n-tile n0 + 8.
template <typename T, int D>
__device__ __forceinline__ void load_b_nk(unsigned b[4], const T* smem, int n0, int k0) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = n0 + (lane % 8) + (lane / 16) * 8;
  const int col = k0 + ((lane / 8) % 2) * 8;
  ldmatrix_x4(b, smem + row * (D + kPad) + col);
}

// B fragments of two n-tiles (n0, n0 + 8) over k0..k0+15 from a tile stored [k][n] (B = tile):
// transposed matrices (k0, n0), (k0+8, n0), (k0, n0+8), (k0+8, n0+8).
template <typename T, int D>
__device__ __forceinline__ void load_b_kn(unsigned b[4], const T* smem, int k0, int n0) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = k0 + (lane % 8) + ((lane / 8) % 2) * 8;
  const int col = n0 + (lane / 16) * 8;
  ldmatrix_x4_trans(b, smem + row * (D + kPad) + col);
}

// acc (16 x 8*kNT) += A (16 x D, rows row0.. of `a_smem`) * B^T, B stored [n][k] (rows n of
// `b_smem`, kNT * 8 of them).
template <typename T, int D, int kNT>
__device__ __forceinline__ void mma_abt(float acc[kNT][4], const T* a_smem, int row0,
                                        const T* b_smem) {
#pragma unroll
  for (int k0 = 0; k0 < D; k0 += 16) {
    unsigned a[4];
    load_a<T, D>(a, a_smem, row0, k0);
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      unsigned b[4];
      load_b_nk<T, D>(b, b_smem, np * 16, k0);
      mma16816<T>(acc[2 * np], a, b[0], b[1]);
      mma16816<T>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc (16 x D) += P (16 x 8*kNT, accumulator layout, rounded to T) * B, B stored [k][n] (kNT * 8
// rows of `b_smem`, D columns).
template <typename T, int D, int kNT>
__device__ __forceinline__ void mma_pb(float acc[D / 8][4], const float p[kNT][4],
                                       const T* b_smem) {
#pragma unroll
  for (int kc = 0; kc < kNT / 2; ++kc) {
    // Two accumulator n-tiles form one A fragment: their layouts line up.
    const unsigned a[4] = {
        pack2<T>(p[2 * kc][0], p[2 * kc][1]), pack2<T>(p[2 * kc][2], p[2 * kc][3]),
        pack2<T>(p[2 * kc + 1][0], p[2 * kc + 1][1]), pack2<T>(p[2 * kc + 1][2], p[2 * kc + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      unsigned b[4];
      load_b_kn<T, D>(b, b_smem, kc * 16, dp * 16);
      mma16816<T>(acc[2 * dp], a, b[0], b[1]);
      mma16816<T>(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Stores a warp's 16 x D accumulator, times `scale`, to rows row0.. of a (T, D) matrix with row
// stride ld, rows at or past T skipped.
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* g, int64_t ld, int64_t row0, int64_t T_len,
                                           const float acc[D / 8][4], float scale) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t r_lo = row0 + lane / 4, r_hi = r_lo + 8;
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    const int col = nt * 8 + (lane % 4) * 2;
    if (r_lo < T_len) {
      *reinterpret_cast<unsigned*>(g + r_lo * ld + col) =
          pack2<T>(acc[nt][0] * scale, acc[nt][1] * scale);
    }
    if (r_hi < T_len) {
      *reinterpret_cast<unsigned*>(g + r_hi * ld + col) =
          pack2<T>(acc[nt][2] * scale, acc[nt][3] * scale);
    }
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

struct FlashParams {
  int64_t T, C, NH;
  float scale;  // 1 / sqrt(HS)
  bool causal;  // else bidirectional
  // The last key query row `row` attends to.
  __device__ int64_t last_key(int64_t row) const { return causal ? row : T - 1; }
  // How many 64-key tiles the query rows [q0, q0 + rows) read.
  __device__ int64_t key_tiles(int64_t q0, int rows) const {
    return causal ? (q0 + rows - 1) / 64 + 1 : (T + 63) / 64;
  }
};

// ---- forward

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(T* out, float* lse, const T* qkv, FlashParams p) {
  constexpr int kBc = 64;
  constexpr int kNT = kBc / 8;
  constexpr int kStride = D + kPad;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sk = sq + kBlockRows * kStride;  // two buffers
  T* sv = sk + 2 * kBc * kStride;     // two buffers

  const int64_t bh = blockIdx.x;
  const int64_t b = bh / p.NH, h = bh % p.NH;
  const int64_t n_qb = (p.T + kBlockRows - 1) / kBlockRows;
  const int64_t qb = n_qb - 1 - blockIdx.y;  // the longest rows first
  const int64_t q0 = qb * kBlockRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t ld = 3 * p.C;
  const T* gq = qkv + b * p.T * ld + h * D;
  const T* gk = gq + p.C;
  const T* gv = gq + 2 * p.C;
  const float scale_log2 = p.scale * kLog2e;

  static_assert(kBc == 64, "FlashParams::key_tiles counts 64-key tiles");
  const int64_t n_kt = p.key_tiles(q0, kBlockRows);
  load_tile<T, D, kBlockRows>(sq, gq, ld, q0, p.T);
  load_tile<T, D, kBc>(sk, gk, ld, 0, p.T);
  load_tile<T, D, kBc>(sv, gv, ld, 0, p.T);
  cp_async_commit();

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY};  // rows g and g + 8, base-2 scaled scores
  float l[2] = {0.0f, 0.0f};            // this lane's part of the row sums
  const int64_t row_lo = q0 + warp * kRowsPerWarp + lane / 4;

  for (int64_t j = 0; j < n_kt; ++j) {
    const int buf = static_cast<int>(j % 2);
    if (j + 1 < n_kt) {
      load_tile<T, D, kBc>(sk + (1 - buf) * kBc * kStride, gk, ld, (j + 1) * kBc, p.T);
      load_tile<T, D, kBc>(sv + (1 - buf) * kBc * kStride, gv, ld, (j + 1) * kBc, p.T);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    float s[kNT][4] = {};
    mma_abt<T, D, kNT>(s, sq, warp * kRowsPerWarp, sk + buf * kBc * kStride);

    const int64_t k0 = j * kBc;
    // whether some key of the tile may lie past a row's last key (the diagonal, or T)
    const bool edge = k0 + kBc > (p.causal ? row_lo - lane / 4 : p.T);
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = k0 + nt * 8 + (lane % 4) * 2 + (e % 2);
        const int64_t row = row_lo + (e / 2) * 8;
        float x = s[nt][e] * scale_log2;
        if (edge && key > p.last_key(row)) x = -INFINITY;
        s[nt][e] = x;
        mx[e / 2] = fmaxf(mx[e / 2], x);
      }
    }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      // 0 on the first tile (m = -inf), never NaN: key 0 is every row's
      corr[r] = exp2f(m[r] - mx[r]);
      m[r] = mx[r];
      l[r] *= corr[r];
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - m[e / 2]);
        l[e / 2] += s[nt][e];
      }
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      o[nt][0] *= corr[0];
      o[nt][1] *= corr[0];
      o[nt][2] *= corr[1];
      o[nt][3] *= corr[1];
    }
    mma_pb<T, D, kNT>(o, s, sv + buf * kBc * kStride);
    __syncthreads();
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    inv[r] = 1.0f / l[r];
  }
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    o[nt][0] *= inv[0];
    o[nt][1] *= inv[0];
    o[nt][2] *= inv[1];
    o[nt][3] *= inv[1];
  }
  store_rows<T, D>(out + b * p.T * p.C + h * D, p.C, q0 + warp * kRowsPerWarp, p.T, o, 1.0f);
  if (lane % 4 == 0) {
    float* lrow = lse + bh * p.T;
    // natural log: lse = (m + log2 l) ln 2, m in base-2 units of the scaled scores
    if (row_lo < p.T) lrow[row_lo] = (m[0] + log2f(l[0])) / kLog2e;
    if (row_lo + 8 < p.T) lrow[row_lo + 8] = (m[1] + log2f(l[1])) / kLog2e;
  }
}

// ---- backward

// dvec[bh, t] = sum_d dout[b, t, h, d] * out[b, t, h, d]; one warp per (b, t, h).
template <typename T>
__global__ void flash_dvec_kernel(float* dvec, const T* dout, const T* out, int64_t B,
                                  FlashParams p, int HS) {
  const int64_t rows = B * p.T * p.NH;
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarpSize;
       r < rows; r += static_cast<int64_t>(gridDim.x) * blockDim.x / kWarpSize) {
    const int64_t h = r % p.NH, bt = r / p.NH;
    const int64_t b = bt / p.T, t = bt % p.T;
    const T* x = dout + bt * p.C + h * HS;
    const T* y = out + bt * p.C + h * HS;
    float acc = 0.0f;
    for (int d = lane; d < HS; d += kWarpSize) acc += to_f32(x[d]) * to_f32(y[d]);
    acc = warp_sum(acc);
    if (lane == 0) dvec[(b * p.NH + h) * p.T + t] = acc;
  }
}

// dK and dV for 64 keys of one (batch, head), over query tiles of kBq rows from the diagonal on
// (causal) or all of them.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kv_kernel(T* dqkv, const T* qkv, const T* dout, const float* lse,
                             const float* dvec, FlashParams p) {
  constexpr int kBq = D == 128 ? 32 : 64;  // bounds the registers: dK, dV, S^T, dP^T per warp
  constexpr int kNT = kBq / 8;
  constexpr int kStride = D + kPad;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sk = reinterpret_cast<T*>(smem_raw);
  T* sv = sk + kBlockRows * kStride;
  T* sq = sv + kBlockRows * kStride;                                // two buffers
  T* sdo = sq + 2 * kBq * kStride;                                  // two buffers
  float* slse = reinterpret_cast<float*>(sdo + 2 * kBq * kStride);  // two buffers, base 2
  float* sdvec = slse + 2 * kBq;                                    // two buffers

  const int64_t bh = blockIdx.x;
  const int64_t b = bh / p.NH, h = bh % p.NH;
  const int64_t kb = blockIdx.y;  // the longest columns (first keys) first
  const int64_t k0 = kb * kBlockRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t ld = 3 * p.C;
  const T* gq = qkv + b * p.T * ld + h * D;
  const T* gk = gq + p.C;
  const T* gv = gq + 2 * p.C;
  const T* gdo = dout + b * p.T * p.C + h * D;
  const float* glse = lse + bh * p.T;
  const float* gdvec = dvec + bh * p.T;
  const float scale_log2 = p.scale * kLog2e;

  const int64_t first_qt = p.causal ? k0 / kBq : 0;
  const int64_t n_qt = (p.T + kBq - 1) / kBq;
  auto load_rows = [&](int64_t qt, int buf) {
    load_tile<T, D, kBq>(sq + buf * kBq * kStride, gq, ld, qt * kBq, p.T);
    load_tile<T, D, kBq>(sdo + buf * kBq * kStride, gdo, p.C, qt * kBq, p.T);
    for (int i = threadIdx.x; i < kBq; i += kThreads) {
      const int64_t t = qt * kBq + i;
      // A query past T contributes nothing: P = 2^(x - inf) = 0.
      slse[buf * kBq + i] = t < p.T ? glse[t] * kLog2e : INFINITY;
      sdvec[buf * kBq + i] = t < p.T ? gdvec[t] : 0.0f;
    }
  };
  load_tile<T, D, kBlockRows>(sk, gk, ld, k0, p.T);
  load_tile<T, D, kBlockRows>(sv, gv, ld, k0, p.T);
  load_rows(first_qt, 0);
  cp_async_commit();

  float dk[D / 8][4] = {};
  float dv[D / 8][4] = {};
  const int key_row0 = warp * kRowsPerWarp;
  const int64_t key_lo = k0 + key_row0 + lane / 4;

  for (int64_t qt = first_qt; qt < n_qt; ++qt) {
    const int buf = static_cast<int>((qt - first_qt) % 2);
    if (qt + 1 < n_qt) load_rows(qt + 1, 1 - buf);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* q = sq + buf * kBq * kStride;
    const T* dO = sdo + buf * kBq * kStride;
    const float* tl = slse + buf * kBq;
    const float* td = sdvec + buf * kBq;

    // P^T (keys x queries) = exp2(k q^T scale log2e - lse log2e), zero where key > query when
    // causal. (Keys past T need no mask here: their dK and dV rows are never stored.)
    float pt[kNT][4] = {};
    mma_abt<T, D, kNT>(pt, sk, key_row0, q);
    float dpt[kNT][4] = {};
    mma_abt<T, D, kNT>(dpt, sv, key_row0, dO);  // dP^T = v dO^T
    const int64_t qbase = qt * kBq;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = nt * 8 + (lane % 4) * 2 + (e % 2);
        const int64_t key = key_lo + (e / 2) * 8;
        const float prob =
            p.causal && key > qbase + qi ? 0.0f : exp2f(pt[nt][e] * scale_log2 - tl[qi]);
        pt[nt][e] = prob;
        dpt[nt][e] = prob * (dpt[nt][e] - td[qi]);  // dS^T, without the scale
      }
    }
    mma_pb<T, D, kNT>(dv, pt, dO);  // dV += P^T dO
    mma_pb<T, D, kNT>(dk, dpt, q);  // dK += dS^T q
    __syncthreads();
  }
  T* gdk = dqkv + b * p.T * ld + p.C + h * D;
  store_rows<T, D>(gdk, ld, k0 + key_row0, p.T, dk, p.scale);
  store_rows<T, D>(gdk + p.C, ld, k0 + key_row0, p.T, dv, 1.0f);
}

// dQ for 64 queries of one (batch, head), over the key tiles up to the diagonal (causal) or T.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    flash_backward_q_kernel(T* dqkv, const T* qkv, const T* dout, const float* lse,
                            const float* dvec, FlashParams p) {
  constexpr int kBk = 64;
  constexpr int kNT = kBk / 8;
  constexpr int kStride = D + kPad;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sdo = sq + kBlockRows * kStride;
  T* sk = sdo + kBlockRows * kStride;  // two buffers
  T* sv = sk + 2 * kBk * kStride;      // two buffers

  const int64_t bh = blockIdx.x;
  const int64_t b = bh / p.NH, h = bh % p.NH;
  const int64_t n_qb = (p.T + kBlockRows - 1) / kBlockRows;
  const int64_t qb = n_qb - 1 - blockIdx.y;
  const int64_t q0 = qb * kBlockRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t ld = 3 * p.C;
  const T* gq = qkv + b * p.T * ld + h * D;
  const T* gk = gq + p.C;
  const T* gv = gq + 2 * p.C;
  const float scale_log2 = p.scale * kLog2e;

  const int64_t row_lo = q0 + warp * kRowsPerWarp + lane / 4;
  float row_lse[2], row_d[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t t = row_lo + r * 8;
    row_lse[r] = t < p.T ? lse[bh * p.T + t] * kLog2e : INFINITY;
    row_d[r] = t < p.T ? dvec[bh * p.T + t] : 0.0f;
  }

  static_assert(kBk == 64, "FlashParams::key_tiles counts 64-key tiles");
  const int64_t n_kt = p.key_tiles(q0, kBlockRows);
  load_tile<T, D, kBlockRows>(sq, gq, ld, q0, p.T);
  load_tile<T, D, kBlockRows>(sdo, dout + b * p.T * p.C + h * D, p.C, q0, p.T);
  load_tile<T, D, kBk>(sk, gk, ld, 0, p.T);
  load_tile<T, D, kBk>(sv, gv, ld, 0, p.T);
  cp_async_commit();

  float dq[D / 8][4] = {};
  for (int64_t j = 0; j < n_kt; ++j) {
    const int buf = static_cast<int>(j % 2);
    if (j + 1 < n_kt) {
      load_tile<T, D, kBk>(sk + (1 - buf) * kBk * kStride, gk, ld, (j + 1) * kBk, p.T);
      load_tile<T, D, kBk>(sv + (1 - buf) * kBk * kStride, gv, ld, (j + 1) * kBk, p.T);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* k = sk + buf * kBk * kStride;
    const T* v = sv + buf * kBk * kStride;

    float s[kNT][4] = {};
    mma_abt<T, D, kNT>(s, sq, warp * kRowsPerWarp, k);
    float dp[kNT][4] = {};
    mma_abt<T, D, kNT>(dp, sdo, warp * kRowsPerWarp, v);  // dP = dO v^T
    const int64_t kbase = j * kBk;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = kbase + nt * 8 + (lane % 4) * 2 + (e % 2);
        const int64_t row = row_lo + (e / 2) * 8;
        const float prob =
            key > p.last_key(row) ? 0.0f : exp2f(s[nt][e] * scale_log2 - row_lse[e / 2]);
        s[nt][e] = prob * (dp[nt][e] - row_d[e / 2]);  // dS, without the scale
      }
    }
    mma_pb<T, D, kNT>(dq, s, k);  // dQ += dS k
    __syncthreads();
  }
  store_rows<T, D>(dqkv + b * p.T * ld + h * D, ld, q0 + warp * kRowsPerWarp, p.T, dq, p.scale);
}

struct FlashShape {
  int64_t B, T, C, NH, HS;
};

FlashShape flash_shape(const Tensor& qkv_like, int num_heads, const char* op) {
  check_cuda(qkv_like, op, "qkv");
  ZT_ASSERT(qkv_like.ndim() == 3 && qkv_like.size(2) % 3 == 0, "{}: qkv must be (B, T, 3C), got {}",
            op, qkv_like.shape().str());
  FlashShape a{};
  a.B = qkv_like.size(0);
  a.T = qkv_like.size(1);
  a.C = qkv_like.size(2) / 3;
  a.NH = num_heads;
  ZT_ASSERT(num_heads > 0 && a.C % num_heads == 0, "{}: C = {} is not divisible by {} heads", op,
            a.C, num_heads);
  a.HS = a.C / num_heads;
  ZT_ASSERT(flash_attention_supported(qkv_like.device(), qkv_like.dtype(), a.HS),
            "{}: {} with head size {} is not supported (see flash_attention_supported)", op,
            dtype_name(qkv_like.dtype()), a.HS);
  ZT_ASSERT(a.T <= (int64_t{1} << 31) / 64 && a.B * a.NH < (int64_t{1} << 31),
            "{}: shape too large", op);
  return a;
}

void check_aligned(const Tensor& t, const char* op, const char* name) {
  ZT_ASSERT(reinterpret_cast<uintptr_t>(t.data()) % 16 == 0, "{}: {} is not 16-byte aligned", op,
            name);
}

// Raises the kernel's dynamic shared-memory limit once (above the default 48 KB needs it).
template <typename K>
void launch_attr(K kernel, size_t smem) {
  ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
}

template <typename F>
void dispatch_flash(DType dt, int64_t hs, F&& f) {
  auto by_hs = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (hs == 64) {
      f.template operator()<T, 64>();
    } else {
      f.template operator()<T, 128>();
    }
  };
  if (dt == DType::bf16) {
    by_hs(TypeTag<bf16>{});
  } else {
    by_hs(TypeTag<f16>{});
  }
}

}  // namespace

void flash_attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads,
                             AttnKind kind, const Stream& s) {
  const char* op = "flash_attention_forward";
  const FlashShape a = flash_shape(qkv, num_heads, op);
  const DType dt = qkv.dtype();
  check_dtype(out, dt, op, "out");
  check_numel(out, a.B * a.T * a.C, op, "out");
  check_dtype(lse, DType::f32, op, "lse");
  check_numel(lse, a.B * a.NH * a.T, op, "lse");
  check_aligned(qkv, op, "qkv");
  check_aligned(out, op, "out");
  if (a.B * a.T == 0) return;
  DeviceGuard guard(qkv.device());
  const bool causal = kind == AttnKind::kCausal;
  if (cudnn_attention_forward(out, lse, qkv, a.B, a.NH, a.NH, a.T, a.HS, causal, s)) return;
  const FlashParams p{a.T, a.C, a.NH, 1.0f / std::sqrt(static_cast<float>(a.HS)), causal};
  const dim3 grid(static_cast<unsigned>(a.B * a.NH),
                  static_cast<unsigned>(ceil_div(a.T, kBlockRows)));
  dispatch_flash(dt, a.HS, [&]<typename T, int D>() {
    const size_t smem = static_cast<size_t>(5 * 64 * (D + kPad)) * sizeof(T);
    static const bool attr = (launch_attr(flash_forward_kernel<T, D>, smem), true);
    (void)attr;
    flash_forward_kernel<T, D><<<grid, kThreads, smem, stream_of(s)>>>(ptr<T>(out), ptr<float>(lse),
                                                                       ptr<const T>(qkv), p);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void flash_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int num_heads, AttnKind kind,
                              const Stream& s) {
  const char* op = "flash_attention_backward";
  const FlashShape a = flash_shape(qkv, num_heads, op);
  const DType dt = qkv.dtype();
  check_dtype(dqkv, dt, op, "dqkv");
  check_numel(dqkv, a.B * a.T * 3 * a.C, op, "dqkv");
  check_dtype(dout, dt, op, "dout");
  check_numel(dout, a.B * a.T * a.C, op, "dout");
  check_dtype(out, dt, op, "out");
  check_numel(out, a.B * a.T * a.C, op, "out");
  check_dtype(lse, DType::f32, op, "lse");
  check_numel(lse, a.B * a.NH * a.T, op, "lse");
  check_aligned(dqkv, op, "dqkv");
  check_aligned(dout, op, "dout");
  check_aligned(qkv, op, "qkv");
  if (a.B * a.T == 0) return;
  DeviceGuard guard(qkv.device());
  check_aligned(out, op, "out");
  const bool causal = kind == AttnKind::kCausal;
  if (cudnn_attention_backward(dqkv, dout, qkv, out, lse, a.B, a.NH, a.NH, a.T, a.HS, causal, s)) {
    return;
  }
  const cudaStream_t stream = stream_of(s);
  const FlashParams p{a.T, a.C, a.NH, 1.0f / std::sqrt(static_cast<float>(a.HS)), causal};
  Tensor dvec = Tensor::empty({a.B, a.NH, a.T}, DType::f32, qkv.device(), s);
  const dim3 grid(static_cast<unsigned>(a.B * a.NH),
                  static_cast<unsigned>(ceil_div(a.T, kBlockRows)));
  dispatch_flash(dt, a.HS, [&]<typename T, int D>() {
    constexpr int kDvecThreads = 256;
    flash_dvec_kernel<T>
        <<<grid_for(a.B * a.T * a.NH * kWarpSize, kDvecThreads), kDvecThreads, 0, stream>>>(
            ptr<float>(dvec), ptr<const T>(dout), ptr<const T>(out), a.B, p,
            static_cast<int>(a.HS));
    ZT_CUDA_CHECK_LAUNCH();
    constexpr int kBq = D == 128 ? 32 : 64;
    const size_t smem_kv =
        static_cast<size_t>((2 * 64 + 4 * kBq) * (D + kPad)) * sizeof(T) + 4 * kBq * sizeof(float);
    static const bool attr_kv = (launch_attr(flash_backward_kv_kernel<T, D>, smem_kv), true);
    (void)attr_kv;
    flash_backward_kv_kernel<T, D>
        <<<grid, kThreads, smem_kv, stream>>>(ptr<T>(dqkv), ptr<const T>(qkv), ptr<const T>(dout),
                                              ptr<const float>(lse), ptr<const float>(dvec), p);
    ZT_CUDA_CHECK_LAUNCH();
    const size_t smem_q = static_cast<size_t>(6 * 64 * (D + kPad)) * sizeof(T);
    static const bool attr_q = (launch_attr(flash_backward_q_kernel<T, D>, smem_q), true);
    (void)attr_q;
    flash_backward_q_kernel<T, D>
        <<<grid, kThreads, smem_q, stream>>>(ptr<T>(dqkv), ptr<const T>(qkv), ptr<const T>(dout),
                                             ptr<const float>(lse), ptr<const float>(dvec), p);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

// Grouped-query heads: cuDNN reads the KV heads in place; where it does not run (not installed,
// declined, ZT_ATTENTION_BACKEND=own), the heads are expanded into the multi-head layout for
// flash_attention_* (and the gradients summed back). KV = NH is flash_attention_* itself.
namespace {

struct GqaShape {
  QkvDims q;
  int64_t HS;
};

GqaShape gqa_shape(const Tensor& qkv, int num_heads, int num_kv_heads, const Tensor& out,
                   const Tensor& lse, const char* op) {
  check_cuda(qkv, op, "qkv");
  const QkvDims q = qkv_dims(qkv, num_heads, num_kv_heads, nullptr, nullptr, 0, op);
  ZT_ASSERT(flash_attention_supported(qkv.device(), qkv.dtype(), q.HS),
            "{}: {} with head size {} is not supported (see flash_attention_supported)", op,
            dtype_name(qkv.dtype()), q.HS);
  check_dtype(out, qkv.dtype(), op, "out");
  check_numel(out, q.B * q.T * q.NH * q.HS, op, "out");
  check_dtype(lse, DType::f32, op, "lse");
  check_numel(lse, q.B * q.NH * q.T, op, "lse");
  check_aligned(qkv, op, "qkv");
  check_aligned(out, op, "out");
  return {q, q.HS};
}

}  // namespace

void gqa_attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads,
                           int num_kv_heads, AttnKind kind, const Stream& s) {
  const char* op = "gqa_attention_forward";
  const GqaShape g = gqa_shape(qkv, num_heads, num_kv_heads, out, lse, op);
  if (g.q.KV == g.q.NH) return cuda::flash_attention_forward(out, lse, qkv, num_heads, kind, s);
  if (g.q.B * g.q.T == 0) return;
  DeviceGuard guard(qkv.device());
  if (cudnn_attention_forward(out, lse, qkv, g.q.B, g.q.NH, g.q.KV, g.q.T, g.HS,
                              kind == AttnKind::kCausal, s)) {
    return;
  }
  Tensor full = Tensor::empty({g.q.B, g.q.T, 3 * g.q.NH * g.HS}, qkv.dtype(), qkv.device(), s);
  cuda::qkv_expand_forward(full, qkv, num_heads, num_kv_heads, nullptr, nullptr, 0, s);
  cuda::flash_attention_forward(out, lse, full, num_heads, kind, s);
}

void gqa_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                            const Tensor& lse, int num_heads, int num_kv_heads, AttnKind kind,
                            const Stream& s) {
  const char* op = "gqa_attention_backward";
  const GqaShape g = gqa_shape(qkv, num_heads, num_kv_heads, out, lse, op);
  check_dtype(dqkv, qkv.dtype(), op, "dqkv");
  check_numel(dqkv, qkv.numel(), op, "dqkv");
  check_dtype(dout, qkv.dtype(), op, "dout");
  check_numel(dout, out.numel(), op, "dout");
  check_aligned(dqkv, op, "dqkv");
  check_aligned(dout, op, "dout");
  if (g.q.KV == g.q.NH) {
    return cuda::flash_attention_backward(dqkv, dout, qkv, out, lse, num_heads, kind, s);
  }
  if (g.q.B * g.q.T == 0) return;
  DeviceGuard guard(qkv.device());
  if (cudnn_attention_backward(dqkv, dout, qkv, out, lse, g.q.B, g.q.NH, g.q.KV, g.q.T, g.HS,
                               kind == AttnKind::kCausal, s)) {
    return;
  }
  const Shape full_shape{g.q.B, g.q.T, 3 * g.q.NH * g.HS};
  Tensor full = Tensor::empty(full_shape, qkv.dtype(), qkv.device(), s);
  cuda::qkv_expand_forward(full, qkv, num_heads, num_kv_heads, nullptr, nullptr, 0, s);
  Tensor dfull = Tensor::empty(full_shape, qkv.dtype(), qkv.device(), s);
  cuda::flash_attention_backward(dfull, dout, full, out, lse, num_heads, kind, s);
  cuda::qkv_expand_backward(dqkv, dfull, num_heads, num_kv_heads, nullptr, nullptr, 0, s);
}

}  // namespace zt::kernels::cuda
