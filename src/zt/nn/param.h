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

struct Param {
  std::string name;  // "h.3.attn.c_attn.weight"
  Shape shape;
  ParamInit init = ParamInit::kNormal;
  float init_std = 0.02f;
  int64_t offset = 0;  // elements from the start of its unit's flat buffer
  Tensor value;        // view into the unit's compute-dtype flat buffer (bound by the engine)
  Tensor grad;         // view into the unit's gradient flat buffer (accum dtype)
  int64_t numel() const { return shape.numel(); }
};

// Parameter offsets inside a unit are aligned to this many elements, so every parameter starts
// 32-byte aligned in 16-bit types (cuBLASLt and vectorised kernels want aligned pointers).
constexpr int64_t kParamAlignElems = 16;

}  // namespace zt::nn
