#include "zt/core/half.h"

#include <cmath>

namespace zt {

float f16_to_float(f16_t h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalise
      float f = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

f16_t float_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in fp16: round abs * 2^24 to an integer
    float a = std::bit_cast<float>(abs);
    float scaled = std::nearbyint(a * 16777216.0f);  // ties to even in the default rounding mode
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(scaled))};
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return {static_cast<uint16_t>(sign | (abs >> 13))};
}

}  // namespace zt
