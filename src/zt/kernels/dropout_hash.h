// The mask of dropout_apply (contract in kernels/op_table.inc): one function compiled into its CPU
// and CUDA bodies, so both backends draw the same mask. A counter-based generator: element i of a
// call with seed s draws from (s, i) alone, so no state is kept, elements are drawn in any order,
// and the backward redraws the forward's mask from the seed instead of storing it. The mixer is
// splitmix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
// 2014) applied to s ^ (i * an odd constant).
#pragma once

#include <cstdint>

#include "zt/core/assert.h"

#if defined(__CUDACC__)
#define ZT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ZT_HOST_DEVICE inline
#endif

namespace zt::kernels {

// A uniform value in [0, 1): the top 24 bits of the hash, so it is exact in f32 and compares
// with p identically on every backend.
ZT_HOST_DEVICE float dropout_uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed ^ (index * 0xD1B54A32D192ED03ull);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * 0x1p-24f;
}

// The factor 1 / (1 - p) of the kept elements, computed on the host for every backend (f32
// tensors multiply by it rounded to f32). Asserts 0 <= p < 1.
inline double dropout_scale(float p) {
  ZT_ASSERT(p >= 0.0f && p < 1.0f, "dropout_apply: p = {} is outside [0, 1)", p);
  return 1.0 / (1.0 - static_cast<double>(p));
}

}  // namespace zt::kernels
