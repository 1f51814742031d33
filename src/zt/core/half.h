// Host-side 16-bit float types: bf16 and IEEE fp16 as bit patterns with conversions to and from
// float (round to nearest even, NaN preserved). Device code uses CUDA's own types; these have the
// same size and bit layout, so buffers move between host and device unchanged.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace zt {

struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};
static_assert(sizeof(bf16_t) == 2 && sizeof(f16_t) == 2);

inline float bf16_to_float(bf16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16);
}

inline bf16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};  // NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>((u + rounding) >> 16)};
}

float f16_to_float(f16_t h);
f16_t float_to_f16(float f);

// Rounds a float to the nearest value representable in the 16-bit type.
inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }
inline float round_to_f16(float f) { return f16_to_float(float_to_f16(f)); }

}  // namespace zt
