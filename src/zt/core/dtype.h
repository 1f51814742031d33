// The dtype table, declared once (X-macro): every switch over dtypes is generated from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "zt/core/half.h"
#include "zt/core/status.h"

namespace zt {

// X(enum name, C++ host type, size in bytes, canonical name)
#define ZT_DTYPES(X)            \
  X(f32, float, 4, "f32")       \
  X(f16, f16_t, 2, "f16")       \
  X(bf16, bf16_t, 2, "bf16")    \
  X(f64, double, 8, "f64")      \
  X(i32, int32_t, 4, "i32")     \
  X(i64, int64_t, 8, "i64")     \
  X(u16, uint16_t, 2, "u16")    \
  X(u8, uint8_t, 1, "u8")

enum class DType : unsigned char {
#define ZT_DTYPE_ENUM(name, type, size, str) name,
  ZT_DTYPES(ZT_DTYPE_ENUM)
#undef ZT_DTYPE_ENUM
};

constexpr int kNumDTypes = 0
#define ZT_DTYPE_COUNT(name, type, size, str) +1
    ZT_DTYPES(ZT_DTYPE_COUNT)
#undef ZT_DTYPE_COUNT
    ;

constexpr size_t dtype_size(DType d) {
  switch (d) {
#define ZT_DTYPE_SIZE(name, type, size, str) \
  case DType::name:                          \
    return size;
    ZT_DTYPES(ZT_DTYPE_SIZE)
#undef ZT_DTYPE_SIZE
  }
  return 0;
}

constexpr std::string_view dtype_name(DType d) {
  switch (d) {
#define ZT_DTYPE_NAME(name, type, size, str) \
  case DType::name:                          \
    return str;
    ZT_DTYPES(ZT_DTYPE_NAME)
#undef ZT_DTYPE_NAME
  }
  return "?";
}

constexpr bool dtype_is_float(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16 || d == DType::f64;
}

// Accepts the canonical names plus the spellings users write in configs: "fp32", "float32",
// "fp16", "float16", "half", "bfloat16", "float64", "double".
Result<DType> dtype_parse(std::string_view name);

// Maps a C++ host type to its DType at compile time: dtype_of<float>() == DType::f32.
template <typename T>
constexpr DType dtype_of();
#define ZT_DTYPE_OF(name, type, size, str)  \
  template <>                               \
  constexpr DType dtype_of<type>() {        \
    return DType::name;                     \
  }
ZT_DTYPES(ZT_DTYPE_OF)
#undef ZT_DTYPE_OF

}  // namespace zt
