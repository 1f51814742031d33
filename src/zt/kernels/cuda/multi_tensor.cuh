// Multi-tensor apply for the optimizers (after apex's multi_tensor_apply): one launch updates many
// flat f32 chunks. The chunk pointers and each chunk's first tile travel in a kernel parameter
// struct of fixed capacity (about 11 KiB: CUDA 12.1+ takes kernel parameters up to 32 KiB on Volta
// and later), so there is no host-to-device copy and no synchronisation; more chunks than fit take
// more launches. Each block updates one tile of kMtTile elements and finds its chunk by a binary
// search of the first tiles, so one launch covers every tile of up to kMtMaxChunks chunks: a whole
// model's step is one launch of ~160K blocks at 1.3B parameters (the earlier fixed block table
// took 126 launches of 1280 blocks there, each ending in a partial wave).
// A thread updates four elements at a time with 128-bit loads when every pointer of the chunk is
// aligned. An Op says which arrays it loads and stores (compile-time masks) and what it does to one
// element; the updated parameter is also written to the chunk's optional 16-bit copy in the same
// pass.
#pragma once

#include "zt/kernels/cuda/cuda_common.cuh"  // first: see its note on fmt

#include <cmath>
#include <span>

#include "zt/kernels/ops.h"

namespace zt::kernels::cuda {

constexpr int kMtMaxChunks = 192;
constexpr int kMtThreads = 256;
constexpr int64_t kMtTile = 8192;  // elements per block: 8 vectors of 4 per thread

enum class LowpKind : unsigned char { kNone, kBf16, kF16 };
enum class VectorLoads : unsigned char { kNo, kYes };

struct MtChunk {
  float* param;
  const float* grad;
  float* state1;
  float* state2;
  void* lowp;
  int64_t n;
  int32_t index;  // position in the caller's chunk list (per-chunk scratch of Lamb)
  LowpKind lowp_kind;
  VectorLoads vector;
};

struct MtBatch {
  MtChunk chunks[kMtMaxChunks];
  // Chunk c's tiles are blocks [first_tile[c], first_tile[c + 1]) of the launch.
  int32_t first_tile[kMtMaxChunks + 1];
  int32_t count;  // chunks in this launch
};
static_assert(sizeof(MtBatch) <= 16384, "multi-tensor batch must fit the kernel parameter space");

// Which arrays of a chunk an Op touches.
enum MtArrays : unsigned {
  kMtParam = 1u,
  kMtGrad = 2u,
  kMtState1 = 4u,
  kMtState2 = 8u,
};

// Four consecutive elements of each array (fewer at the end of a chunk).
struct MtPack {
  float p[4];
  float g[4];
  float s1[4];
  float s2[4];
};

__device__ __forceinline__ void mt_load4(float* dst, const float* src, int64_t i, int cnt,
                                         VectorLoads vec) {
  if (vec == VectorLoads::kYes && cnt == 4) {
    const float4 v = *reinterpret_cast<const float4*>(src + i);
    dst[0] = v.x;
    dst[1] = v.y;
    dst[2] = v.z;
    dst[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) dst[j] = j < cnt ? src[i + j] : 0.0f;
  }
}

__device__ __forceinline__ void mt_store4(float* dst, const float* src, int64_t i, int cnt,
                                          VectorLoads vec) {
  if (vec == VectorLoads::kYes && cnt == 4) {
    *reinterpret_cast<float4*>(dst + i) = make_float4(src[0], src[1], src[2], src[3]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j < cnt) dst[i + j] = src[j];
    }
  }
}

template <typename T>
__device__ __forceinline__ void mt_store_lowp4(void* dst, const float* src, int64_t i, int cnt,
                                               VectorLoads vec) {
  T* d = static_cast<T*>(dst) + i;
  if (vec == VectorLoads::kYes && cnt == 4) {
    union {
      T h[4];
      uint2 u;
    } pack;
#pragma unroll
    for (int j = 0; j < 4; ++j) pack.h[j] = from_f32<T>(src[j]);
    *reinterpret_cast<uint2*>(d) = pack.u;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j < cnt) d[j] = from_f32<T>(src[j]);
    }
  }
}

// Op: static constexpr unsigned kLoads, kStores (MtArrays masks); struct Partial (per-thread
// values, e.g. Lamb's sums of squares or its trust ratio); __device__ void begin(const MtChunk&,
// Partial&) and finish(const MtChunk&, Partial&), called by every thread of the block before and
// after its elements; __device__ void apply(MtPack&, int j, Partial&) for element j of a pack.
template <typename Op>
__global__ void __launch_bounds__(kMtThreads)
    multi_tensor_kernel(const __grid_constant__ MtBatch batch, const Op op) {
  // The last chunk whose first tile is at or before this block (every chunk has a tile).
  const int32_t b = static_cast<int32_t>(blockIdx.x);
  int lo = 0, hi = batch.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (batch.first_tile[mid] <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const MtChunk& c = batch.chunks[lo];
  const int64_t start = static_cast<int64_t>(b - batch.first_tile[lo]) * kMtTile;
  const int64_t end = start + kMtTile < c.n ? start + kMtTile : c.n;
  typename Op::Partial part{};
  op.begin(c, part);
  for (int64_t i = start + 4 * static_cast<int64_t>(threadIdx.x); i < end;
       i += 4 * static_cast<int64_t>(blockDim.x)) {
    const int cnt = end - i < 4 ? static_cast<int>(end - i) : 4;
    MtPack k;
    if constexpr ((Op::kLoads & kMtParam) != 0) mt_load4(k.p, c.param, i, cnt, c.vector);
    if constexpr ((Op::kLoads & kMtGrad) != 0) mt_load4(k.g, c.grad, i, cnt, c.vector);
    if constexpr ((Op::kLoads & kMtState1) != 0) {
      if (c.state1 != nullptr) mt_load4(k.s1, c.state1, i, cnt, c.vector);
    }
    if constexpr ((Op::kLoads & kMtState2) != 0) mt_load4(k.s2, c.state2, i, cnt, c.vector);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j < cnt) op.apply(k, j, part);
    }
    if constexpr ((Op::kStores & kMtParam) != 0) {
      mt_store4(c.param, k.p, i, cnt, c.vector);
      if (c.lowp_kind == LowpKind::kBf16) mt_store_lowp4<bf16>(c.lowp, k.p, i, cnt, c.vector);
      if (c.lowp_kind == LowpKind::kF16) mt_store_lowp4<f16>(c.lowp, k.p, i, cnt, c.vector);
    }
    if constexpr ((Op::kStores & kMtState1) != 0) {
      if (c.state1 != nullptr) mt_store4(c.state1, k.s1, i, cnt, c.vector);
    }
    if constexpr ((Op::kStores & kMtState2) != 0) mt_store4(c.state2, k.s2, i, cnt, c.vector);
  }
  op.finish(c, part);
}

// The device of the chunks: the stream's, or that of the first parameter pointer (a default
// Stream carries no device).
Device optim_device(std::span<const OptimChunk> chunks, const Stream& s);

// Checks the chunks for an Op's needs (`required` arrays must be non-null) and converts them.
MtChunk mt_chunk(const OptimChunk& c, int32_t index, unsigned required, const char* op);

// Launches multi_tensor_kernel<Op> over every tile of every chunk: one launch per kMtMaxChunks
// chunks (empty chunks take none).
template <typename Op>
void multi_tensor_apply(std::span<const MtChunk> chunks, const Op& op, cudaStream_t stream) {
  MtBatch batch{};
  int64_t tiles = 0;
  auto launch = [&] {
    if (batch.count > 0) {
      batch.first_tile[batch.count] = static_cast<int32_t>(tiles);
      multi_tensor_kernel<Op>
          <<<static_cast<unsigned>(tiles), kMtThreads, 0, stream>>>(batch, op);
      ZT_CUDA_CHECK_LAUNCH();
    }
    batch.count = 0;
    tiles = 0;
  };
  // A launch's blocks are counted in int32 (2^31 tiles of 8192: far beyond any device's memory,
  // but a launch is closed before it could get there).
  constexpr int64_t kMaxTiles = int64_t{1} << 30;
  for (const MtChunk& c : chunks) {
    const int64_t t = ceil_div(c.n, kMtTile);
    if (t == 0) continue;
    ZT_ASSERT(t <= kMaxTiles, "multi_tensor_apply: a chunk of {} elements", c.n);
    if (batch.count == kMtMaxChunks || tiles + t > kMaxTiles) launch();
    batch.chunks[batch.count] = c;
    batch.first_tile[batch.count] = static_cast<int32_t>(tiles);
    ++batch.count;
    tiles += t;
  }
  launch();
}

// Bias corrections 1 - beta^step (1 when off), in double on the host as DeepSpeed does.
inline float bias_correction(float beta, int64_t step, BiasCorrection bc) {
  if (bc == BiasCorrection::kOff) return 1.0f;
  return static_cast<float>(1.0 - std::pow(static_cast<double>(beta), static_cast<double>(step)));
}

}  // namespace zt::kernels::cuda
