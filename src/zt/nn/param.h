// Parameters and units. A model is an ordered list of units (embedding, each transformer block,
// final norm + head); each unit's parameters live in one flat buffer (the unit-flat layout of
// DESIGN.md) and every Param is a view into it. Who owns the flat buffers (the engine / ZeRO
// layer) decides where they live and whether they are whole or sharded; layers only see views.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "zt/core/tensor.h"

namespace zt::nn {

enum class ParamInit : unsigned char { kNormal, kZeros, kOnes };

// Where a parameter's initial values come from instead of its ParamInit rule: a tensor (or
// several, concatenated) in a model's weight files. read() writes elements [lo, hi) of the
// parameter (row-major in the parameter's own shape) as f32; a rank reads only the ranges it
// keeps. Sources check their files when they are made, so read() fails only on an I/O error.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual void read(int64_t lo, int64_t hi, float* out) const = 0;
};

struct Param {
  std::string name;  // "h.3.attn.c_attn.weight"
  Shape shape;
  ParamInit init = ParamInit::kNormal;
  float init_std = 0.02f;
  int64_t offset = 0;  // elements from the start of its unit's flat buffer
  Tensor value;        // view into the unit's compute-dtype flat buffer (bound by the engine)
  Tensor grad;         // view into the unit's gradient flat buffer (accum dtype)
  std::shared_ptr<const ParamSource> source;  // set when the values come from weight files
  int64_t numel() const { return shape.numel(); }
};

// Parameter offsets inside a unit are aligned to this many elements, so every parameter starts
// 32-byte aligned in 16-bit types (cuBLASLt and vectorised kernels want aligned pointers).
constexpr int64_t kParamAlignElems = 16;

}  // namespace zt::nn
