// cuBLASLt GEMM behind gemm.cuh. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
// so cuBLAS sees m = cols, n = rows, with B as its first operand and A as its second; a row-major
// matrix with `c` columns is a column-major one with leading dimension c. Handles and a 32 MiB
// workspace per (device, stream) are created on first use and kept for the process: a workspace
// per stream lets GEMMs on two streams run at once without sharing scratch memory (only DGELU
// GEMMs plan with it: planned_workspace_bytes).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "zt/core/assert.h"
#include "zt/kernels/cuda/gemm.cuh"
#include "zt/kernels/ops.h"

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

// The workspace a GEMM's plan may use. Given workspace, cuBLASLt's heuristic on Hopper picks
// cooperative (stream-K) nvjet kernels that clear part of it with a memset before every call;
// without, it picks the statically scheduled ("ssched") variants of the same tiles, which gave
// the same bits and a faster GPT step on an H100 (1.3B: GEMMs 91.4 -> 89.7 ms, the step 131.6 ->
// 129.6 ms, 243 fewer memsets; docs/performance.md), except for the DGELU epilogue: its only
// kernel that fuses the epilogue needs workspace (without, the epilogue runs as a separate,
// slower kernel).
// So only DGELU GEMMs plan with workspace. ZT_GEMM_WORKSPACE_MB (0-32) gives every GEMM that
// much instead, to measure the choice.
size_t planned_workspace_bytes(Epilogue epilogue, GemmAct act) {
  static const std::optional<size_t> forced = []() -> std::optional<size_t> {
    const char* v = std::getenv("ZT_GEMM_WORKSPACE_MB");
    if (v == nullptr || *v == '\0') return std::nullopt;
    const long mb = std::strtol(v, nullptr, 10);
    return std::min(kWorkspaceBytes, static_cast<size_t>(std::max(0L, mb)) << 20);
  }();
  if (forced.has_value()) return *forced;
  return epilogue == Epilogue::kAct && act == GemmAct::kDgelu ? kWorkspaceBytes : 0;
}

void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* v,
              size_t size) {
  ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, v, size));
}

// Plans: the algorithm chosen for each GEMM problem (shapes, layouts, dtypes, epilogue,
// alignments; not the pointers), kept for the process so cuBLASLt's heuristic runs once per
// problem instead of once per call. With kernels::gemm_autotune() (ZT_GEMM_AUTOTUNE=1) the
// heuristic's first kAutotuneCandidates answers are timed on the problem's first call and the
// fastest is kept: faster GEMMs where the heuristic's first pick is not the best, at the price of
// run-to-run bitwise reproducibility (timing noise can pick a different algorithm in another
// process, and algorithms sum in different orders). Off, the choice is the heuristic's first.
struct PlanKey {
  int device;
  uint64_t m, n, k;
  int64_t batch;
  cublasOperation_t op_first, op_second;
  int64_t ld_first, ld_second, ld_c;
  int64_t stride_first, stride_second, stride_c;
  DType ab, c;
  int epilogue;
  GemmAct act;
  bool bias, beta, c_in;
  uint32_t align_a, align_b, align_c;
  auto tie() const {
    return std::tie(device, m, n, k, batch, op_first, op_second, ld_first, ld_second, ld_c,
                    stride_first, stride_second, stride_c, ab, c, epilogue, act, bias, beta, c_in,
                    align_a, align_b, align_c);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

constexpr int kAutotuneCandidates = 8;
constexpr int kAutotuneRepeats = 3;

struct PlanCache {
  std::mutex mu;
  std::map<PlanKey, std::optional<cublasLtMatmulAlgo_t>> plans;  // nullopt: no algorithm
};

PlanCache& plan_cache() {
  static PlanCache* c = new PlanCache();
  return *c;
}

bool autotune_enabled() {
  return gemm_autotune();
}

// Milliseconds of kAutotuneRepeats runs after one warm-up run; infinity if the algorithm fails.
template <typename Run>
float time_algo(const cublasLtMatmulAlgo_t& algo, cudaStream_t stream, const Run& run) {
  cudaEvent_t start = nullptr, stop = nullptr;
  ZT_CUDA_CHECK(cudaEventCreate(&start));
  ZT_CUDA_CHECK(cudaEventCreate(&stop));
  float ms = std::numeric_limits<float>::infinity();
  if (run(algo) == CUBLAS_STATUS_SUCCESS) {
    ZT_CUDA_CHECK(cudaEventRecord(start, stream));
    bool ok = true;
    for (int i = 0; i < kAutotuneRepeats && ok; ++i) ok = run(algo) == CUBLAS_STATUS_SUCCESS;
    ZT_CUDA_CHECK(cudaEventRecord(stop, stream));
    ZT_CUDA_CHECK(cudaEventSynchronize(stop));
    if (ok) ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  }
  ZT_CUDA_CHECK(cudaEventDestroy(start));
  ZT_CUDA_CHECK(cudaEventDestroy(stop));
  return ms;
}

// The problem's algorithm: the cached one, else the heuristic's first (or, autotuning, the
// fastest of its first answers when `repeatable`). A problem met first while the stream is being
// captured gets the heuristic's first without keeping it, so a later call outside the capture
// tunes it; one that is not repeatable (C += A B in place) takes its overwriting twin's timed
// choice when there is one, else the heuristic's first.
template <typename Run>
std::optional<cublasLtMatmulAlgo_t> plan_algo(const PlanKey& key, cublasLtHandle_t handle,
                                              cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                              cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                              cublasLtMatmulPreference_t pref, bool repeatable,
                                              cudaStream_t stream, const Run& run) {
  PlanCache& cache = plan_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    const auto it = cache.plans.find(key);
    if (it != cache.plans.end()) return it->second;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  ZT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const bool tune = autotune_enabled() && repeatable && capture == cudaStreamCaptureStatusNone;
  if (autotune_enabled() && !repeatable) {
    // An accumulating GEMM (C += A B in place) takes its overwriting twin's timed choice.
    PlanKey twin = key;
    twin.beta = false;
    std::optional<cublasLtMatmulAlgo_t> twin_algo;
    {
      std::lock_guard<std::mutex> lock(cache.mu);
      const auto it = cache.plans.find(twin);
      if (it != cache.plans.end()) twin_algo = it->second;
    }
    cublasLtMatmulHeuristicResult_t check{};
    if (twin_algo.has_value() && cublasLtMatmulAlgoCheck(handle, desc, la, lb, lc, lc, &*twin_algo,
                                                         &check) == CUBLAS_STATUS_SUCCESS) {
      std::lock_guard<std::mutex> lock(cache.mu);
      cache.plans.emplace(key, twin_algo);
      return twin_algo;
    }
  }
  cublasLtMatmulHeuristicResult_t results[kAutotuneCandidates] = {};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
      handle, desc, la, lb, lc, lc, pref, tune ? kAutotuneCandidates : 1, results, &found);
  std::optional<cublasLtMatmulAlgo_t> algo;
  if (hs == CUBLAS_STATUS_SUCCESS && found > 0) algo = results[0].algo;
  if (tune && found > 1) {
    float best = std::numeric_limits<float>::infinity();
    for (int i = 0; i < found; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
      const float ms = time_algo(results[i].algo, stream, run);
      if (ms < best) {
        best = ms;
        algo = results[i].algo;
      }
    }
  }
  if (!autotune_enabled() || tune || !repeatable || !algo.has_value()) {
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.plans.emplace(key, algo);
  }
  return algo;
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
  const size_t ws_bytes = planned_workspace_bytes(epilogue, g.act);
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
  const PlanKey key{device,
                    p.m,
                    p.n,
                    p.k,
                    g.batch,
                    p.first.op,
                    p.second.op,
                    p.first.ld,
                    p.second.ld,
                    ldc_of(g),
                    p.first.stride,
                    p.second.stride,
                    g.stride_c,
                    g.ab_dtype,
                    g.c_dtype,
                    static_cast<int>(epilogue),
                    g.act,
                    with_bias,
                    g.beta != 0.0f,
                    g.c_in != nullptr,
                    align_a,
                    align_b,
                    align_c};
  const void* c_read = g.c_in != nullptr ? g.c_in : g.c;
  const auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(handle, desc, &g.alpha, p.first.data, la, p.second.data, lb, &g.beta,
                          c_read, lc, g.c, lc, &algo, workspace(device, stream), ws_bytes,
                          stream);
  };
  // Timing runs the GEMM several times: only where running it again gives the same result (C
  // not read, or read from a separate input) and the stream is not being captured into a graph.
  const bool repeatable = g.beta == 0.0f || (g.c_in != nullptr && g.c_in != g.c);
  const std::optional<cublasLtMatmulAlgo_t> algo =
      plan_algo(key, handle, desc, la, lb, lc, pref, repeatable, stream, run);
  if (algo.has_value()) ZT_CUBLAS_CHECK(run(*algo));
  const bool ok = algo.has_value();
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
