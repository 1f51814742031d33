// Checks for CUDA runtime and cuBLAS calls, made where each call is made (llm.c's cudaCheck).
// Included only by files under */cuda/.
#pragma once

#include <cuda_runtime.h>

#include "zt/core/assert.h"

#define ZT_CUDA_CHECK(expr)                                                                \
  do {                                                                                     \
    cudaError_t zt_err_ = (expr);                                                          \
    if (zt_err_ != cudaSuccess) [[unlikely]] {                                             \
      ::zt::detail::assert_fail(__FILE__, __LINE__, #expr, cudaGetErrorString(zt_err_));   \
    }                                                                                      \
  } while (0)

// After every kernel launch.
#define ZT_CUDA_CHECK_LAUNCH() ZT_CUDA_CHECK(cudaGetLastError())
