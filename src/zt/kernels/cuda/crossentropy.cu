// CUDA softmax cross-entropy (contract in kernels/ops.h): one block per row. A first pass keeps a
// running (max, sum of exp) per thread (online softmax) and combines them across the block; the
// fused version then overwrites the row with dlogits = dloss (softmax - onehot) in the logits
// dtype, and zeroes the padding columns [vocab, Vp). No probability tensor is materialised.
// A target outside [0, vocab) traps the kernel (the next CUDA call fails).
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 512;

enum class CeMode : unsigned char { kLossOnly, kFused };

template <typename T, CeMode kMode>
__global__ void crossentropy_kernel(float* losses, T* logits, const int32_t* targets, int64_t vocab,
                                    int64_t vp, float dloss) {
  __shared__ float scratch[kWarpSize];
  __shared__ float target_logit;
  T* row = logits + blockIdx.x * vp;
  const int32_t target = targets[blockIdx.x];
  if (target >= vocab) __trap();
  if (target < 0) {  // not counted (transformers' ignore index): no loss, no gradient
    if (threadIdx.x == 0) losses[blockIdx.x] = 0.0f;
    if constexpr (kMode == CeMode::kFused) {
      for (int64_t j = threadIdx.x; j < vp; j += blockDim.x) row[j] = from_f32<T>(0.0f);
    }
    return;
  }
  // Read before any thread of the block can overwrite the row (the reductions below are barriers).
  if (threadIdx.x == 0) target_logit = to_f32(row[target]);

  float m = -INFINITY;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float x = to_f32(row[j]);
    if (x > m) {
      sum = sum * expf(m - x) + 1.0f;  // rescale what was summed against the old max
      m = x;
    } else if (x != -INFINITY) {
      sum += expf(x - m);
    }
  }
  const float row_max = block_max(m, scratch);
  const float scaled = m == -INFINITY ? 0.0f : sum * expf(m - row_max);
  const float row_sum = block_sum(scaled, scratch);
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(row_sum) + row_max - target_logit;

  if constexpr (kMode == CeMode::kFused) {
    const float inv_sum = 1.0f / row_sum;
    for (int64_t j = threadIdx.x; j < vp; j += blockDim.x) {
      float d = 0.0f;
      if (j < vocab) {
        const float p = expf(to_f32(row[j]) - row_max) * inv_sum;
        d = dloss * (p - (j == target ? 1.0f : 0.0f));
      }
      row[j] = from_f32<T>(d);
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
    crossentropy_kernel<T, kMode><<<static_cast<unsigned>(sh.rows), kThreads, 0, stream_of(s)>>>(
        ptr<float>(losses), ptr<T>(logits), ptr<const int32_t>(targets), vocab, sh.vp, dloss);
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

}  // namespace zt::kernels::cuda
