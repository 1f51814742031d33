// Test helpers for the rotary ops (qkv_expand_*, kv_cache_update): Llama's cos/sin tables and a
// direct long-double rotation to check them against.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "zt/core/tensor.h"

namespace zt::testing {

// Llama's tables (transformers' default rope): angle[p, i] = p theta^(-2i/HS), as (maxP, HS/2)
// f32 CPU tensors.
struct RotaryTables {
  Tensor cos, sin;
};
inline RotaryTables rotary_tables(int64_t max_pos, int64_t head_size, double theta = 10000.0) {
  const int64_t half = head_size / 2;
  std::vector<double> c, s;
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(p) * std::pow(theta, -2.0 * static_cast<double>(i) / head_size);
      c.push_back(std::cos(angle));
      s.push_back(std::sin(angle));
    }
  }
  return {Tensor::from_doubles(c, {max_pos, half}, DType::f32),
          Tensor::from_doubles(s, {max_pos, half}, DType::f32)};
}

// One head x (HS values) rotated to position p with the tables' own (f32) values, in the
// rotate-half form written out directly: y = x cos + rotate_half(x) sin, rotate_half(x) =
// [-x2 | x1].
inline std::vector<long double> rotate_naive(const std::vector<long double>& x,
                                             const std::vector<double>& cos_table,
                                             const std::vector<double>& sin_table, int64_t p) {
  const int64_t hs = static_cast<int64_t>(x.size());
  const int64_t half = hs / 2;
  std::vector<long double> y(x.size());
  for (int64_t i = 0; i < hs; ++i) {
    const int64_t f = i % half;  // cos/sin are repeated over both halves
    const long double c = cos_table[p * half + f];
    const long double s = sin_table[p * half + f];
    const long double rot = i < half ? -x[i + half] : x[i - half];
    y[i] = x[i] * c + rot * s;
  }
  return y;
}

}  // namespace zt::testing
