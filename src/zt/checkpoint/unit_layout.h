// What a checkpoint's metadata says of a unit, written and read back, and the re-slice of a
// unit's flat buffer between tensor-parallel layouts (docs/checkpoints.md, "Tensor parallelism").
//
// Without tensor parallelism a unit is {name, numel, params: [{name, offset, shape}], frozen?}.
// A checkpoint saved with tensor parallelism T > 1 holds one flat buffer per tensor rank for each
// unit (each rank's buffer cut into data-parallel chunks as checkpoint/flat_layout.h cuts it).
// The parts of a unit are alike on every tensor rank (the same parameters, offsets and part
// shapes; tensor_parallel_check makes T divide every split size), so the unit is recorded once,
// with its part shapes, and each split parameter adds
//   "tensor_parallel": {"whole_shape": [...], "dim": 0|1, "ranges": [ranges of rank 0, ...]}
// tensor rank t's part being the rows (dim 0) or columns (dim 1) ranges[t] of the whole
// parameter, concatenated in order: nn::ParamSlice, one per rank. A parameter without it is whole
// on every tensor rank (norms, positions, row-parallel biases); the ranks step those alike, and
// readers take tensor rank 0's copy.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/core/status.h"
#include "zt/nn/layer.h"

namespace zt::ckpt {

// The unit as the metadata lists it. One part: the format without tensor parallelism. Several
// (tensor rank t's part of the unit at index t): the tensor-parallel record above; the parts
// must be alike but for their slices.
nlohmann::json unit_json(std::span<const nn::Unit* const> parts);
inline nlohmann::json unit_json(const nn::Unit& u) {
  const nn::Unit* one = &u;
  return unit_json(std::span<const nn::Unit* const>(&one, 1));
}

using DimRanges = std::vector<std::pair<int64_t, int64_t>>;

// Where each element of a split parameter lies among the tensor ranks' parts.
class SplitIndex {
 public:
  // `whole`: the whole parameter's shape; `ranges[t]`: tensor rank t's rows (dim 0) or columns
  // (dim 1). Errors name `what`: a dim other than 0 or 1, ranges outside the whole or out of
  // order, an element of the whole that no part holds. Where parts overlap (a head held by two
  // ranks), the lower rank's copy is read.
  static Result<SplitIndex> make(const std::vector<int64_t>& whole, int dim,
                                 const std::vector<DimRanges>& ranges, std::string_view what);

  // `n` elements `local` elements into tensor rank `tensor_rank`'s part (row-major in the part's
  // own shape), landing `dst` elements into the range asked.
  struct Piece {
    int tensor_rank = 0;
    int64_t local = 0;
    int64_t dst = 0;
    int64_t n = 0;
  };
  // The pieces holding elements [lo, hi) of the whole parameter (row-major), in order; adjacent
  // pieces are merged.
  std::vector<Piece> pieces(int64_t lo, int64_t hi) const;
  int tensor_size() const { return static_cast<int>(width_.size()); }
  // The element count of tensor rank t's part.
  int64_t part_numel(int t) const {
    return width_[static_cast<size_t>(t)] * (dim_ == 0 ? cols_ : rows_);
  }

 private:
  struct Run {
    int64_t lo = 0, hi = 0;  // indices along dim_ of the whole
    int rank = 0;
    int64_t local = 0;  // the index along dim_ in the rank's part where the run starts
  };
  std::vector<Run> runs_;  // sorted, disjoint, covering [0, extent along dim_)
  int dim_ = 0;
  int64_t rows_ = 0, cols_ = 0;  // the whole viewed as (whole[0], numel / whole[0])
  std::vector<int64_t> width_;   // per tensor rank: the rows (dim 0) or columns (dim 1) it holds
};

// A saved unit's parameter: at `offset` of each tensor rank's flat unit buffer.
struct SavedParam {
  std::string name;
  int64_t offset = 0;
  std::vector<int64_t> whole;       // the whole parameter's shape
  std::optional<SplitIndex> split;  // unset: whole on every tensor rank (rank 0's copy is read)
  int64_t whole_numel() const;
};

struct SavedUnit {
  std::string name;
  int64_t numel = 0;  // of each tensor rank's flat buffer
  std::vector<SavedParam> params;
};

// The metadata's unit record (unit_json) of a checkpoint saved at tensor-parallel size
// `tensor_size`. Errors name `where` (the metadata file) and the parameter: a part that lies
// outside its unit, split parameters in a checkpoint saved without tensor parallelism, ranges
// for another number of ranks, parts whose sizes are not the recorded part shape.
Result<SavedUnit> saved_unit_parse(const nlohmann::json& unit, int tensor_size,
                                   std::string_view where);

// `n` elements from `src` elements into saved tensor rank `tensor_rank`'s flat unit buffer,
// landing `dst` elements into the range asked.
struct TensorPiece {
  int tensor_rank = 0;
  int64_t src = 0;
  int64_t dst = 0;
  int64_t n = 0;
};
// The pieces of the saved tensor ranks' flat buffers that hold elements [begin, end) of a flat
// unit buffer laid out as `target`'s parameters are (their offsets and nn::ParamSlice, as this
// run's model has them: a tensor rank's part, or the whole parameter), through the whole
// parameters. What no piece covers (alignment gaps, padding) is left to the caller to zero.
// Errors name `where`: a parameter missing on either side or of another whole shape (the
// checkpoint of another model).
Result<std::vector<TensorPiece>> tensor_reslice(const SavedUnit& saved,
                                                const std::vector<nn::Param*>& target,
                                                int64_t begin, int64_t end, std::string_view where);

}  // namespace zt::ckpt
