// The fused q/k/v layout of the decoder families (Llama, Qwen2: grouped-query heads and rotary
// tables) and the shape checks of the ops that read it, shared by the CPU and CUDA bodies of
// qkv_expand_*, kv_cache_update and attention_cached (contracts in kernels/op_table.inc), so that
// both backends accept exactly the same shapes.
// Device and dtype checks stay with each backend.
#pragma once

#include <cstdint>

#include "zt/kernels/ops.h"

namespace zt::kernels {

// in (B,T,(NH+2KV)*HS): per token [q (NH heads) | k (KV heads) | v (KV heads)].
struct QkvDims {
  int64_t B = 0, T = 0;
  int64_t NH = 0, KV = 0, HS = 0;
  int64_t rotary_max_pos = 0;  // maxP of the cos/sin tables; 0 without rotary

  int64_t group() const { return NH / KV; }  // out-heads per kv head
  int64_t fused_width() const { return (NH + 2 * KV) * HS; }
  bool rotary() const { return rotary_max_pos > 0; }
};

// Checks `fused` (B,T,(NH+2KV)*HS), the head counts and, when given, the (maxP, HS/2) tables
// against positions first_pos .. first_pos + T - 1; returns the dimensions.
inline QkvDims qkv_dims(const Tensor& fused, int num_heads, int num_kv_heads, const Tensor* cos,
                        const Tensor* sin, int64_t first_pos, const char* op) {
  ZT_ASSERT(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0,
            "{}: num_heads {} must be a positive multiple of num_kv_heads {}", op, num_heads,
            num_kv_heads);
  QkvDims d;
  d.NH = num_heads;
  d.KV = num_kv_heads;
  ZT_ASSERT(fused.ndim() == 3, "{}: the fused q/k/v tensor {} must be (B,T,(NH+2KV)*HS)", op,
            fused.shape().str());
  d.B = fused.size(0);
  d.T = fused.size(1);
  const int64_t heads = d.NH + 2 * d.KV;
  ZT_ASSERT(fused.size(2) > 0 && fused.size(2) % heads == 0,
            "{}: last dimension of {} is not (NH + 2 KV) * HS with NH = {}, KV = {}", op,
            fused.shape().str(), d.NH, d.KV);
  d.HS = fused.size(2) / heads;
  ZT_ASSERT((cos == nullptr) == (sin == nullptr), "{}: cos and sin must both be given or both null",
            op);
  ZT_ASSERT(first_pos >= 0, "{}: first position {} is negative", op, first_pos);
  if (cos != nullptr) {
    ZT_ASSERT(d.HS % 2 == 0, "{}: rotary needs an even head size, got HS = {}", op, d.HS);
    ZT_ASSERT(cos->ndim() == 2 && cos->size(1) == d.HS / 2 && sin->shape() == cos->shape(),
              "{}: cos {} and sin {} must both be (maxP, HS/2 = {})", op, cos->shape().str(),
              sin->shape().str(), d.HS / 2);
    ZT_ASSERT(cos->dtype() == DType::f32 && sin->dtype() == DType::f32,
              "{}: cos {} and sin {} must be f32", op, dtype_name(cos->dtype()),
              dtype_name(sin->dtype()));
    ZT_ASSERT(cos->device() == fused.device() && sin->device() == fused.device(),
              "{}: cos on {} and sin on {} must be on the q/k/v tensor's device {}", op,
              cos->device().str(), sin->device().str(), fused.device().str());
    d.rotary_max_pos = cos->size(0);
    ZT_ASSERT(first_pos + d.T <= d.rotary_max_pos,
              "{}: positions {}..{} exceed the rotary tables' maxP = {}", op, first_pos,
              first_pos + d.T - 1, d.rotary_max_pos);
  }
  return d;
}

// Checks a kv cache pair (B,KV,maxT,HS) against the batch and head dimensions; returns maxT.
inline int64_t kv_cache_len(const Tensor& k_cache, const Tensor& v_cache, int64_t B, int64_t KV,
                            int64_t HS, const char* op) {
  ZT_ASSERT(k_cache.ndim() == 4 && k_cache.size(0) == B && k_cache.size(1) == KV &&
                k_cache.size(3) == HS && v_cache.shape() == k_cache.shape(),
            "{}: k_cache {} and v_cache {} must both be (B,KV,maxT,HS) = ({},{},maxT,{})", op,
            k_cache.shape().str(), v_cache.shape().str(), B, KV, HS);
  return k_cache.size(2);
}

// kv_cache_update's shapes: qkv as qkv_dims, q_out (B,T,NH*HS), the caches with room for
// positions past_len .. past_len + T - 1. Returns maxT.
inline int64_t kv_cache_update_check(const Tensor& q_out, const Tensor& k_cache,
                                     const Tensor& v_cache, const QkvDims& d, int64_t past_len,
                                     const char* op) {
  const int64_t maxT = kv_cache_len(k_cache, v_cache, d.B, d.KV, d.HS, op);
  ZT_ASSERT(past_len + d.T <= maxT, "{}: past_len {} + T {} exceeds the cache length maxT = {}", op,
            past_len, d.T, maxT);
  ZT_ASSERT(q_out.ndim() == 3 && q_out.size(0) == d.B && q_out.size(1) == d.T &&
                q_out.size(2) == d.NH * d.HS,
            "{}: q_out {} is not (B,T,NH*HS) = ({},{},{})", op, q_out.shape().str(), d.B, d.T,
            d.NH * d.HS);
  return maxT;
}

// attention_cached's dimensions: q (B,T,NH*HS), caches (B,KV,maxT,HS).
struct CachedAttentionDims {
  int64_t B = 0, T = 0, NH = 0, KV = 0, HS = 0, maxT = 0, past_len = 0;
};

inline CachedAttentionDims attention_cached_dims(const Tensor& out, const Tensor& q,
                                                 const Tensor& k_cache, const Tensor& v_cache,
                                                 int num_heads, int num_kv_heads, int64_t past_len,
                                                 const char* op) {
  ZT_ASSERT(num_heads > 0 && num_kv_heads > 0 && num_heads % num_kv_heads == 0,
            "{}: num_heads {} must be a positive multiple of num_kv_heads {}", op, num_heads,
            num_kv_heads);
  ZT_ASSERT(q.ndim() == 3 && k_cache.ndim() == 4 && k_cache.size(3) > 0,
            "{}: q {} must be (B,T,NH*HS) and k_cache {} (B,KV,maxT,HS)", op, q.shape().str(),
            k_cache.shape().str());
  CachedAttentionDims d;
  d.B = q.size(0);
  d.T = q.size(1);
  d.NH = num_heads;
  d.KV = num_kv_heads;
  d.HS = k_cache.size(3);
  d.past_len = past_len;
  d.maxT = kv_cache_len(k_cache, v_cache, d.B, d.KV, d.HS, op);
  ZT_ASSERT(q.size(2) == d.NH * d.HS, "{}: q {} is not (B,T,NH*HS) with NH = {}, HS = {}", op,
            q.shape().str(), d.NH, d.HS);
  ZT_ASSERT(out.shape() == q.shape(), "{}: out {} differs from q {}", op, out.shape().str(),
            q.shape().str());
  ZT_ASSERT(past_len >= 0 && past_len + d.T <= d.maxT,
            "{}: past_len {} + T {} must fit the cache length maxT = {}", op, past_len, d.T,
            d.maxT);
  return d;
}

}  // namespace zt::kernels
