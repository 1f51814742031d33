// CPU reference of the rotary + grouped-query expansion of a fused q/k/v projection, and of the
// in-place rotary of its q and k (rotary_qk_*) (contracts in kernels/op_table.inc): Llama's and
// Qwen2's (B,T,(NH+2KV)*HS) projection becomes the (B,T,3*NH*HS) [q | k | v] layout that
// attention_forward and flash_attention_forward read, q and k rotated, each kv head repeated for
// the NH/KV query heads that share it. The backward is the exact transpose. Assumes contiguous CPU
// tensors in the compute dtype, f32 or f64; the rotary tables are f32.
#include <cstdint>

#include "zt/kernels/cpu/cpu_ops.h"
#include "zt/kernels/cpu/rotary.h"
#include "zt/kernels/qkv_layout.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

// The (cos, sin) rows of position p, or nulls without rotary.
struct RotaryRows {
  const float* cos = nullptr;
  const float* sin = nullptr;
};
RotaryRows rotary_rows(const Tensor* cos, const Tensor* sin, int64_t p, int64_t HS) {
  if (cos == nullptr) return {};
  return {cos->data<float>() + p * (HS / 2), sin->data<float>() + p * (HS / 2)};
}

template <typename T>
void qkv_expand_forward_impl(T* out, const T* in, const Tensor* cos, const Tensor* sin,
                             int64_t pos_offset, const QkvDims& d) {
  const int64_t C = d.NH * d.HS;
  const int64_t BT = d.B * d.T;
#pragma omp parallel for if (parallel : BT * 3 * C >= kParallelMinWork)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const RotaryRows rot = rotary_rows(cos, sin, pos_offset + bt % d.T, d.HS);
    const T* src = in + bt * d.fused_width();
    const T* src_k = src + d.NH * d.HS;
    const T* src_v = src_k + d.KV * d.HS;
    T* dst = out + bt * 3 * C;
    for (int64_t h = 0; h < d.NH; ++h) {
      const int64_t j = h / d.group();
      rotary_apply(dst + h * d.HS, src + h * d.HS, rot.cos, rot.sin, d.HS, Rotation::kForward);
      rotary_apply(dst + C + h * d.HS, src_k + j * d.HS, rot.cos, rot.sin, d.HS,
                   Rotation::kForward);
      rotary_apply(dst + 2 * C + h * d.HS, src_v + j * d.HS, nullptr, nullptr, d.HS,
                   Rotation::kForward);
    }
  }
}

// dk and dv of kv head j first gather the sum over its group's out-heads; dk is then rotated
// back in place (the rotation is linear, so rotating the sum is the sum of the rotations).
template <typename T>
void qkv_expand_backward_impl(T* din, const T* dout, const Tensor* cos, const Tensor* sin,
                              int64_t pos_offset, const QkvDims& d) {
  const int64_t C = d.NH * d.HS;
  const int64_t BT = d.B * d.T;
#pragma omp parallel for if (parallel : BT * 3 * C >= kParallelMinWork)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const RotaryRows rot = rotary_rows(cos, sin, pos_offset + bt % d.T, d.HS);
    const T* g = dout + bt * 3 * C;
    T* dq = din + bt * d.fused_width();
    T* dk = dq + d.NH * d.HS;
    T* dv = dk + d.KV * d.HS;
    for (int64_t h = 0; h < d.NH; ++h) {
      rotary_apply(dq + h * d.HS, g + h * d.HS, rot.cos, rot.sin, d.HS, Rotation::kInverse);
    }
    for (int64_t j = 0; j < d.KV; ++j) {
      T* dkj = dk + j * d.HS;
      T* dvj = dv + j * d.HS;
      for (int64_t i = 0; i < d.HS; ++i) {
        T sum_k = 0;
        T sum_v = 0;
        for (int64_t h = j * d.group(); h < (j + 1) * d.group(); ++h) {
          sum_k += g[C + h * d.HS + i];
          sum_v += g[2 * C + h * d.HS + i];
        }
        dkj[i] = sum_k;
        dvj[i] = sum_v;
      }
      rotary_apply(dkj, dkj, rot.cos, rot.sin, d.HS, Rotation::kInverse);
    }
  }
}

// q's NH heads and k's KV heads of every token rotated in place (the forward rotation, or its
// inverse for the gradients); v untouched.
template <typename T>
void rotary_qk_impl(T* x, const Tensor& cos, const Tensor& sin, int64_t pos_offset,
                    const QkvDims& d, Rotation rotation) {
  const int64_t BT = d.B * d.T;
#pragma omp parallel for if (parallel : BT * (d.NH + d.KV) * d.HS >= kParallelMinWork)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const RotaryRows rot = rotary_rows(&cos, &sin, pos_offset + bt % d.T, d.HS);
    T* row = x + bt * d.fused_width();
    for (int64_t h = 0; h < d.NH + d.KV; ++h) {
      rotary_apply(row + h * d.HS, row + h * d.HS, rot.cos, rot.sin, d.HS, rotation);
    }
  }
}

void check_cpu(const Tensor& a, const Tensor& b, const Tensor* cos, const char* op) {
  ZT_ASSERT(a.device().is_cpu() && b.device().is_cpu() && (!cos || cos->device().is_cpu()),
            "{} (cpu): all tensors must be on the CPU", op);
}

// Checks the expanded (B,T,3*NH*HS) tensor and the dtypes.
void check_expanded(const Tensor& expanded, const Tensor& fused, const QkvDims& d, const char* op,
                    const char* name) {
  ZT_ASSERT(expanded.ndim() == 3 && expanded.size(0) == d.B && expanded.size(1) == d.T &&
                expanded.size(2) == 3 * d.NH * d.HS,
            "{}: {} {} is not (B,T,3*NH*HS) = ({},{},{})", op, name, expanded.shape().str(), d.B,
            d.T, 3 * d.NH * d.HS);
  ZT_ASSERT(expanded.dtype() == fused.dtype(), "{}: {} is {} but the fused q/k/v tensor is {}", op,
            name, dtype_name(expanded.dtype()), dtype_name(fused.dtype()));
  ZT_ASSERT(fused.dtype() == DType::f32 || fused.dtype() == DType::f64,
            "{}: CPU compute dtype must be f32 or f64, got {}", op, dtype_name(fused.dtype()));
}

}  // namespace

void qkv_expand_forward(Tensor& out, const Tensor& in, int num_heads, int num_kv_heads,
                        const Tensor* cos, const Tensor* sin, int64_t pos_offset, const Stream& s) {
  const char* op = "qkv_expand_forward";
  check_cpu(out, in, cos, op);
  const QkvDims d = qkv_dims(in, num_heads, num_kv_heads, cos, sin, pos_offset, op);
  check_expanded(out, in, d, op, "out");
  if (in.dtype() == DType::f32) {
    qkv_expand_forward_impl(out.data<float>(), in.data<float>(), cos, sin, pos_offset, d);
  } else {
    qkv_expand_forward_impl(out.data<double>(), in.data<double>(), cos, sin, pos_offset, d);
  }
}

void qkv_expand_backward(Tensor& din, const Tensor& dout, int num_heads, int num_kv_heads,
                         const Tensor* cos, const Tensor* sin, int64_t pos_offset,
                         const Stream& s) {
  const char* op = "qkv_expand_backward";
  check_cpu(din, dout, cos, op);
  const QkvDims d = qkv_dims(din, num_heads, num_kv_heads, cos, sin, pos_offset, op);
  check_expanded(dout, din, d, op, "dout");
  if (din.dtype() == DType::f32) {
    qkv_expand_backward_impl(din.data<float>(), dout.data<float>(), cos, sin, pos_offset, d);
  } else {
    qkv_expand_backward_impl(din.data<double>(), dout.data<double>(), cos, sin, pos_offset, d);
  }
}

namespace {

void rotary_qk(Tensor& qkv, int num_heads, int num_kv_heads, const Tensor& cos, const Tensor& sin,
               int64_t pos_offset, Rotation rotation, const char* op) {
  check_cpu(qkv, qkv, &cos, op);
  const QkvDims d = qkv_dims(qkv, num_heads, num_kv_heads, &cos, &sin, pos_offset, op);
  ZT_ASSERT(qkv.dtype() == DType::f32 || qkv.dtype() == DType::f64,
            "{}: CPU compute dtype must be f32 or f64, got {}", op, dtype_name(qkv.dtype()));
  if (qkv.dtype() == DType::f32) {
    rotary_qk_impl(qkv.data<float>(), cos, sin, pos_offset, d, rotation);
  } else {
    rotary_qk_impl(qkv.data<double>(), cos, sin, pos_offset, d, rotation);
  }
}

}  // namespace

void rotary_qk_forward(Tensor& qkv, int num_heads, int num_kv_heads, const Tensor& cos,
                       const Tensor& sin, int64_t pos_offset, const Stream& /*s*/) {
  rotary_qk(qkv, num_heads, num_kv_heads, cos, sin, pos_offset, Rotation::kForward,
            "rotary_qk_forward");
}

void rotary_qk_backward(Tensor& dqkv, int num_heads, int num_kv_heads, const Tensor& cos,
                        const Tensor& sin, int64_t pos_offset, const Stream& /*s*/) {
  rotary_qk(dqkv, num_heads, num_kv_heads, cos, sin, pos_offset, Rotation::kInverse,
            "rotary_qk_backward");
}

}  // namespace zt::kernels::cpu
