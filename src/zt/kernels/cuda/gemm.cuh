// Row-major (batched) GEMM on cuBLASLt for matmul and attention, with fp32 accumulation. Plain C++
// (no device code), so gemm.cc builds with the host compiler. Assumes contiguous row-major
// matrices; the mapping onto column-major cuBLAS is done once, in gemm.cc.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "zt/core/cuda/cuda_check.h"
#include "zt/core/dtype.h"

#define ZT_CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                         \
    cublasStatus_t zt_st_ = (expr);                                                            \
    if (zt_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                        \
      ::zt::detail::assert_fail(__FILE__, __LINE__, #expr,                                     \
                                std::string("cuBLAS error ") + cublasGetStatusString(zt_st_)); \
    }                                                                                          \
  } while (0)

namespace zt::kernels::cuda {

enum class Transpose : unsigned char { kNo = 0, kYes = 1 };

// An activation applied in cuBLASLt's epilogue (GELU, tanh form). kGelu: C = gelu(result [+ bias])
// and aux = result [+ bias] (the GELU's input, which its backward needs). kDgelu: C = result *
// gelu'(aux), aux being that input (the GELU's backward fused into the GEMM before it).
enum class GemmAct : unsigned char { kNone, kGelu, kDgelu };

// C[b] (rows x cols) = alpha op(A[b]) (rows x inner) @ op(B[b]) (inner x cols) + beta C[b]
// (+ bias (cols) added to every row, when given), for b in [0, batch). All row-major; matrix b of
// X starts `stride_x` elements after matrix b-1. A and B share `ab_dtype`; C (and bias) are
// `c_dtype`: both the compute dtype, or c f32 with 16-bit A/B (parameter gradients, attention
// scores).
struct GemmArgs {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t inner = 0;
  const void* a = nullptr;
  Transpose trans_a = Transpose::kNo;
  int64_t stride_a = 0;
  const void* b = nullptr;
  Transpose trans_b = Transpose::kNo;
  int64_t stride_b = 0;
  void* c = nullptr;
  int64_t stride_c = 0;
  int64_t batch = 1;
  DType ab_dtype = DType::f32;
  DType c_dtype = DType::f32;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* bias = nullptr;
  // Row strides (elements between consecutive rows) of A, B and C as stored; 0: contiguous (the
  // stored row length). A larger one reads or writes a column block of a wider matrix.
  int64_t lda = 0;
  int64_t ldb = 0;
  int64_t ldc = 0;
  // C's input when it is not the output: c = alpha op(A) op(B) + beta c_in (+ bias), c_in (rows x
  // cols, c_dtype, contiguous) read, c written (unbatched only). A residual added by the GEMM.
  const void* c_in = nullptr;
  // The activation epilogue (gemm_act only): aux is (rows x cols) of c_dtype, contiguous rows.
  GemmAct act = GemmAct::kNone;
  void* aux = nullptr;
};

// Runs the GEMM on `stream` of the current device: cuBLASLt with the bias epilogue; when cuBLASLt
// offers no algorithm for the layout (odd leading dimensions or alignments), cuBLASLt without the
// epilogue plus bias_add_rows, then cublasGemmStridedBatchedEx. No host synchronisation.
void gemm(const GemmArgs& args, cudaStream_t stream);

// The GEMM with args.act in cuBLASLt's epilogue (unbatched, contiguous, C in the A/B dtype). False,
// having done nothing, when cuBLASLt offers no algorithm for it or the layout does not allow the
// epilogue's aux matrix (cols a multiple of 8, 16-byte aligned): the caller then runs the GEMM and
// the activation's own kernel.
bool gemm_act(const GemmArgs& args, cudaStream_t stream);

// c (rows x cols, dtype) += bias (cols) on every row. Defined in matmul.cu.
void bias_add_rows(void* c, const void* bias, int64_t rows, int64_t cols, DType dtype,
                   cudaStream_t stream);

}  // namespace zt::kernels::cuda
