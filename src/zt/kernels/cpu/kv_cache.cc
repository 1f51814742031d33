// CPU reference of generation with a KV cache (contracts in kernels/op_table.inc): kv_cache_update
// rotates the new tokens' q and k at their absolute positions and appends k and v to the
// (B,KV,maxT,HS) caches; attention_cached lets each new query attend causally to the cache,
// grouped-query heads reading their shared kv head. Together they compute what qkv_expand_forward
// followed by attention_forward computes over the whole sequence. Assumes contiguous CPU tensors
// in the compute dtype, f32 or f64 (the accumulator dtype equals it on the CPU).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "zt/kernels/cpu/cpu_ops.h"
#include "zt/kernels/cpu/rotary.h"
#include "zt/kernels/qkv_layout.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

template <typename T>
void kv_cache_update_impl(T* q_out, T* k_cache, T* v_cache, const T* qkv, const Tensor* cos,
                          const Tensor* sin, int64_t past_len, int64_t maxT, const QkvDims& d) {
  const int64_t BT = d.B * d.T;
  const int64_t half = d.HS / 2;
#pragma omp parallel for if (parallel : BT * d.fused_width() >= kParallelMinWork)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const int64_t b = bt / d.T;
    const int64_t pos = past_len + bt % d.T;
    const float* c = cos ? cos->data<float>() + pos * half : nullptr;
    const float* s = sin ? sin->data<float>() + pos * half : nullptr;
    const T* src = qkv + bt * d.fused_width();
    for (int64_t h = 0; h < d.NH; ++h) {
      rotary_apply(q_out + (bt * d.NH + h) * d.HS, src + h * d.HS, c, s, d.HS, Rotation::kForward);
    }
    for (int64_t j = 0; j < d.KV; ++j) {
      const int64_t row = ((b * d.KV + j) * maxT + pos) * d.HS;
      rotary_apply(k_cache + row, src + (d.NH + j) * d.HS, c, s, d.HS, Rotation::kForward);
      rotary_apply(v_cache + row, src + (d.NH + d.KV + j) * d.HS, nullptr, nullptr, d.HS,
                   Rotation::kForward);
    }
  }
}

// Query t of head h attends to cache positions u <= past_len + t of kv head h / (NH/KV); the
// softmax subtracts the row maximum before exponentiating.
template <typename T>
void attention_cached_impl(T* out, const T* q, const T* k_cache, const T* v_cache,
                           const CachedAttentionDims& d) {
  const T scale = T{1} / std::sqrt(static_cast<T>(d.HS));
  const int64_t rows = d.B * d.NH * d.T;
  const int64_t group = d.NH / d.KV;
  const int64_t work = rows * (d.past_len + d.T) * d.HS;
#pragma omp parallel for if (parallel : work >= kParallelMinWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % d.T;
    const int64_t h = (r / d.T) % d.NH;
    const int64_t b = r / (d.T * d.NH);
    const int64_t len = d.past_len + t + 1;
    const T* k = k_cache + (b * d.KV + h / group) * d.maxT * d.HS;
    const T* v = v_cache + (b * d.KV + h / group) * d.maxT * d.HS;
    const T* qt = q + ((b * d.T + t) * d.NH + h) * d.HS;
    std::vector<T> att(static_cast<size_t>(len));
    T maxv = -std::numeric_limits<T>::infinity();
    for (int64_t u = 0; u < len; ++u) {
      T dot = 0;
      for (int64_t i = 0; i < d.HS; ++i) dot += qt[i] * k[u * d.HS + i];
      att[u] = dot * scale;
      if (att[u] > maxv) maxv = att[u];
    }
    T sum = 0;
    for (int64_t u = 0; u < len; ++u) {
      att[u] = std::exp(att[u] - maxv);
      sum += att[u];
    }
    T* o = out + ((b * d.T + t) * d.NH + h) * d.HS;
    for (int64_t i = 0; i < d.HS; ++i) o[i] = 0;
    for (int64_t u = 0; u < len; ++u) {
      const T a = att[u] / sum;
      for (int64_t i = 0; i < d.HS; ++i) o[i] += a * v[u * d.HS + i];
    }
  }
}

void check_dtype_cpu(DType dt, const char* op) {
  ZT_ASSERT(dt == DType::f32 || dt == DType::f64,
            "{}: CPU compute dtype must be f32 or f64, got {}", op, dtype_name(dt));
}

}  // namespace

void kv_cache_update(Tensor& q_out, Tensor& k_cache, Tensor& v_cache, const Tensor& qkv,
                     int num_heads, int num_kv_heads, const Tensor* cos, const Tensor* sin,
                     int64_t past_len, const Stream& s) {
  const char* op = "kv_cache_update";
  ZT_ASSERT(q_out.device().is_cpu() && k_cache.device().is_cpu() && v_cache.device().is_cpu() &&
                qkv.device().is_cpu() && (!cos || cos->device().is_cpu()),
            "{} (cpu): all tensors must be on the CPU", op);
  const QkvDims d = qkv_dims(qkv, num_heads, num_kv_heads, cos, sin, past_len, op);
  const int64_t maxT = kv_cache_update_check(q_out, k_cache, v_cache, d, past_len, op);
  const DType dt = qkv.dtype();
  check_dtype_cpu(dt, op);
  ZT_ASSERT(q_out.dtype() == dt && k_cache.dtype() == dt && v_cache.dtype() == dt,
            "{}: q_out {}, k_cache {}, v_cache {} must be qkv's compute dtype {}", op,
            dtype_name(q_out.dtype()), dtype_name(k_cache.dtype()), dtype_name(v_cache.dtype()),
            dtype_name(dt));
  if (dt == DType::f32) {
    kv_cache_update_impl(q_out.data<float>(), k_cache.data<float>(), v_cache.data<float>(),
                         qkv.data<float>(), cos, sin, past_len, maxT, d);
  } else {
    kv_cache_update_impl(q_out.data<double>(), k_cache.data<double>(), v_cache.data<double>(),
                         qkv.data<double>(), cos, sin, past_len, maxT, d);
  }
}

void attention_cached(Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      int num_heads, int num_kv_heads, int64_t past_len, const Stream& s) {
  const char* op = "attention_cached";
  ZT_ASSERT(out.device().is_cpu() && q.device().is_cpu() && k_cache.device().is_cpu() &&
                v_cache.device().is_cpu(),
            "{} (cpu): all tensors must be on the CPU", op);
  const CachedAttentionDims d =
      attention_cached_dims(out, q, k_cache, v_cache, num_heads, num_kv_heads, past_len, op);
  const DType dt = q.dtype();
  check_dtype_cpu(dt, op);
  ZT_ASSERT(out.dtype() == dt && k_cache.dtype() == dt && v_cache.dtype() == dt,
            "{}: out {}, k_cache {}, v_cache {} must be q's compute dtype {}", op,
            dtype_name(out.dtype()), dtype_name(k_cache.dtype()), dtype_name(v_cache.dtype()),
            dtype_name(dt));
  if (dt == DType::f32) {
    attention_cached_impl(out.data<float>(), q.data<float>(), k_cache.data<float>(),
                          v_cache.data<float>(), d);
  } else {
    attention_cached_impl(out.data<double>(), q.data<double>(), k_cache.data<double>(),
                          v_cache.data<double>(), d);
  }
}

}  // namespace zt::kernels::cpu
