// CUDA rotary + grouped-query expansion of a fused q/k/v projection (contract in
// kernels/op_table.inc), as the CPU reference kernels/cpu/qkv_expand.cc. One launch per op, a
// grid-stride loop with one thread per output pair (i, i + HS/2) of a head when rotary is on (the
// two values a rotation mixes), per output element when it is off. The backward gives each thread
// one pair of din and sums the group's out-heads in f32 before rotating back, so din is written
// without atomics.
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
    qkv_expand_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<const T>(in), tables(cos, sin, q.HS), d, n);
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
    qkv_expand_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(din), ptr<const T>(dout), tables(cos, sin, q.HS), d, n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
