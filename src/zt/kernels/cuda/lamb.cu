// CUDA Lamb step (contract in kernels/ops.h; DeepSpeed FusedLamb), one trust ratio per chunk. Two
// multi-tensor passes, no host synchronisation: the first updates exp_avg/exp_avg_sq and adds each
// chunk's ||p||^2 and ||u||^2 (block sums, then atomics) into a small f32 scratch tensor; the
// second recomputes u from the stored moments, reads its chunk's norms and applies
// p -= lr trust u (writing the optional 16-bit copy). Both passes compute u with the same code, so
// the norm and the step see the same u.
#include "zt/kernels/cuda/multi_tensor.cuh"

#include <vector>

#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

struct LambCoeffs {
  float beta1, beta2, eps, weight_decay, grad_scale;
  float bc1, bc2;  // 1 - beta^step, or 1 without bias correction

  // u = m_hat / (sqrt(v_hat) + eps) + wd p
  __device__ float update(float m, float v, float p) const {
    return (m / bc1) / (sqrtf(v / bc2) + eps) + weight_decay * p;
  }
};

struct LambMomentsOp {
  static constexpr unsigned kLoads = kMtParam | kMtGrad | kMtState1 | kMtState2;
  static constexpr unsigned kStores = kMtState1 | kMtState2;
  struct Partial {
    float p_sq;
    float u_sq;
    float grad_scale;
  };

  LambCoeffs k;
  const float* grad_scale_at;  // when set, read instead of k.grad_scale
  float* norms;  // (2 * chunks): ||p||^2, ||u||^2 of chunk i at 2i, 2i+1

  __device__ void begin(const MtChunk&, Partial& part) const {
    part.grad_scale = grad_scale_at != nullptr ? *grad_scale_at : k.grad_scale;
  }
  __device__ void apply(MtPack& pk, int j, Partial& part) const {
    const float g = pk.g[j] * part.grad_scale;
    const float m = k.beta1 * pk.s1[j] + (1.0f - k.beta1) * g;
    const float v = k.beta2 * pk.s2[j] + (1.0f - k.beta2) * g * g;
    const float u = k.update(m, v, pk.p[j]);
    pk.s1[j] = m;
    pk.s2[j] = v;
    part.p_sq += pk.p[j] * pk.p[j];
    part.u_sq += u * u;
  }
  __device__ void finish(const MtChunk& c, Partial& part) const {
    __shared__ float scratch[kWarpSize];
    const float p_sq = block_sum(part.p_sq, scratch);
    const float u_sq = block_sum(part.u_sq, scratch);
    if (threadIdx.x == 0) {
      atomicAdd(norms + 2 * c.index, p_sq);
      atomicAdd(norms + 2 * c.index + 1, u_sq);
    }
  }
};

struct LambApplyOp {
  static constexpr unsigned kLoads = kMtParam | kMtState1 | kMtState2;
  static constexpr unsigned kStores = kMtParam;
  struct Partial {
    float step;  // lr * trust ratio of this block's chunk
  };

  LambCoeffs k;
  float lr, max_coeff, min_coeff;
  const float* norms;

  __device__ void begin(const MtChunk& c, Partial& part) const {
    const float w_norm = sqrtf(norms[2 * c.index]);
    const float u_norm = sqrtf(norms[2 * c.index + 1]);
    float trust = 1.0f;
    if (w_norm > 0.0f && u_norm > 0.0f) trust = fminf(fmaxf(w_norm / u_norm, min_coeff), max_coeff);
    part.step = lr * trust;
  }
  __device__ void apply(MtPack& pk, int j, Partial& part) const {
    pk.p[j] -= part.step * k.update(pk.s1[j], pk.s2[j], pk.p[j]);
  }
  __device__ void finish(const MtChunk&, Partial&) const {}
};

}  // namespace

void lamb_step(const LambArgs& args, std::span<const OptimChunk> chunks, Device /*device*/,
               const Stream& s) {
  ZT_ASSERT(args.step >= 1, "lamb_step: step {} must be >= 1", args.step);
  ZT_ASSERT(args.min_coeff <= args.max_coeff, "lamb_step: min_coeff {} exceeds max_coeff {}",
            args.min_coeff, args.max_coeff);
  std::vector<MtChunk> mt;
  mt.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    mt.push_back(mt_chunk(chunks[i], static_cast<int32_t>(i),
                          kMtParam | kMtGrad | kMtState1 | kMtState2, "lamb_step"));
  }
  if (mt.empty()) return;
  const Device dev = optim_device(chunks, s);
  DeviceGuard guard(dev);
  const cudaStream_t stream = stream_of(s);
  Tensor norms = Tensor::zeros({2 * static_cast<int64_t>(mt.size())}, DType::f32, dev, s);

  LambCoeffs k{};
  k.beta1 = args.beta1;
  k.beta2 = args.beta2;
  k.eps = args.eps;
  k.weight_decay = args.weight_decay;
  k.grad_scale = args.grad_scale;
  k.bc1 = bias_correction(args.beta1, args.step, args.bias_correction);
  k.bc2 = bias_correction(args.beta2, args.step, args.bias_correction);

  LambMomentsOp moments{};
  moments.k = k;
  moments.grad_scale_at = args.grad_scale_at;
  moments.norms = static_cast<float*>(norms.data());
  multi_tensor_apply<LambMomentsOp>(mt, moments, stream);

  LambApplyOp apply{};
  apply.k = k;
  apply.lr = args.lr;
  apply.max_coeff = args.max_coeff;
  apply.min_coeff = args.min_coeff;
  apply.norms = static_cast<const float*>(norms.data());
  multi_tensor_apply<LambApplyOp>(mt, apply, stream);
}

}  // namespace zt::kernels::cuda
