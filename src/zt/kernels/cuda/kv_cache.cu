// CUDA generation with a KV cache (contracts in kernels/op_table.inc), as the CPU reference
// kernels/cpu/kv_cache.cc.
// kv_cache_update: one launch, one thread per pair (i, i + HS/2) of a head with rotary (per
// element without), writing q_out and the caches' rows past_len .. past_len + T - 1.
// attention_cached is written for decoding, where a step (T = 1) is bound by reading the cache
// and B * NH query rows are far fewer than the GPU has SMs: each row's keys are split into
// chunks, one block per (row, chunk) ("flash-decoding"), so that enough cache reads are in flight
// to approach the memory bandwidth. In a block, warps take kKeysPerStep keys at a time, issuing
// all their loads before any reduction; each lane holds kDims contiguous head dimensions of q and
// of its running output, so a key row is one coalesced (vectorised where aligned) read. Each warp
// keeps an online softmax (running max, sum, rescaled accumulator) in base 2 (scores
// pre-multiplied by log2(e)); the warps merge through shared memory. With one chunk per row (many
// rows, or short caches) the block writes the output: one launch. With several, the blocks write
// unnormalised partials (max, sum, accumulator) to an f32 workspace and a second, small kernel
// merges them. Arithmetic in f32; any T and maxT; HS <= 32 * kMaxDimsPerLane = 256. Cache rows
// after past_len + t are never read.
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/cuda/rotary.cuh"
#include "zt/kernels/qkv_layout.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kUpdateThreads = 256;

constexpr int kCachedWarps = 4;
constexpr int kCachedThreads = kCachedWarps * kWarpSize;
constexpr int kMaxDimsPerLane = 8;
constexpr float kLog2e = 1.4426950408889634f;
// A chunk of keys is at least this long: shorter ones would cost more in merging than they gain.
constexpr int64_t kMinChunkKeys = 256;

// Keys a warp loads before it reduces any of them: several independent row reads in flight hide
// the memory latency that one key at a time would expose. Bounded so that the loaded k and v
// values (2 kKeysPerStep kDims floats a lane) stay in registers.
template <int kDims>
constexpr int kKeysPerStep = kDims >= 8 ? 4 : 8;

struct UpdateDims {
  int64_t T, NH, KV, HS, maxT, lanes, past_len;
};

// qkv (BT, (NH+2KV) HS); n = BT * (NH+2KV) * lanes.
template <typename T>
__global__ void kv_cache_update_kernel(T* q_out, T* k_cache, T* v_cache, const T* qkv,
                                       RotaryTables rt, UpdateDims d, int64_t n) {
  const int64_t heads = d.NH + 2 * d.KV;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % d.lanes;
    const int64_t hd = (idx / d.lanes) % heads;
    const int64_t bt = idx / (d.lanes * heads);
    const int64_t b = bt / d.T;
    const int64_t pos = d.past_len + bt % d.T;
    const T* src = qkv + (bt * heads + hd) * d.HS;
    T* dst;
    bool rotated = true;
    if (hd < d.NH) {
      dst = q_out + (bt * d.NH + hd) * d.HS;
    } else if (hd < d.NH + d.KV) {
      dst = k_cache + ((b * d.KV + hd - d.NH) * d.maxT + pos) * d.HS;
    } else {
      dst = v_cache + ((b * d.KV + hd - d.NH - d.KV) * d.maxT + pos) * d.HS;
      rotated = false;
    }
    if (rt.cos == nullptr) {
      dst[i] = src[i];
    } else if (!rotated) {
      dst[i] = src[i];
      dst[i + rt.half] = src[i + rt.half];
    } else {
      const float2 y = rotary_pair(rt, pos, i, to_f32(src[i]), to_f32(src[i + rt.half]), 1.0f);
      dst[i] = from_f32<T>(y.x);
      dst[i + rt.half] = from_f32<T>(y.y);
    }
  }
}

// How a lane reads its kDims elements of a k or v row: one vector load (the rows start on a
// kDims * sizeof(T) boundary and HS is a multiple of kDims), or element by element.
enum class RowLoad : unsigned char { kVector, kScalar };

// A lane's kDims raw elements of one row. Loads are unconditional (callers clamp the address to
// a valid row and element) so that a warp issues all of a step's loads back to back: a load under
// a branch would wait for the previous one to be converted first, exposing each latency in turn.
template <typename T, int kDims, RowLoad kLoad>
struct RowChunk {
  static constexpr int kBytes = kDims * static_cast<int>(sizeof(T));
  struct alignas(kBytes < 16 ? kBytes : 16) Vec {
    T v[kDims];
  };
  Vec raw;

  // `src` points at the lane's first element; `last` is the index of the row's last element
  // relative to it (elements past it are read from there instead: never past the row).
  __device__ __forceinline__ void load(const T* src, int64_t last) {
    if constexpr (kLoad == RowLoad::kVector) {
      raw = *reinterpret_cast<const Vec*>(src);
    } else {
#pragma unroll
      for (int j = 0; j < kDims; ++j) raw.v[j] = src[j < last ? j : last];
    }
  }
  __device__ __forceinline__ float operator[](int j) const {
    return to_f32(raw.v[j]);
  }
};

// Where a block writes: the output (one chunk per row) or its chunk's partial result.
struct CachedOutput {
  void* out = nullptr;             // T (B,T,NH*HS) when chunks == 1
  float* partial_acc = nullptr;    // (rows, chunks, HS) unnormalised sum of p v
  float* partial_stats = nullptr;  // (rows, chunks, 2): running max (base 2) and sum of p
  int64_t chunks = 1;
  int64_t chunk_keys = 0;  // keys per chunk, a multiple of the block's keys per step
};

// Block (row, chunk): row = blockIdx.x = (b T + t) NH + h, the order of out's (B,T,NH,HS) rows;
// chunk = blockIdx.y. kDims head dimensions per lane, HS <= 32 kDims; lane owns dimensions
// [lane kDims, lane kDims + kDims) that are < HS (the rest it reads, clamped, and ignores).
template <typename T, int kDims, RowLoad kLoad>
__global__ void __launch_bounds__(kCachedThreads)
    attention_cached_kernel(const T* q, const T* k_cache, const T* v_cache, CachedAttentionDims d,
                            float scale_log2, CachedOutput o) {
  constexpr int kKeys = kKeysPerStep<kDims>;
  __shared__ float s_max[kCachedWarps];
  __shared__ float s_sum[kCachedWarps];
  __shared__ float s_acc[kCachedWarps][kWarpSize * kDims];

  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int64_t row = blockIdx.x;
  const int64_t h = row % d.NH;
  const int64_t t = (row / d.NH) % d.T;
  const int64_t b = row / (d.NH * d.T);
  const int64_t len = d.past_len + t + 1;  // keys 0 .. past_len + t
  const int64_t begin = blockIdx.y * o.chunk_keys;
  // end <= begin: a chunk past this row's last key (rows differ in length when T > 1).
  const int64_t end = len < begin + o.chunk_keys ? len : begin + o.chunk_keys;
  const int64_t kv_rows = (b * d.KV + h / (d.NH / d.KV)) * d.maxT;
  const T* k = k_cache + kv_rows * d.HS;
  const T* v = v_cache + kv_rows * d.HS;
  // A lane wholly past HS reads from the row's start instead (its values are never used).
  const int64_t d0 =
      static_cast<int64_t>(lane) * kDims < d.HS ? static_cast<int64_t>(lane) * kDims : 0;
  const bool lane_busy = static_cast<int64_t>(lane) * kDims < d.HS;
  const int64_t last = d.HS - 1 - d0;  // the row's last element, relative to d0

  float qr[kDims];
  {
    RowChunk<T, kDims, RowLoad::kScalar> qc;
    qc.load(q + row * d.HS + d0, last);
#pragma unroll
    for (int j = 0; j < kDims; ++j) {
      // Zero outside this lane's dimensions, so clamped reads add nothing to the scores.
      qr[j] = lane_busy && j <= last ? qc[j] * scale_log2 : 0.0f;
    }
  }

  float run_max = -INFINITY;
  float run_sum = 0.0f;
  float acc[kDims];
#pragma unroll
  for (int j = 0; j < kDims; ++j) acc[j] = 0.0f;

  for (int64_t u0 = begin + static_cast<int64_t>(warp) * kKeys; u0 < end;
       u0 += kCachedWarps * kKeys) {
    // Every load of the step first. A key at or past `end` reads key u0 instead (in range; past
    // `len` the cache may hold anything) and gets probability 0 below.
    RowChunk<T, kDims, kLoad> kc[kKeys];
    RowChunk<T, kDims, kLoad> vc[kKeys];
#pragma unroll
    for (int kk = 0; kk < kKeys; ++kk) {
      const int64_t u = u0 + kk < end ? u0 + kk : u0;
      kc[kk].load(k + u * d.HS + d0, last);
      vc[kk].load(v + u * d.HS + d0, last);
    }
    float score[kKeys];
#pragma unroll
    for (int kk = 0; kk < kKeys; ++kk) {
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < kDims; ++j) dot += qr[j] * kc[kk][j];
      score[kk] = warp_sum(dot);
    }
    float step_max = run_max;
#pragma unroll
    for (int kk = 0; kk < kKeys; ++kk) {
      if (u0 + kk < end) step_max = fmaxf(step_max, score[kk]);
    }
    // Key u0 is in range, so step_max is finite and the first rescale is exp2(-inf) = 0.
    const float rescale = exp2f(run_max - step_max);
    run_sum *= rescale;
#pragma unroll
    for (int j = 0; j < kDims; ++j) acc[j] *= rescale;
#pragma unroll
    for (int kk = 0; kk < kKeys; ++kk) {
      const float p = u0 + kk < end ? exp2f(score[kk] - step_max) : 0.0f;
      run_sum += p;
#pragma unroll
      for (int j = 0; j < kDims; ++j) acc[j] += p * vc[kk][j];
    }
    run_max = step_max;
  }

  // Merge the warps: a warp that had no key holds max -inf, sum 0, acc 0 and weighs 0.
  const int64_t s0 = static_cast<int64_t>(lane) * kDims;  // this lane's slots in s_acc
  if (lane == 0) {
    s_max[warp] = run_max;
    s_sum[warp] = run_sum;
  }
#pragma unroll
  for (int j = 0; j < kDims; ++j) s_acc[warp][s0 + j] = acc[j];
  __syncthreads();
  float block_max = -INFINITY;
#pragma unroll
  for (int w = 0; w < kCachedWarps; ++w) block_max = fmaxf(block_max, s_max[w]);
  if (block_max == -INFINITY) {  // no key in this chunk (only with chunks > 1)
    if (threadIdx.x == 0) {
      o.partial_stats[(row * o.chunks + blockIdx.y) * 2] = -INFINITY;
      o.partial_stats[(row * o.chunks + blockIdx.y) * 2 + 1] = 0.0f;
    }
    return;
  }
  float weights[kCachedWarps];
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kCachedWarps; ++w) {
    weights[w] = exp2f(s_max[w] - block_max);
    total += s_sum[w] * weights[w];
  }
  if (o.chunks == 1) {
    T* out = static_cast<T*>(o.out) + row * d.HS;
    for (int64_t i = threadIdx.x; i < d.HS; i += blockDim.x) {
      float num = 0.0f;
#pragma unroll
      for (int w = 0; w < kCachedWarps; ++w) num += s_acc[w][i] * weights[w];
      out[i] = from_f32<T>(num / total);
    }
  } else {
    float* acc_out = o.partial_acc + (row * o.chunks + blockIdx.y) * d.HS;
    for (int64_t i = threadIdx.x; i < d.HS; i += blockDim.x) {
      float num = 0.0f;
#pragma unroll
      for (int w = 0; w < kCachedWarps; ++w) num += s_acc[w][i] * weights[w];
      acc_out[i] = num;
    }
    if (threadIdx.x == 0) {
      o.partial_stats[(row * o.chunks + blockIdx.y) * 2] = block_max;
      o.partial_stats[(row * o.chunks + blockIdx.y) * 2 + 1] = total;
    }
  }
}

// Merges a row's chunk partials: out = sum_c acc_c 2^(m_c - M) / sum_c l_c 2^(m_c - M),
// M = max_c m_c (finite: chunk 0 holds key 0). One block per row (out's row order), a thread
// per head dimension.
template <typename T>
__global__ void attention_cached_merge_kernel(T* out, const float* partial_acc,
                                              const float* partial_stats, int64_t chunks,
                                              int64_t HS) {
  const int64_t row = blockIdx.x;
  const float* stats = partial_stats + row * chunks * 2;
  float m = -INFINITY;
  for (int64_t c = 0; c < chunks; ++c) m = fmaxf(m, stats[2 * c]);
  float total = 0.0f;
  // A chunk without keys (max -inf) wrote no accumulator: skip it rather than weigh garbage by 0.
  for (int64_t c = 0; c < chunks; ++c) {
    if (stats[2 * c] != -INFINITY) total += stats[2 * c + 1] * exp2f(stats[2 * c] - m);
  }
  const float inv = 1.0f / total;
  for (int64_t i = threadIdx.x; i < HS; i += blockDim.x) {
    float num = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
      if (stats[2 * c] != -INFINITY) {
        num += partial_acc[(row * chunks + c) * HS + i] * exp2f(stats[2 * c] - m);
      }
    }
    out[row * HS + i] = from_f32<T>(num * inv);
  }
}


template <typename T, int kDims>
void attention_cached_launch(Tensor& out, const Tensor& q, const Tensor& k_cache,
                             const Tensor& v_cache, const CachedAttentionDims& d, const Stream& s) {
  const int64_t rows = d.B * d.NH * d.T;
  ZT_ASSERT(rows < (int64_t{1} << 31), "attention_cached: B*NH*T = {} rows is too many", rows);
  // Chunks per row: enough blocks for a few per SM, each chunk at least kMinChunkKeys long.
  const int64_t max_len = d.past_len + d.T;
  const int64_t want = ceil_div(4 * static_cast<int64_t>(sm_count()), rows);
  const int64_t step = static_cast<int64_t>(kCachedWarps) * kKeysPerStep<kDims>;
  CachedOutput o;
  o.chunks = std::max<int64_t>(1, std::min(want, max_len / kMinChunkKeys));
  o.chunk_keys = ceil_div(ceil_div(max_len, o.chunks), step) * step;
  o.chunks = ceil_div(max_len, o.chunk_keys);
  constexpr size_t kAlign = std::min<size_t>(kDims * sizeof(T), 16);
  const bool vector_rows = d.HS % kDims == 0 &&
                           reinterpret_cast<uintptr_t>(k_cache.data()) % kAlign == 0 &&
                           reinterpret_cast<uintptr_t>(v_cache.data()) % kAlign == 0;
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(d.HS));
  Tensor partial_acc, partial_stats;
  if (o.chunks == 1) {
    o.out = out.data();
  } else {
    partial_acc = Tensor::empty({rows, o.chunks, d.HS}, DType::f32, q.device(), s);
    partial_stats = Tensor::empty({rows, o.chunks, 2}, DType::f32, q.device(), s);
    o.partial_acc = ptr<float>(partial_acc);
    o.partial_stats = ptr<float>(partial_stats);
  }
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(o.chunks));
  if (vector_rows) {
    attention_cached_kernel<T, kDims, RowLoad::kVector><<<grid, kCachedThreads, 0, stream_of(s)>>>(
        ptr<const T>(q), ptr<const T>(k_cache), ptr<const T>(v_cache), d, scale_log2, o);
  } else {
    attention_cached_kernel<T, kDims, RowLoad::kScalar><<<grid, kCachedThreads, 0, stream_of(s)>>>(
        ptr<const T>(q), ptr<const T>(k_cache), ptr<const T>(v_cache), d, scale_log2, o);
  }
  ZT_CUDA_CHECK_LAUNCH();
  if (o.chunks > 1) {
    const int threads =
        static_cast<int>(std::min<int64_t>(ceil_div(d.HS, kWarpSize), 8)) * kWarpSize;
    attention_cached_merge_kernel<T><<<static_cast<unsigned>(rows), threads, 0, stream_of(s)>>>(
        ptr<T>(out), o.partial_acc, o.partial_stats, o.chunks, d.HS);
    ZT_CUDA_CHECK_LAUNCH();
  }
}

// `t` must share `ref`'s dtype and device.
void check_like(const Tensor& t, const Tensor& ref, const char* op, const char* name) {
  check_dtype(t, ref.dtype(), op, name);
  check_same_device(ref, t, op);
}

}  // namespace

void kv_cache_update(Tensor& q_out, Tensor& k_cache, Tensor& v_cache, const Tensor& qkv,
                     int num_heads, int num_kv_heads, const Tensor* cos, const Tensor* sin,
                     int64_t past_len, const Stream& s) {
  const char* op = "kv_cache_update";
  check_cuda(qkv, op, "qkv");
  check_like(q_out, qkv, op, "q_out");
  check_like(k_cache, qkv, op, "k_cache");
  check_like(v_cache, qkv, op, "v_cache");
  const QkvDims q = qkv_dims(qkv, num_heads, num_kv_heads, cos, sin, past_len, op);
  const int64_t maxT = kv_cache_update_check(q_out, k_cache, v_cache, q, past_len, op);
  const UpdateDims d{q.T, q.NH, q.KV, q.HS, maxT, cos != nullptr ? q.HS / 2 : q.HS, past_len};
  const int64_t n = q.B * q.T * (q.NH + 2 * q.KV) * d.lanes;
  if (n == 0) return;
  const RotaryTables rt =
      cos != nullptr ? RotaryTables{ptr<const float>(*cos), ptr<const float>(*sin), q.HS / 2}
                     : RotaryTables{};
  DeviceGuard guard(qkv.device());
  dispatch_compute(qkv.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kv_cache_update_kernel<T><<<grid_for(n, kUpdateThreads), kUpdateThreads, 0, stream_of(s)>>>(
        ptr<T>(q_out), ptr<T>(k_cache), ptr<T>(v_cache), ptr<const T>(qkv), rt, d, n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void attention_cached(Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      int num_heads, int num_kv_heads, int64_t past_len, const Stream& s) {
  const char* op = "attention_cached";
  check_cuda(q, op, "q");
  check_like(out, q, op, "out");
  check_like(k_cache, q, op, "k_cache");
  check_like(v_cache, q, op, "v_cache");
  const CachedAttentionDims d =
      attention_cached_dims(out, q, k_cache, v_cache, num_heads, num_kv_heads, past_len, op);
  ZT_ASSERT(d.HS <= kWarpSize * kMaxDimsPerLane,
            "attention_cached: head size {} exceeds the CUDA kernel's {}", d.HS,
            kWarpSize * kMaxDimsPerLane);
  if (d.B * d.NH * d.T == 0) return;
  DeviceGuard guard(q.device());
  dispatch_compute(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (d.HS <= kWarpSize) {
      attention_cached_launch<T, 1>(out, q, k_cache, v_cache, d, s);
    } else if (d.HS <= 2 * kWarpSize) {
      attention_cached_launch<T, 2>(out, q, k_cache, v_cache, d, s);
    } else if (d.HS <= 4 * kWarpSize) {
      attention_cached_launch<T, 4>(out, q, k_cache, v_cache, d, s);
    } else {
      attention_cached_launch<T, kMaxDimsPerLane>(out, q, k_cache, v_cache, d, s);
    }
  });
}

}  // namespace zt::kernels::cuda
