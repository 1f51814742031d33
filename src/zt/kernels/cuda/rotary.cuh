// Rotary position embedding on the GPU in transformers' rotate-half form, shared by the CUDA
// qkv_expand_* and kv_cache_update (contracts in kernels/op_table.inc); the CPU twin is
// kernels/cpu/rotary.h. Include after cuda_common.cuh.
#pragma once

#include <cstdint>

namespace zt::kernels::cuda {

// The (maxP, HS/2) f32 tables; cos == nullptr means no rotary.
struct RotaryTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t half = 0;  // HS / 2
};

// Rotates the pair (x1, x2) = (x[i], x[i + HS/2]) of position p by +angle (sign = 1, the forward)
// or -angle (sign = -1, its transpose): y1 = x1 c - x2 s, y2 = x2 c + x1 s with s = sign sin.
__device__ __forceinline__ float2 rotary_pair(const RotaryTables& rt, int64_t p, int64_t i,
                                              float x1, float x2, float sign) {
  const float c = rt.cos[p * rt.half + i];
  const float s = sign * rt.sin[p * rt.half + i];
  return make_float2(x1 * c - x2 * s, x2 * c + x1 * s);
}

}  // namespace zt::kernels::cuda
