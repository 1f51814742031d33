// The shape check of the column-block ops cols_add and cols_copy (contracts in
// kernels/op_table.inc), shared by their CPU and CUDA bodies so that both backends accept exactly
// the same shapes. Device and dtype checks stay with each backend.
#pragma once

#include <cstdint>

#include "zt/kernels/ops.h"

namespace zt::kernels {

// `wide` viewed as (rows, width), `block` as (rows, block_width); the block is the columns
// [col0, col0 + block_width) of each wide row.
struct ColumnBlock {
  int64_t rows = 0;
  int64_t width = 0;
  int64_t block_width = 0;
  int64_t col0 = 0;
};

inline ColumnBlock column_block(const Tensor& wide, const Tensor& block, int64_t col0,
                                const char* op) {
  ZT_ASSERT(wide.defined() && block.defined() && wide.ndim() >= 1 && block.ndim() >= 1,
            "{}: both tensors must be defined, with at least one dimension", op);
  const int64_t width = wide.size(-1);
  const int64_t block_width = block.size(-1);
  ZT_ASSERT(block_width >= 1 && col0 >= 0 && col0 + block_width <= width,
            "{}: columns [{}, {}) of the block {} do not fit in the rows of {}", op, col0,
            col0 + block_width, block.shape().str(), wide.shape().str());
  const int64_t rows = wide.numel() / width;
  ZT_ASSERT(block.numel() / block_width == rows, "{}: {} has {} rows of {} but {} has {}", op,
            wide.shape().str(), rows, width, block.shape().str(), block.numel() / block_width);
  return {rows, width, block_width, col0};
}

}  // namespace zt::kernels
