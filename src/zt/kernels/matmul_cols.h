// The shape checks of the column-block matmuls (matmul_cols_forward / matmul_cols_backward,
// contracts in kernels/op_table.inc), shared by their CPU and CUDA bodies so that both backends
// accept exactly the same shapes. Device and dtype checks stay with each backend.
#pragma once

#include <cstdint>

#include "zt/kernels/ops.h"

namespace zt::kernels {

// weight (M,K); in (N,W) read at columns [in_col0, in_col0 + K); wide (N,Y) written or read at
// columns [col0, col0 + M).
struct ColsDims {
  int64_t N = 0, K = 0, M = 0, Y = 0, W = 0;
};

inline ColsDims cols_dims(const Tensor& in, const Tensor& weight, const Tensor& wide,
                          int64_t col0, int64_t in_col0, const char* op, const char* wide_name) {
  ZT_ASSERT(weight.ndim() == 2 && weight.size(1) > 0, "{}: weight {} must be (M,K)", op,
            weight.shape().str());
  const int64_t M = weight.size(0), K = weight.size(1);
  ZT_ASSERT(in.ndim() >= 1 && in.size(-1) > 0, "{}: in {} must be (N, W)", op, in.shape().str());
  const int64_t W = in.size(-1);
  ZT_ASSERT(in_col0 >= 0 && in_col0 + K <= W, "{}: in's columns [{}, {}) are outside in {}", op,
            in_col0, in_col0 + K, in.shape().str());
  const int64_t N = in.numel() / W;
  ZT_ASSERT(wide.ndim() >= 1 && wide.size(-1) > 0 && wide.numel() == N * wide.size(-1),
            "{}: {} {} is not (N, Y), N = {}", op, wide_name, wide.shape().str(), N);
  const int64_t Y = wide.size(-1);
  ZT_ASSERT(col0 >= 0 && col0 + M <= Y, "{}: columns [{}, {}) are outside {} {}", op, col0,
            col0 + M, wide_name, wide.shape().str());
  return {N, K, M, Y, W};
}

}  // namespace zt::kernels
