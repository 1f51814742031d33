// CUDA rotary + grouped-query expansion of a fused q/k/v projection, and the in-place rotary of
// its q and k (rotary_qk_*) (contracts in kernels/op_table.inc), as the CPU reference
// kernels/cpu/qkv_expand.cc. One launch per op, a
// grid-stride loop with one thread per output pair (i, i + HS/2) of a head when rotary is on (the
// two values a rotation mixes), per output element when it is off. The backward gives each thread
// one pair of din and sums the group's out-heads in f32 before rotating back, so din is written
// without atomics.
//
// Where a head's lanes split into 16-byte chunks (HS/2 or HS a multiple of 8 bf16 values) and the
// pointers allow it, the _vec kernels do the same arithmetic on whole chunks instead: each thread
// a chunk (pair) of one input head, the forward storing it to every out-head of its group, and the
// rotary tables read as float4s. The plain kernels' per-element divisions and 2-byte accesses ran
// at about a tenth of the memory bandwidth; the _vec kernels run at 1.6-2.6 TB/s on an H100 (Llama
// 1B at 4 x 2048 tokens: 92 us forward and 64 us backward a layer, against 236 and 173 for an
// earlier block-per-row layout, and 70 us to copy the expanded tensor's bytes once).
#include <algorithm>

#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/cuda/rotary.cuh"
#include "zt/kernels/qkv_layout.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

#define ZT_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The dimensions a kernel needs; `lanes` = HS/2 with rotary (pairs), HS without (elements).
struct ExpandDims {
  int64_t T, NH, KV, HS, lanes, pos_offset;
};

// in (BT, (NH+2KV) HS) -> out (BT, 3 NH HS); n = BT * 3 NH * lanes.
template <typename T>
__global__ void qkv_expand_forward_kernel(T* out, const T* in, RotaryTables rt, ExpandDims d,
                                          int64_t n) {
  const int64_t group = d.NH / d.KV;
  ZT_GRID_STRIDE(idx, n) {
    const int64_t i = idx % d.lanes;
    const int64_t slot_head = (idx / d.lanes) % (3 * d.NH);  // slot (q, k, v) * NH + head
    const int64_t bt = idx / (d.lanes * 3 * d.NH);
    const int64_t slot = slot_head / d.NH;
    const int64_t h = slot_head % d.NH;
    const int64_t src_head = slot == 0 ? h : d.NH + (slot - 1) * d.KV + h / group;
    const T* src = in + (bt * (d.NH + 2 * d.KV) + src_head) * d.HS;
    T* dst = out + (bt * 3 * d.NH + slot_head) * d.HS;
    if (rt.cos == nullptr) {
      dst[i] = src[i];
    } else if (slot == 2) {  // v is not rotated
      dst[i] = src[i];
      dst[i + rt.half] = src[i + rt.half];
    } else {
      const float2 y = rotary_pair(rt, d.pos_offset + bt % d.T, i, to_f32(src[i]),
                                   to_f32(src[i + rt.half]), 1.0f);
      dst[i] = from_f32<T>(y.x);
      dst[i + rt.half] = from_f32<T>(y.y);
    }
  }
}

// dout (BT, 3 NH HS) -> din (BT, (NH+2KV) HS); n = BT * (NH+2KV) * lanes.
template <typename T>
__global__ void qkv_expand_backward_kernel(T* din, const T* dout, RotaryTables rt, ExpandDims d,
                                           int64_t n) {
  const int64_t group = d.NH / d.KV;
  const int64_t heads = d.NH + 2 * d.KV;
  const int64_t C = d.NH * d.HS;
  ZT_GRID_STRIDE(idx, n) {
    const int64_t i = idx % d.lanes;
    const int64_t hd = (idx / d.lanes) % heads;
    const int64_t bt = idx / (d.lanes * heads);
    const T* g = dout + bt * 3 * C;
    T* dst = din + (bt * heads + hd) * d.HS;
    // The out-heads whose gradients flow into this input head, and where they sit in dout.
    int64_t first = hd;
    int64_t count = 1;
    const T* src = g;
    bool rotated = true;
    if (hd >= d.NH + d.KV) {
      first = (hd - d.NH - d.KV) * group;
      count = group;
      src = g + 2 * C;
      rotated = false;
    } else if (hd >= d.NH) {
      first = (hd - d.NH) * group;
      count = group;
      src = g + C;
    }
    float x1 = 0.0f;
    float x2 = 0.0f;
    for (int64_t h = first; h < first + count; ++h) {
      x1 += to_f32(src[h * d.HS + i]);
      if (rt.cos != nullptr) x2 += to_f32(src[h * d.HS + i + rt.half]);
    }
    if (rt.cos == nullptr) {
      dst[i] = from_f32<T>(x1);
    } else {
      if (rotated) {
        const float2 y = rotary_pair(rt, d.pos_offset + bt % d.T, i, x1, x2, -1.0f);
        x1 = y.x;
        x2 = y.y;
      }
      dst[i] = from_f32<T>(x1);
      dst[i + rt.half] = from_f32<T>(x2);
    }
  }
}

// V consecutive floats of a rotary table (V a multiple of 4, p 16-byte aligned; else one by one).
template <int V>
__device__ __forceinline__ void load_table(float (&out)[V], const float* p) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int k = 0; k < V; k += 4) {
      const float4 c = *reinterpret_cast<const float4*>(p + k);
      out[k] = c.x;
      out[k + 1] = c.y;
      out[k + 2] = c.z;
      out[k + 3] = c.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = p[k];
  }
}

// rotary_pair on V lanes at once: the same products in the same order, so the same bits.
template <int V>
__device__ __forceinline__ void rotate_chunk(float (&x1)[V], float (&x2)[V], const RotaryTables& rt,
                                             int64_t p, int i, float sign) {
  float c[V], sn[V];
  load_table<V>(c, rt.cos + p * rt.half + i);
  load_table<V>(sn, rt.sin + p * rt.half + i);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const float s = sign * sn[k];
    const float y1 = x1[k] * c[k] - x2[k] * s;
    const float y2 = x2[k] * c[k] + x1[k] * s;
    x1[k] = y1;
    x2[k] = y2;
  }
}

// in (BT, (NH+2KV) HS) -> out (BT, 3 NH HS), a thread per V lanes of one input head: it loads
// them once, rotates them once (q and k) and stores them to every out-head that reads that input
// head (one for q, the group for k and v). Threads by out-head instead loaded and rotated each
// shared k/v head once per group member and ran at a third of the memory bandwidth.
template <typename T, int V>
__global__ void qkv_expand_forward_vec_kernel(T* out, const T* in, RotaryTables rt, ExpandDims d,
                                              int64_t n) {
  const int NH = static_cast<int>(d.NH), KV = static_cast<int>(d.KV);
  const int HS = static_cast<int>(d.HS), half = static_cast<int>(rt.half);
  const int group = NH / KV, per_head = static_cast<int>(d.lanes) / V;
  const int heads = NH + 2 * KV, items = heads * per_head;
  const bool rotary = rt.cos != nullptr;
  ZT_GRID_STRIDE(idx, n) {
    const int64_t bt = idx / items;
    const int it = static_cast<int>(idx - bt * items);
    const int i = (it % per_head) * V;
    const int hd = it / per_head;
    const T* src = in + (bt * heads + hd) * HS;
    T* row_out = out + bt * 3 * NH * HS;
    // The out-heads (slot (q, k, v) * NH + head) that read input head hd.
    int first = hd, count = 1;
    bool rotated = rotary;
    if (hd >= NH + KV) {
      first = 2 * NH + (hd - NH - KV) * group;
      count = group;
      rotated = false;  // v is not rotated
    } else if (hd >= NH) {
      first = NH + (hd - NH) * group;
      count = group;
    }
    if (!rotated) {
      const Vec16<T> x1 = load16(src + i);
      Vec16<T> x2{};
      if (rotary) x2 = load16(src + i + half);
      for (int h = first; h < first + count; ++h) {
        store16(row_out + h * HS + i, x1);
        if (rotary) store16(row_out + h * HS + i + half, x2);
      }
    } else {
      float x1[V], x2[V];
      load_f32<T, V>(x1, src + i);
      load_f32<T, V>(x2, src + i + half);
      rotate_chunk<V>(x1, x2, rt, d.pos_offset + bt % d.T, i, 1.0f);
      for (int h = first; h < first + count; ++h) {
        store_from_f32<T, V>(row_out + h * HS + i, x1);
        store_from_f32<T, V>(row_out + h * HS + i + half, x2);
      }
    }
  }
}

// dout (BT, 3 NH HS) -> din (BT, (NH+2KV) HS), a thread per V lanes of one input head: it sums
// the group's out-heads in order and rotates back. (A block per row, threads over its heads, ran
// at a third of the bandwidth.)
template <typename T, int V>
__global__ void qkv_expand_backward_vec_kernel(T* din, const T* dout, RotaryTables rt, ExpandDims d,
                                               int64_t n) {
  const int NH = static_cast<int>(d.NH), KV = static_cast<int>(d.KV);
  const int HS = static_cast<int>(d.HS), half = static_cast<int>(rt.half);
  const int group = NH / KV, per_head = static_cast<int>(d.lanes) / V;
  const int heads = NH + 2 * KV, C = NH * HS;
  const int items = heads * per_head;
  const bool rotary = rt.cos != nullptr;
  ZT_GRID_STRIDE(idx, n) {
    const int64_t bt = idx / items;
    const int it = static_cast<int>(idx - bt * items);
    const int i = (it % per_head) * V;
    const int hd = it / per_head;
    const T* g = dout + bt * 3 * C;
    // The out-heads whose gradients flow into this input head, and where they sit in dout.
    int first = hd, count = 1;
    const T* src = g;
    bool rotated = true;
    if (hd >= NH + KV) {
      first = (hd - NH - KV) * group;
      count = group;
      src = g + 2 * C;
      rotated = false;
    } else if (hd >= NH) {
      first = (hd - NH) * group;
      count = group;
      src = g + C;
    }
    float x1[V], x2[V];
#pragma unroll
    for (int k = 0; k < V; ++k) x1[k] = x2[k] = 0.0f;
    for (int h = first; h < first + count; ++h) {
      float a[V];
      load_f32<T, V>(a, src + h * HS + i);
#pragma unroll
      for (int k = 0; k < V; ++k) x1[k] += a[k];
      if (rotary) {
        load_f32<T, V>(a, src + h * HS + i + half);
#pragma unroll
        for (int k = 0; k < V; ++k) x2[k] += a[k];
      }
    }
    T* dst = din + (bt * heads + hd) * HS;
    if (rotary && rotated) rotate_chunk<V>(x1, x2, rt, d.pos_offset + bt % d.T, i, -1.0f);
    store_from_f32<T, V>(dst + i, x1);
    if (rotary) store_from_f32<T, V>(dst + i + half, x2);
  }
}

// rotary_qk_*: the q and k heads of (BT, (NH+2KV) HS) rotated in place by sign * angle, a thread
// per V lanes of a pair (i, i + HS/2) of one head: the same products as the expansion's rotation,
// so the same bits. n = BT * (NH + KV) * (HS/2) / V.
template <typename T, int V>
__global__ void rotary_qk_kernel(T* x, RotaryTables rt, int64_t T_, int qk_heads, int heads, int HS,
                                 int64_t pos_offset, float sign, int64_t n) {
  const int half = static_cast<int>(rt.half), per_head = half / V;
  const int items = qk_heads * per_head;
  ZT_GRID_STRIDE(idx, n) {
    const int64_t bt = idx / items;
    const int it = static_cast<int>(idx - bt * items);
    const int i = (it % per_head) * V;
    T* p = x + (bt * heads + it / per_head) * HS;
    float x1[V], x2[V];
    load_f32<T, V>(x1, p + i);
    load_f32<T, V>(x2, p + i + half);
    rotate_chunk<V>(x1, x2, rt, pos_offset + bt % T_, i, sign);
    store_from_f32<T, V>(p + i, x1);
    store_from_f32<T, V>(p + i + half, x2);
  }
}

#undef ZT_GRID_STRIDE

// Checks devices, dtypes and the expanded tensor; returns the kernel dimensions.
ExpandDims expand_dims(const Tensor& fused, const Tensor& expanded, const char* expanded_name,
                       const QkvDims& q, int64_t pos_offset, const Tensor* cos, const char* op) {
  check_cuda(fused, op, "the fused q/k/v tensor");
  check_dtype(expanded, fused.dtype(), op, expanded_name);
  check_same_device(fused, expanded, op);
  ZT_ASSERT(expanded.ndim() == 3 && expanded.size(0) == q.B && expanded.size(1) == q.T &&
                expanded.size(2) == 3 * q.NH * q.HS,
            "{}: {} {} is not (B,T,3*NH*HS) = ({},{},{})", op, expanded_name,
            expanded.shape().str(), q.B, q.T, 3 * q.NH * q.HS);
  return {q.T, q.NH, q.KV, q.HS, cos != nullptr ? q.HS / 2 : q.HS, pos_offset};
}

RotaryTables tables(const Tensor* cos, const Tensor* sin, int64_t HS) {
  if (cos == nullptr) return {};
  return {ptr<const float>(*cos), ptr<const float>(*sin), HS / 2};
}

// Whether the _vec kernels take this shape: whole 16-byte chunks of lanes, aligned operands, and
// heads of int range. Returns the threads to launch, one per chunk of an input head (0: use the
// plain kernels).
template <typename T>
int64_t vec_threads(const ExpandDims& d, int64_t rows, const RotaryTables& rt, const T* a,
                    const T* b) {
  constexpr int V = kVec<T>;
  if (V == 1 || d.lanes % V != 0 || !vec16_aligned(a, b, rt.cos, rt.sin)) return 0;
  if (3 * d.NH * d.HS > (int64_t{1} << 30)) return 0;
  return rows * (d.NH + 2 * d.KV) * (d.lanes / V);
}

}  // namespace

void qkv_expand_forward(Tensor& out, const Tensor& in, int num_heads, int num_kv_heads,
                        const Tensor* cos, const Tensor* sin, int64_t pos_offset, const Stream& s) {
  const char* op = "qkv_expand_forward";
  const QkvDims q = qkv_dims(in, num_heads, num_kv_heads, cos, sin, pos_offset, op);
  const ExpandDims d = expand_dims(in, out, "out", q, pos_offset, cos, op);
  const int64_t n = q.B * q.T * 3 * q.NH * d.lanes;
  if (n == 0) return;
  DeviceGuard guard(in.device());
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RotaryTables rt = tables(cos, sin, q.HS);
    const int64_t rows = q.B * q.T;
    if (const int64_t m = vec_threads<T>(d, rows, rt, ptr<const T>(in), ptr<const T>(out))) {
      qkv_expand_forward_vec_kernel<T, kVec<T>>
          <<<grid_for(m, kThreads, int64_t{1} << 30), kThreads, 0, stream_of(s)>>>(
              ptr<T>(out), ptr<const T>(in), rt, d, m);
    } else {
      qkv_expand_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
          ptr<T>(out), ptr<const T>(in), rt, d, n);
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void qkv_expand_backward(Tensor& din, const Tensor& dout, int num_heads, int num_kv_heads,
                         const Tensor* cos, const Tensor* sin, int64_t pos_offset,
                         const Stream& s) {
  const char* op = "qkv_expand_backward";
  const QkvDims q = qkv_dims(din, num_heads, num_kv_heads, cos, sin, pos_offset, op);
  const ExpandDims d = expand_dims(din, dout, "dout", q, pos_offset, cos, op);
  const int64_t n = q.B * q.T * (q.NH + 2 * q.KV) * d.lanes;
  if (n == 0) return;
  DeviceGuard guard(dout.device());
  dispatch_compute(din.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RotaryTables rt = tables(cos, sin, q.HS);
    const int64_t rows = q.B * q.T;
    if (const int64_t m = vec_threads<T>(d, rows, rt, ptr<const T>(din), ptr<const T>(dout))) {
      qkv_expand_backward_vec_kernel<T, kVec<T>>
          <<<grid_for(m, kThreads, int64_t{1} << 30), kThreads, 0, stream_of(s)>>>(
              ptr<T>(din), ptr<const T>(dout), rt, d, m);
    } else {
      qkv_expand_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
          ptr<T>(din), ptr<const T>(dout), rt, d, n);
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

namespace {

void rotary_qk(Tensor& qkv, int num_heads, int num_kv_heads, const Tensor& cos, const Tensor& sin,
               int64_t pos_offset, float sign, const char* op, const Stream& s) {
  check_cuda(qkv, op, "qkv");
  const QkvDims q = qkv_dims(qkv, num_heads, num_kv_heads, &cos, &sin, pos_offset, op);
  const int64_t rows = q.B * q.T;
  if (rows == 0) return;
  ZT_ASSERT(q.fused_width() < (int64_t{1} << 30), "{}: {} values a token are too many", op,
            q.fused_width());
  DeviceGuard guard(qkv.device());
  dispatch_compute(qkv.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RotaryTables rt = tables(&cos, &sin, q.HS);
    const int qk = static_cast<int>(q.NH + q.KV);
    const int heads = static_cast<int>(q.NH + 2 * q.KV);
    const int HS = static_cast<int>(q.HS);
    auto launch = [&]<int V>() {
      const int64_t n = rows * qk * (rt.half / V);
      rotary_qk_kernel<T, V>
          <<<grid_for(n, kThreads, int64_t{1} << 30), kThreads, 0, stream_of(s)>>>(
              ptr<T>(qkv), rt, q.T, qk, heads, HS, pos_offset, sign, n);
    };
    constexpr int V = kVec<T>;
    if (rt.half % V == 0 && vec16_aligned(ptr<const T>(qkv), rt.cos, rt.sin)) {
      launch.template operator()<V>();
    } else {
      launch.template operator()<1>();
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void rotary_qk_forward(Tensor& qkv, int num_heads, int num_kv_heads, const Tensor& cos,
                       const Tensor& sin, int64_t pos_offset, const Stream& s) {
  rotary_qk(qkv, num_heads, num_kv_heads, cos, sin, pos_offset, 1.0f, "rotary_qk_forward", s);
}

void rotary_qk_backward(Tensor& dqkv, int num_heads, int num_kv_heads, const Tensor& cos,
                        const Tensor& sin, int64_t pos_offset, const Stream& s) {
  rotary_qk(dqkv, num_heads, num_kv_heads, cos, sin, pos_offset, -1.0f, "rotary_qk_backward", s);
}

}  // namespace zt::kernels::cuda
