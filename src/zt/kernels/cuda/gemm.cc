// cuBLASLt GEMM behind gemm.cuh. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
// so cuBLAS sees m = cols, n = rows, with B as its first operand and A as its second; a row-major
// matrix with `c` columns is a column-major one with leading dimension c. Handles and a 32 MiB
// workspace per (device, stream) are created on first use and kept for the process: a workspace
// per stream lets GEMMs on two streams run at once without sharing scratch memory.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "zt/core/assert.h"
#include "zt/kernels/cuda/gemm.cuh"

namespace zt::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

struct BlasContext {
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;  // created only if cuBLASLt ever declines a layout
};

struct BlasState {
  std::mutex mu;
  std::map<int, BlasContext> contexts;                       // by device
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;  // by (device, stream)
};

BlasState& blas_state() {
  static BlasState* s = new BlasState();  // never destroyed: handles live for the process
  return *s;
}

int current_device() {
  int d = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

cublasLtHandle_t lt_handle(int device) {
  BlasState& st = blas_state();
  std::lock_guard<std::mutex> lock(st.mu);
  BlasContext& c = st.contexts[device];
  if (c.lt == nullptr) ZT_CUBLAS_CHECK(cublasLtCreate(&c.lt));
  return c.lt;
}

cublasHandle_t blas_handle(int device) {
  BlasState& st = blas_state();
  std::lock_guard<std::mutex> lock(st.mu);
  BlasContext& c = st.contexts[device];
  if (c.blas == nullptr) ZT_CUBLAS_CHECK(cublasCreate(&c.blas));
  return c.blas;
}

// The one cudaMalloc of this file: once per (device, stream), on the first GEMM there.
void* workspace(int device, cudaStream_t stream) {
  BlasState& st = blas_state();
  std::lock_guard<std::mutex> lock(st.mu);
  void*& w = st.workspaces[{device, stream}];
  if (w == nullptr) ZT_CUDA_CHECK(cudaMalloc(&w, kWorkspaceBytes));
  return w;
}

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      break;
  }
  ZT_ASSERT(false, "gemm: dtype {} is not a GEMM dtype (f32, bf16, f16)", dtype_name(d));
  return CUDA_R_32F;
}

// Largest power of two (<= 256) dividing the address of every matrix of the batch and of every
// row (ld elements apart): cuBLASLt's heuristic assumes 256-byte alignment unless told otherwise.
uint32_t alignment(const void* p, int64_t stride_elems, DType d, int64_t batch, int64_t ld) {
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  if (batch > 1) v |= static_cast<uintptr_t>(stride_elems) * dtype_size(d);
  v |= static_cast<uintptr_t>(ld) * dtype_size(d);
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

// C's row stride: ldc, or its row length (cols) when contiguous.
int64_t ldc_of(const GemmArgs& g) {
  return g.ldc > 0 ? g.ldc : g.cols;
}

cublasOperation_t op_of(Transpose t) {
  return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
}

// The column-major view of a row-major operand (see the file comment).
struct LtOperand {
  const void* data;
  cublasOperation_t op;
  uint64_t rows;  // of the stored column-major matrix, before op
  uint64_t cols;
  int64_t ld;
  int64_t stride;
};

struct LtProblem {
  uint64_t m, n, k;
  LtOperand first;   // row-major B
  LtOperand second;  // row-major A
};

LtProblem lt_problem(const GemmArgs& g) {
  LtProblem p{};
  p.m = static_cast<uint64_t>(g.cols);
  p.n = static_cast<uint64_t>(g.rows);
  p.k = static_cast<uint64_t>(g.inner);
  // Row-major B is (inner x cols), or (cols x inner) when transposed.
  const int64_t ldb = g.ldb > 0 ? g.ldb : (g.trans_b == Transpose::kNo ? g.cols : g.inner);
  p.first = {g.b,
             op_of(g.trans_b),
             g.trans_b == Transpose::kNo ? p.m : p.k,
             g.trans_b == Transpose::kNo ? p.k : p.m,
             ldb,
             g.stride_b};
  // Row-major A is (rows x inner), or (inner x rows) when transposed.
  const int64_t lda = g.lda > 0 ? g.lda : (g.trans_a == Transpose::kNo ? g.inner : g.rows);
  p.second = {g.a,
              op_of(g.trans_a),
              g.trans_a == Transpose::kNo ? p.k : p.n,
              g.trans_a == Transpose::kNo ? p.n : p.k,
              lda,
              g.stride_a};
  return p;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld,
                                   int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof(count)));
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &stride, sizeof(stride)));
  }
  return l;
}

enum class Epilogue : unsigned char { kNone, kBias, kAct };

void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* v,
              size_t size) {
  ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, v, size));
}

// One cuBLASLt attempt; false when its heuristic offers no algorithm for this problem.
bool gemm_lt(const GemmArgs& g, const LtProblem& p, Epilogue epilogue, cudaStream_t stream) {
  const int device = current_device();
  const cudaDataType_t ab = cuda_type(g.ab_dtype);
  const cudaDataType_t c = cuda_type(g.c_dtype);

  cublasLtMatmulDesc_t desc = nullptr;
  ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSA, &p.first.op, sizeof(p.first.op));
  set_attr(desc, CUBLASLT_MATMUL_DESC_TRANSB, &p.second.op, sizeof(p.second.op));
  const bool with_bias = epilogue != Epilogue::kNone && g.bias != nullptr;
  if (epilogue != Epilogue::kNone) {
    cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BIAS;
    if (epilogue == Epilogue::kAct) {
      e = g.act == GemmAct::kDgelu ? CUBLASLT_EPILOGUE_DGELU
          : with_bias              ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                   : CUBLASLT_EPILOGUE_GELU_AUX;
      // The aux matrix has C's column-major shape (m x n) and leading dimension.
      const int64_t aux_ld = static_cast<int64_t>(p.m);
      const int32_t aux_type = c;
      set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux));
      set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld));
      set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type));
    }
    set_attr(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e));
    if (with_bias) {
      set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias));
      const int32_t bias_type = c;
      set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type));
    }
  }
  cublasLtMatrixLayout_t la =
      make_layout(ab, p.first.rows, p.first.cols, p.first.ld, g.batch, p.first.stride);
  cublasLtMatrixLayout_t lb =
      make_layout(ab, p.second.rows, p.second.cols, p.second.ld, g.batch, p.second.stride);
  cublasLtMatrixLayout_t lc = make_layout(c, p.m, p.n, ldc_of(g), g.batch, g.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws_bytes = kWorkspaceBytes;
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  const uint32_t align_a = alignment(p.first.data, p.first.stride, g.ab_dtype, g.batch, p.first.ld);
  const uint32_t align_b =
      alignment(p.second.data, p.second.stride, g.ab_dtype, g.batch, p.second.ld);
  const uint32_t align_c = alignment(g.c, g.stride_c, g.c_dtype, g.batch, ldc_of(g));
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));

  cublasLtHandle_t handle = lt_handle(device);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, lc, pref, 1, &result, &found);
  const bool ok = hs == CUBLAS_STATUS_SUCCESS && found > 0;
  if (ok) {
    ZT_CUBLAS_CHECK(cublasLtMatmul(handle, desc, &g.alpha, p.first.data, la, p.second.data, lb,
                                   &g.beta, g.c_in != nullptr ? g.c_in : g.c, lc, g.c, lc,
                                   &result.algo, workspace(device, stream), kWorkspaceBytes,
                                   stream));
  }
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
  ZT_CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
  return ok;
}

// The last resort: cuBLAS picks a kernel for any valid layout.
void gemm_blas(const GemmArgs& g, const LtProblem& p, cudaStream_t stream) {
  const int device = current_device();
  cublasHandle_t h = blas_handle(device);
  ZT_CUBLAS_CHECK(cublasSetStream(h, stream));
  ZT_CUBLAS_CHECK(cublasSetWorkspace(h, workspace(device, stream), kWorkspaceBytes));
  ZT_ASSERT(p.m <= INT_MAX && p.n <= INT_MAX && p.k <= INT_MAX && g.batch <= INT_MAX,
            "gemm: {}x{}x{} (batch {}) is too large for cuBLAS's int sizes", p.m, p.n, p.k,
            g.batch);
  ZT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, p.first.op, p.second.op, static_cast<int>(p.m), static_cast<int>(p.n),
      static_cast<int>(p.k), &g.alpha, p.first.data, cuda_type(g.ab_dtype),
      static_cast<int>(p.first.ld), p.first.stride, p.second.data, cuda_type(g.ab_dtype),
      static_cast<int>(p.second.ld), p.second.stride, &g.beta, g.c, cuda_type(g.c_dtype),
      static_cast<int>(ldc_of(g)), g.stride_c, static_cast<int>(g.batch), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void gemm(const GemmArgs& g, cudaStream_t stream) {
  ZT_ASSERT(g.rows >= 0 && g.cols >= 0 && g.inner > 0 && g.batch >= 1,
            "gemm: bad sizes rows {} cols {} inner {} batch {}", g.rows, g.cols, g.inner, g.batch);
  ZT_ASSERT(g.bias == nullptr || g.batch == 1, "gemm: bias only for unbatched GEMMs");
  ZT_ASSERT(g.ab_dtype == g.c_dtype || g.c_dtype == DType::f32,
            "gemm: C is {} with A/B {}; C must be the A/B dtype or f32", dtype_name(g.c_dtype),
            dtype_name(g.ab_dtype));
  ZT_ASSERT((g.lda == 0 && g.ldb == 0 && g.ldc == 0) || (g.batch == 1 && g.bias == nullptr),
            "gemm: row strides only for unbatched GEMMs without a bias");
  ZT_ASSERT(g.c_in == nullptr || (g.batch == 1 && g.ldc == 0),
            "gemm: a separate C input only for unbatched, contiguous GEMMs");
  if (g.rows == 0 || g.cols == 0) return;
  const LtProblem p = lt_problem(g);
  if (g.bias != nullptr && gemm_lt(g, p, Epilogue::kBias, stream)) return;
  if (!gemm_lt(g, p, Epilogue::kNone, stream)) {
    if (g.c_in != nullptr) {  // cuBLAS reads C where it writes it: start from a copy of c_in
      ZT_CUDA_CHECK(cudaMemcpyAsync(g.c, g.c_in, g.rows * g.cols * dtype_size(g.c_dtype),
                                    cudaMemcpyDeviceToDevice, stream));
    }
    gemm_blas(g, p, stream);
  }
  if (g.bias != nullptr) bias_add_rows(g.c, g.bias, g.rows, g.cols, g.c_dtype, stream);
}

bool gemm_act(const GemmArgs& g, cudaStream_t stream) {
  ZT_ASSERT(g.act != GemmAct::kNone && g.aux != nullptr, "gemm_act: no activation or aux matrix");
  ZT_ASSERT(g.rows >= 0 && g.cols >= 0 && g.inner > 0,
            "gemm_act: bad sizes rows {} cols {} inner {}", g.rows, g.cols, g.inner);
  ZT_ASSERT(g.batch == 1 && g.lda == 0 && g.ldb == 0 && g.ldc == 0 && g.c_dtype == g.ab_dtype,
            "gemm_act: unbatched, contiguous, C in the A/B dtype only");
  ZT_ASSERT(g.act != GemmAct::kDgelu || g.bias == nullptr, "gemm_act: no bias with kDgelu");
  if (g.rows == 0 || g.cols == 0) return true;
  // cuBLASLt wants the aux matrix's leading dimension a multiple of 8 and the matrix aligned.
  if (g.cols % 8 != 0 || reinterpret_cast<uintptr_t>(g.aux) % 16 != 0) return false;
  return gemm_lt(g, lt_problem(g), Epilogue::kAct, stream);
}

}  // namespace zt::kernels::cuda
