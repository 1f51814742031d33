// CPU LAMB step, one chunk per parameter tensor (contract and formula in kernels/ops.h; DeepSpeed
// FusedLamb): Adam moments, u = m_hat / (sqrt(v_hat) + eps) + wd p, a trust ratio
// clamp(||p|| / ||u||, min_coeff, max_coeff) per chunk, p -= lr trust u. Two passes per chunk:
// the first updates the moments and sums ||p||^2 and ||u||^2 (in f64), the second recomputes u
// from the stored moments (so no scratch buffer) and applies it. Assumes host pointers that stay
// valid for the call and chunks that do not overlap.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "zt/core/half.h"
#include "zt/kernels/cpu/cpu_ops.h"
#include "zt/kernels/cpu/optim_common.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

struct LambCoeffs {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, grad_scale;
  float inv_bias_correction1;  // 1 / (1 - beta1^step), 1 when bias correction is off
  float inv_bias_correction2;  // 1 / (1 - beta2^step)
};

LambCoeffs lamb_coeffs(const LambArgs& a) {
  ZT_ASSERT(a.step >= 1, "lamb_step: step {} must be >= 1 (1-based)", a.step);
  const bool correct = a.bias_correction == BiasCorrection::kOn;
  const double bc1 = correct ? 1.0 - std::pow(static_cast<double>(a.beta1), a.step) : 1.0;
  const double bc2 = correct ? 1.0 - std::pow(static_cast<double>(a.beta2), a.step) : 1.0;
  return {a.beta1,
          a.beta2,
          1.0f - a.beta1,
          1.0f - a.beta2,
          a.eps,
          a.weight_decay,
          a.grad_scale_at != nullptr ? *a.grad_scale_at : a.grad_scale,
          static_cast<float>(1.0 / bc1),
          static_cast<float>(1.0 / bc2)};
}

inline float lamb_update(const LambCoeffs& k, float m, float v, float p) {
  return (m * k.inv_bias_correction1) / (std::sqrt(v * k.inv_bias_correction2) + k.eps) +
         k.weight_decay * p;
}

// Pass 1: moments; returns the trust ratio of the chunk.
float lamb_moments_trust(const LambCoeffs& k, const LambArgs& a, const OptimChunk& c) {
  float* __restrict m = c.state1;
  float* __restrict v = c.state2;
  const float* __restrict g = c.grad;
  const float* __restrict p = c.param;
  double p_sq = 0;
  double u_sq = 0;
#pragma omp parallel for simd reduction(+ : p_sq, u_sq) if (parallel : c.n >= kParallelMinWork)
  for (int64_t i = 0; i < c.n; ++i) {
    const float grad = g[i] * k.grad_scale;
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * grad;
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    const double u = lamb_update(k, mi, vi, p[i]);
    p_sq += static_cast<double>(p[i]) * p[i];
    u_sq += u * u;
  }
  const double p_norm = std::sqrt(p_sq);
  const double u_norm = std::sqrt(u_sq);
  if (p_norm == 0.0 || u_norm == 0.0) return 1.0f;
  return static_cast<float>(std::clamp(p_norm / u_norm, static_cast<double>(a.min_coeff),
                                       static_cast<double>(a.max_coeff)));
}

// Pass 2. Lowp is the 16-bit host type of param_lowp, or void when there is none.
template <typename Lowp>
void lamb_apply(const LambCoeffs& k, float step_size, const OptimChunk& c) {
  const float* __restrict m = c.state1;
  const float* __restrict v = c.state2;
  float* __restrict p = c.param;
  [[maybe_unused]] Lowp* __restrict lowp = static_cast<Lowp*>(c.param_lowp);
#pragma omp parallel for simd if (parallel : c.n >= kParallelMinWork)
  for (int64_t i = 0; i < c.n; ++i) {
    const float pi = p[i] - step_size * lamb_update(k, m[i], v[i], p[i]);
    p[i] = pi;
    store_lowp(lowp, i, pi);
  }
}

}  // namespace

void lamb_step(const LambArgs& args, std::span<const OptimChunk> chunks, Device /*device*/,
               const Stream& s) {
  ZT_ASSERT(args.min_coeff <= args.max_coeff, "lamb_step: min_coeff {} exceeds max_coeff {}",
            args.min_coeff, args.max_coeff);
  const LambCoeffs k = lamb_coeffs(args);
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const OptimChunk& c = chunks[ci];
    ZT_ASSERT(c.n >= 0, "lamb_step: chunk {} has n = {}", ci, c.n);
    if (c.n == 0) continue;
    ZT_ASSERT(c.param && c.grad && c.state1 && c.state2,
              "lamb_step: chunk {} (n = {}) needs param, grad, exp_avg (state1) and exp_avg_sq "
              "(state2)",
              ci, c.n);
    const float trust = lamb_moments_trust(k, args, c);
    const float step_size = args.lr * trust;
    if (!c.param_lowp) {
      lamb_apply<void>(k, step_size, c);
    } else if (c.lowp_dtype == DType::bf16) {
      lamb_apply<bf16_t>(k, step_size, c);
    } else {
      ZT_ASSERT(c.lowp_dtype == DType::f16, "lamb_step: chunk {} lowp_dtype {} must be bf16 or f16",
                ci, dtype_name(c.lowp_dtype));
      lamb_apply<f16_t>(k, step_size, c);
    }
  }
}

}  // namespace zt::kernels::cpu
