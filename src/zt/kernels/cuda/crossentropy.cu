// CUDA softmax cross-entropy (contract in kernels/ops.h): one block of 1024 threads per row,
// 16-byte loads where the row allows. A first pass keeps a running (max, sum of exp) per thread
// (online softmax) and combines them across the block; the fused version then overwrites the row
// with dlogits = dloss (softmax - onehot) in the logits dtype, and zeroes the padding columns
// [vocab, Vp). No probability tensor is materialised. The exponentials are the hardware's
// (ex2.approx on x log2 e, as Triton's exp and so torch.compile's fused cross-entropy): with
// libm-accurate expf the kernel was bound by arithmetic, not memory (1.78 against 1.49 ms for
// 16384 rows of GPT-2's 50304 columns in bf16 on an H100; docs/performance.md). Every argument is
// x - max <= 0, where the relative error stays within a few float ulps.
// A target outside [0, vocab) traps the kernel (the next CUDA call fails).
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 512;      // the vocabulary-parallel kernels
constexpr int kRowThreads = 1024;  // crossentropy_kernel

// e^x for x <= 0 (or -inf: 0).
__device__ __forceinline__ float exp_nonpositive(float x) {
  return __expf(x);
}

enum class CeMode : unsigned char { kLossOnly, kFused };

// Chunks of kV columns per thread (16-byte loads and stores when kV > 1: Vp a multiple of kV and
// the logits aligned). The first pass folds each chunk into the thread's running (max, sum of
// exp) with one rescale per chunk.
template <typename T, CeMode kMode, int kV>
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_kernel(float* losses, T* logits, const int32_t* targets, int64_t vocab, int64_t vp,
                        float dloss) {
  __shared__ float scratch[kWarpSize];
  __shared__ float target_logit;
  T* row = logits + blockIdx.x * vp;
  const int32_t target = targets[blockIdx.x];
  if (target >= vocab) __trap();
  const int64_t stride = static_cast<int64_t>(blockDim.x) * kV;
  if (target < 0) {  // not counted (transformers' ignore index): no loss, no gradient
    if (threadIdx.x == 0) losses[blockIdx.x] = 0.0f;
    if constexpr (kMode == CeMode::kFused) {
      float zero[kV];
#pragma unroll
      for (int k = 0; k < kV; ++k) zero[k] = 0.0f;
      for (int64_t j = threadIdx.x * kV; j < vp; j += stride) store_from_f32<T, kV>(row + j, zero);
    }
    return;
  }
  // Read before any thread of the block can overwrite the row (the reductions below are barriers).
  if (threadIdx.x == 0) target_logit = to_f32(row[target]);

  float m = -INFINITY;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x * kV; j < vocab; j += stride) {
    float x[kV];
    load_f32<T, kV>(x, row + j);
    float cm = -INFINITY;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      if (j + k < vocab) cm = fmaxf(cm, x[k]);
    }
    if (cm == -INFINITY) continue;  // nothing but -inf (or padding) in this chunk
    if (cm > m) {
      sum = m == -INFINITY ? 0.0f : sum * exp_nonpositive(m - cm);  // rescale to the new max
      m = cm;
    }
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      if (j + k < vocab && x[k] != -INFINITY) sum += exp_nonpositive(x[k] - m);
    }
  }
  const float row_max = block_max(m, scratch);
  const float scaled = m == -INFINITY ? 0.0f : sum * exp_nonpositive(m - row_max);
  const float row_sum = block_sum(scaled, scratch);
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(row_sum) + row_max - target_logit;

  if constexpr (kMode == CeMode::kFused) {
    const float inv_sum = 1.0f / row_sum;
    for (int64_t j = threadIdx.x * kV; j < vp; j += stride) {
      float x[kV], d[kV];
      load_f32<T, kV>(x, row + j);
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        d[k] = 0.0f;
        if (j + k < vocab) {
          const float p = exp_nonpositive(x[k] - row_max) * inv_sum;
          d[k] = dloss * (p - (j + k == target ? 1.0f : 0.0f));
        }
      }
      store_from_f32<T, kV>(row + j, d);
    }
  }
}

struct CeShape {
  int64_t rows;
  int64_t vp;
};

CeShape crossentropy_shape(const Tensor& losses, const Tensor& logits, const Tensor& targets,
                           int64_t vocab, const char* op) {
  check_cuda(logits, op, "logits");
  ZT_ASSERT(logits.ndim() >= 1, "{}: logits must be (N, Vp)", op);
  const int64_t vp = logits.size(-1);
  ZT_ASSERT(vocab > 0 && vocab <= vp, "{}: vocab {} must be in [1, Vp = {}]", op, vocab, vp);
  const int64_t rows = logits.numel() / vp;
  ZT_ASSERT(rows < (int64_t{1} << 31), "{}: {} rows exceed one grid", op, rows);
  check_dtype(losses, DType::f32, op, "losses");
  check_numel(losses, rows, op, "losses");
  check_dtype(targets, DType::i32, op, "targets");
  check_numel(targets, rows, op, "targets");
  check_same_device(logits, losses, op);
  check_same_device(logits, targets, op);
  return {rows, vp};
}

template <CeMode kMode>
void crossentropy_launch(Tensor& losses, const Tensor& logits, const Tensor& targets, int64_t vocab,
                         float dloss, const Stream& s, const char* op) {
  const CeShape sh = crossentropy_shape(losses, logits, targets, vocab, op);
  if (sh.rows == 0) return;
  DeviceGuard guard(logits.device());
  dispatch_compute(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kV = kVec<T>;
    if (sh.vp % kV == 0 && vec16_aligned(ptr<const T>(logits))) {
      crossentropy_kernel<T, kMode, kV>
          <<<static_cast<unsigned>(sh.rows), kRowThreads, 0, stream_of(s)>>>(
              ptr<float>(losses), ptr<T>(logits), ptr<const int32_t>(targets), vocab, sh.vp, dloss);
    } else {
      crossentropy_kernel<T, kMode, 1>
          <<<static_cast<unsigned>(sh.rows), kRowThreads, 0, stream_of(s)>>>(
              ptr<float>(losses), ptr<T>(logits), ptr<const int32_t>(targets), vocab, sh.vp, dloss);
    }
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void crossentropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets,
                          int64_t vocab, const Stream& s) {
  // The loss-only kernel never writes the logits.
  crossentropy_launch<CeMode::kLossOnly>(losses, logits, targets, vocab, 0.0f, s,
                                         "crossentropy_forward");
}

void crossentropy_fused(Tensor& losses, Tensor& logits, const Tensor& targets, int64_t vocab,
                        float dloss, const Stream& s) {
  crossentropy_launch<CeMode::kFused>(losses, logits, targets, vocab, dloss, s,
                                      "crossentropy_fused");
}

// ---- vocabulary-parallel (contract in kernels/ops.h): one block per row, scalar loads; `real` is
// how many of the rank's Vl columns are below the vocabulary.
namespace {

template <typename T>
__global__ void ce_parallel_max_kernel(float* rowmax, const T* logits, int64_t vl, int64_t real) {
  __shared__ float scratch[kWarpSize];
  const T* row = logits + blockIdx.x * vl;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < real; j += blockDim.x) m = fmaxf(m, to_f32(row[j]));
  const float r = block_max(m, scratch);
  if (threadIdx.x == 0) rowmax[blockIdx.x] = r;
}

template <typename T>
__global__ void ce_parallel_sums_kernel(float* sums, const T* logits, const int32_t* targets,
                                        const float* rowmax, int64_t vl, int64_t real, int64_t col0,
                                        int64_t vocab) {
  __shared__ float scratch[kWarpSize];
  const T* row = logits + blockIdx.x * vl;
  const int32_t target = targets[blockIdx.x];
  if (target >= vocab) __trap();
  if (target < 0) {
    if (threadIdx.x == 0) {
      sums[2 * blockIdx.x] = 0.0f;
      sums[2 * blockIdx.x + 1] = 0.0f;
    }
    return;
  }
  const float m = rowmax[blockIdx.x];
  float sum = 0.0f;
  if (m != -INFINITY) {
    for (int64_t j = threadIdx.x; j < real; j += blockDim.x) sum += expf(to_f32(row[j]) - m);
  }
  const float total = block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    const int64_t local = static_cast<int64_t>(target) - col0;
    sums[2 * blockIdx.x] = total;
    sums[2 * blockIdx.x + 1] = local >= 0 && local < real ? to_f32(row[local]) : 0.0f;
  }
}

template <typename T>
__global__ void ce_parallel_finish_kernel(float* losses, T* logits, const int32_t* targets,
                                          const float* rowmax, const float* sums, int64_t vl,
                                          int64_t real, int64_t col0, float dloss, int grad) {
  T* row = logits + blockIdx.x * vl;
  const int32_t target = targets[blockIdx.x];
  const bool counted = target >= 0;
  const float m = rowmax[blockIdx.x], sum = sums[2 * blockIdx.x];
  if (threadIdx.x == 0) {
    losses[blockIdx.x] = counted ? m + logf(sum) - sums[2 * blockIdx.x + 1] : 0.0f;
  }
  if (!grad) return;
  const float inv = counted ? 1.0f / sum : 0.0f;
  for (int64_t j = threadIdx.x; j < vl; j += blockDim.x) {
    float g = 0.0f;
    if (counted && j < real) {
      const float p = expf(to_f32(row[j]) - m) * inv;
      g = dloss * (p - (col0 + j == target ? 1.0f : 0.0f));
    }
    row[j] = from_f32<T>(g);
  }
}

struct ParallelShape {
  int64_t rows, vl, real;
};

ParallelShape parallel_shape(const Tensor& logits, int64_t col0, int64_t vocab, const char* op) {
  check_cuda(logits, op, "logits");
  ZT_ASSERT(logits.ndim() >= 1 && logits.size(-1) >= 1, "{}: logits must be (N, Vl)", op);
  const int64_t vl = logits.size(-1);
  const int64_t rows = logits.numel() / vl;
  ZT_ASSERT(rows < (int64_t{1} << 31), "{}: {} rows exceed one grid", op, rows);
  ZT_ASSERT(col0 >= 0 && vocab >= 1, "{}: col0 {} / vocab {}", op, col0, vocab);
  return {rows, vl, std::max<int64_t>(0, std::min(vl, vocab - col0))};
}

}  // namespace

void crossentropy_parallel_max(Tensor& rowmax, const Tensor& logits, int64_t col0, int64_t vocab,
                               const Stream& s) {
  const char* op = "crossentropy_parallel_max";
  const ParallelShape sh = parallel_shape(logits, col0, vocab, op);
  check_dtype(rowmax, DType::f32, op, "rowmax");
  check_numel(rowmax, sh.rows, op, "rowmax");
  check_same_device(logits, rowmax, op);
  if (sh.rows == 0) return;
  DeviceGuard guard(logits.device());
  dispatch_compute(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_parallel_max_kernel<T><<<static_cast<unsigned>(sh.rows), kThreads, 0, stream_of(s)>>>(
        ptr<float>(rowmax), ptr<const T>(logits), sh.vl, sh.real);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void crossentropy_parallel_sums(Tensor& sums, const Tensor& logits, const Tensor& targets,
                                const Tensor& rowmax, int64_t col0, int64_t vocab,
                                const Stream& s) {
  const char* op = "crossentropy_parallel_sums";
  const ParallelShape sh = parallel_shape(logits, col0, vocab, op);
  check_dtype(sums, DType::f32, op, "sums");
  check_numel(sums, 2 * sh.rows, op, "sums");
  check_dtype(targets, DType::i32, op, "targets");
  check_numel(targets, sh.rows, op, "targets");
  check_numel(rowmax, sh.rows, op, "rowmax");
  check_same_device(logits, sums, op);
  if (sh.rows == 0) return;
  DeviceGuard guard(logits.device());
  dispatch_compute(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_parallel_sums_kernel<T><<<static_cast<unsigned>(sh.rows), kThreads, 0, stream_of(s)>>>(
        ptr<float>(sums), ptr<const T>(logits), ptr<const int32_t>(targets),
        ptr<const float>(rowmax), sh.vl, sh.real, col0, vocab);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void crossentropy_parallel_finish(Tensor& losses, Tensor& logits, const Tensor& targets,
                                  const Tensor& rowmax, const Tensor& sums, int64_t col0,
                                  int64_t vocab, float dloss, bool grad, const Stream& s) {
  const char* op = "crossentropy_parallel_finish";
  const ParallelShape sh = parallel_shape(logits, col0, vocab, op);
  check_dtype(losses, DType::f32, op, "losses");
  check_numel(losses, sh.rows, op, "losses");
  check_numel(sums, 2 * sh.rows, op, "sums");
  check_numel(rowmax, sh.rows, op, "rowmax");
  check_numel(targets, sh.rows, op, "targets");
  check_same_device(logits, losses, op);
  if (sh.rows == 0) return;
  DeviceGuard guard(logits.device());
  dispatch_compute(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_parallel_finish_kernel<T><<<static_cast<unsigned>(sh.rows), kThreads, 0, stream_of(s)>>>(
        ptr<float>(losses), ptr<T>(logits), ptr<const int32_t>(targets), ptr<const float>(rowmax),
        ptr<const float>(sums), sh.vl, sh.real, col0, dloss, grad ? 1 : 0);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
