// Rotary position embedding of one head in transformers' rotate-half form, shared by the CPU
// qkv_expand_* and kv_cache_update (contracts in kernels/op_table.inc). Host-only.
#pragma once

#include <cstdint>

namespace zt::kernels::cpu {

// kForward rotates by +angle (the forward ops); kInverse by -angle, the transpose of the forward,
// which the backward applies to gradients.
enum class Rotation : unsigned char { kForward, kInverse };

// dst = R(cos_row, sin_row) src for one head of HS values (HS even), or a plain copy when cos_row
// is null. With h = HS/2, c = cos_row[i], s = sin_row[i], i < h:
// forward  y[i] = x[i] c - x[i+h] s,  y[i+h] = x[i+h] c + x[i] s;
// inverse  y[i] = x[i] c + x[i+h] s,  y[i+h] = x[i+h] c - x[i] s.
// dst may equal src (each pair is read before it is written).
template <typename T>
void rotary_apply(T* dst, const T* src, const float* cos_row, const float* sin_row, int64_t HS,
                  Rotation rotation) {
  if (cos_row == nullptr) {
    for (int64_t i = 0; i < HS; ++i) dst[i] = src[i];
    return;
  }
  const int64_t h = HS / 2;
  const T sign = rotation == Rotation::kForward ? T{1} : T{-1};
  for (int64_t i = 0; i < h; ++i) {
    const T c = static_cast<T>(cos_row[i]);
    const T s = sign * static_cast<T>(sin_row[i]);
    const T x1 = src[i];
    const T x2 = src[i + h];
    dst[i] = x1 * c - x2 * s;
    dst[i + h] = x2 * c + x1 * s;
  }
}

}  // namespace zt::kernels::cpu
