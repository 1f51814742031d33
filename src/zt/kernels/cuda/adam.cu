// CUDA Adam/AdamW step (contract and formula in kernels/ops.h; DeepSpeed csrc/adam): one
// multi-tensor pass over the flat f32 chunks updates exp_avg, exp_avg_sq and the parameters, and
// writes the optional 16-bit parameter copy.
#include "zt/kernels/cuda/multi_tensor.cuh"

#include <array>
#include <vector>

#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

struct AdamOp {
  static constexpr unsigned kLoads = kMtParam | kMtGrad | kMtState1 | kMtState2;
  static constexpr unsigned kStores = kMtParam | kMtState1 | kMtState2;
  struct Partial {
    float grad_scale;
    float lr, bc1, sqrt_bc2;
  };

  float beta1, beta2, eps, weight_decay, grad_scale;
  const float* grad_scale_at;  // when set, read instead of grad_scale
  float lr;
  float bc1;       // 1 - beta1^step
  float sqrt_bc2;  // sqrt(1 - beta2^step)
  const float* scalars_at;  // when set, {lr, bc1, sqrt_bc2} read from here instead
  AdamMode mode;

  __device__ void apply(MtPack& k, int j, Partial& part) const {
    const float p = k.p[j];
    float g = k.g[j] * part.grad_scale;
    if (mode == AdamMode::kL2) g += weight_decay * p;
    const float m = beta1 * k.s1[j] + (1.0f - beta1) * g;
    const float v = beta2 * k.s2[j] + (1.0f - beta2) * g * g;
    float u = (m / part.bc1) / (sqrtf(v) / part.sqrt_bc2 + eps);
    if (mode == AdamMode::kAdamW) u += weight_decay * p;
    k.p[j] = p - part.lr * u;
    k.s1[j] = m;
    k.s2[j] = v;
  }
  __device__ void begin(const MtChunk&, Partial& part) const {
    part.grad_scale = grad_scale_at != nullptr ? *grad_scale_at : grad_scale;
    part.lr = scalars_at != nullptr ? scalars_at[0] : lr;
    part.bc1 = scalars_at != nullptr ? scalars_at[1] : bc1;
    part.sqrt_bc2 = scalars_at != nullptr ? scalars_at[2] : sqrt_bc2;
  }
  __device__ void finish(const MtChunk&, Partial&) const {}
};

}  // namespace

void adam_step(const AdamArgs& args, std::span<const OptimChunk> chunks, Device /*device*/,
               const Stream& s) {
  ZT_ASSERT(args.step >= 1, "adam_step: step {} must be >= 1", args.step);
  std::vector<MtChunk> mt;
  mt.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    mt.push_back(mt_chunk(chunks[i], static_cast<int32_t>(i),
                          kMtParam | kMtGrad | kMtState1 | kMtState2, "adam_step"));
  }
  if (mt.empty()) return;
  DeviceGuard guard(optim_device(chunks, s));
  AdamOp op{};
  op.beta1 = args.beta1;
  op.beta2 = args.beta2;
  op.eps = args.eps;
  op.weight_decay = args.weight_decay;
  op.grad_scale = args.grad_scale;
  op.grad_scale_at = args.grad_scale_at;
  const std::array<float, 3> k = adam_step_scalars(args);
  op.lr = k[0];
  op.bc1 = k[1];
  op.sqrt_bc2 = k[2];
  op.scalars_at = args.scalars_at;
  op.mode = args.mode;
  multi_tensor_apply<AdamOp>(mt, op, stream_of(s));
}

}  // namespace zt::kernels::cuda
