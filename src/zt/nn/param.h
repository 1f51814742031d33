// Parameters and units. A model is an ordered list of units (embedding, each transformer block,
// final norm + head); each unit's parameters live in one flat buffer (the unit-flat layout of
// DESIGN.md) and every Param is a view into it. Who owns the flat buffers (the engine / ZeRO
// layer) decides where they live and whether they are whole or sharded; layers only see views.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
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

// A tensor-parallel rank's part of a parameter: the rows (dim 0) or columns (dim 1) `ranges` of
// the whole parameter of shape `full`, in increasing order and concatenated (a fused q|k|v
// weight keeps three row ranges, one per projection). Initialisation gives these elements the
// whole parameter's values (the same draws, or the same file ranges), so the ranks' parts put
// together are the one-process model.
struct ParamSlice {
  Shape full;
  int dim = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  // Elements other tensor ranks hold too (key/value heads fewer than the ranks: each is kept by
  // `replicas` consecutive ranks): [lo, hi) runs of this slice's own elements. Their gradient is
  // summed over those ranks before the step (each rank's heads gave part of it), and the
  // gradient norm counts them on the first of them (`counts_replicated`).
  std::vector<std::pair<int64_t, int64_t>> replicated{};
  int replicas = 1;
  bool counts_replicated = true;
};
// The element runs [full_lo, full_hi) of the whole parameter that elements [lo, hi) of the slice
// are, in order.
std::vector<std::pair<int64_t, int64_t>> slice_runs(const ParamSlice& s, int64_t lo, int64_t hi);

struct Param {
  std::string name;  // "h.3.attn.c_attn.weight"
  Shape shape;
  ParamInit init = ParamInit::kNormal;
  float init_std = 0.02f;
  int64_t offset = 0;  // elements from the start of its unit's flat buffer
  Tensor value;        // view into the unit's compute-dtype flat buffer (bound by the engine)
  Tensor grad;         // view into the unit's gradient flat buffer (accum dtype)
  // The gradient buffer holds no values yet (ZeroState binds a fresh one for each backward at
  // stages 2-3 without clearing it): the first op that produces this gradient writes it. Ops
  // that can write take grad_write (a weight-gradient GEMM with beta 0); ops that can only add
  // take grad_for_add, which clears it first.
  bool grad_unwritten = false;
  std::shared_ptr<const ParamSource> source;  // set when the values come from weight files
  // Set on a tensor-parallel rank's part of a sharded parameter (source and init then describe
  // the whole parameter); unset: the whole parameter (replicated on every tensor-parallel rank).
  std::optional<ParamSlice> slice;
  int64_t numel() const { return shape.numel(); }
};

// For an op that writes its result when the gradient is unwritten and adds otherwise: whether
// this op writes (and from now on the gradient is written).
inline bool grad_write(Param& p) {
  const bool write = p.grad_unwritten;
  p.grad_unwritten = false;
  return write;
}
// For an op that can only add into the gradient: the gradient, cleared first when unwritten.
inline Tensor& grad_for_add(Param& p, const Stream& s) {
  if (p.grad_unwritten) {
    p.grad.zero(s);
    p.grad_unwritten = false;
  }
  return p.grad;
}

// Parameter offsets inside a unit are aligned to this many elements, so every parameter starts
// 32-byte aligned in 16-bit types (cuBLASLt and vectorised kernels want aligned pointers).
constexpr int64_t kParamAlignElems = 16;

}  // namespace zt::nn
