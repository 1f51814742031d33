// Element access for the CPU ops that take every float dtype (elementwise.cc,
// dropout.cc): a visit over f32, f64, bf16 and f16, and loads and stores through the arithmetic
// type, f64 for f64 tensors and f32 otherwise, as the CUDA kernels compute. 16-bit values are
// converted through zt/core/half.h (round to nearest even).
#pragma once

#include <type_traits>

#include "zt/core/half.h"
#include "zt/core/tensor.h"

namespace zt::kernels::cpu {

template <typename T>
using MathType = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
MathType<T> elem_load(T x) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    return bf16_to_float(x);
  } else if constexpr (std::is_same_v<T, f16_t>) {
    return f16_to_float(x);
  } else {
    return x;
  }
}

template <typename T, typename V>
T elem_store(V x) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    return float_to_bf16(static_cast<float>(x));
  } else if constexpr (std::is_same_v<T, f16_t>) {
    return float_to_f16(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}

// Calls f(T{}) with T the host type of the float dtype `dt`.
template <typename F>
void float_dtype_visit(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::f32:
      f(float{});
      return;
    case DType::f64:
      f(double{});
      return;
    case DType::bf16:
      f(bf16_t{});
      return;
    case DType::f16:
      f(f16_t{});
      return;
    default:
      ZT_ASSERT(false, "{}: dtype {} is not a float type (f32, f64, bf16, f16)", op,
                dtype_name(dt));
  }
}

}  // namespace zt::kernels::cpu
