// The gradient factor of an optimizer step (grad_clip_scale in kernels/op_table.inc; the engine's
// host step): one function compiled into the CPU and CUDA bodies and the engine, so the factor
// computed on the GPU has the host's bits.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define ZT_CLIP_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ZT_CLIP_HOST_DEVICE inline
#endif

namespace zt::kernels {

// 1 / c with c = loss_scale * clip when max_norm > 0 and the unscaled norm n = sqrt(sumsq) /
// loss_scale is finite with clip = (n + 1e-6) / max_norm > 1 (DeepSpeed's clip_grad_norm_), else
// c = loss_scale. sumsq: the sum of squares of the loss-scaled gradients.
ZT_CLIP_HOST_DEVICE float grad_clip_factor(double sumsq, double loss_scale, double max_norm) {
  const double total = std::sqrt(sumsq);
  double combined = loss_scale;
  if (max_norm > 0 && std::isfinite(total)) {
    const double clip = (total / loss_scale + 1e-6) / max_norm;
    if (clip > 1) combined = clip * loss_scale;
  }
  return static_cast<float>(1.0 / combined);
}

}  // namespace zt::kernels

#undef ZT_CLIP_HOST_DEVICE
