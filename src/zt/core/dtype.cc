#include "zt/core/dtype.h"

namespace zt {

Result<DType> dtype_parse(std::string_view name) {
#define ZT_DTYPE_PARSE(n, type, size, str) \
  if (name == str) return DType::n;
  ZT_DTYPES(ZT_DTYPE_PARSE)
#undef ZT_DTYPE_PARSE
  if (name == "fp32" || name == "float32" || name == "float") return DType::f32;
  if (name == "fp16" || name == "float16" || name == "half") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "fp64" || name == "float64" || name == "double") return DType::f64;
  return invalid_argument("unknown dtype '{}'; expected one of fp32, fp16, bf16", name);
}

}  // namespace zt
