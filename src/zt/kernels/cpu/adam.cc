// CPU Adam / AdamW step over flat fp32 chunks (contract and formula in kernels/ops.h; DeepSpeed's
// csrc/adam, adam_w_mode selecting AdamW). One fused pass per chunk: scale the gradient, update
// both moments, update the parameter and, when asked, write its 16-bit compute copy. Assumes
// host pointers that stay valid for the call and chunks that do not overlap.
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

// Per-step constants, computed once in double and rounded to the fp32 the loop runs in.
struct AdamCoeffs {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, grad_scale;
  // The mode as two weight-decay factors, one of them 0, so the loop has no branch to stop it
  // vectorising: L2 adds wd p to the gradient, AdamW adds it to the update.
  float l2_decay, decoupled_decay;
  float bias_correction1;           // 1 - beta1^step (1 when bias correction is off)
  float inv_sqrt_bias_correction2;  // 1 / sqrt(1 - beta2^step)
};

AdamCoeffs adam_coeffs(const AdamArgs& a) {
  ZT_ASSERT(a.step >= 1, "adam_step: step {} must be >= 1 (1-based)", a.step);
  ZT_ASSERT(a.scalars_at == nullptr, "adam_step: scalars_at is for the CUDA kernel (CUDA graphs)");
  const bool correct = a.bias_correction == BiasCorrection::kOn;
  const double bc1 = correct ? 1.0 - std::pow(static_cast<double>(a.beta1), a.step) : 1.0;
  const double bc2 = correct ? 1.0 - std::pow(static_cast<double>(a.beta2), a.step) : 1.0;
  return {a.lr,
          a.beta1,
          a.beta2,
          1.0f - a.beta1,
          1.0f - a.beta2,
          a.eps,
          a.grad_scale_at != nullptr ? *a.grad_scale_at : a.grad_scale,
          a.mode == AdamMode::kL2 ? a.weight_decay : 0.0f,
          a.mode == AdamMode::kAdamW ? a.weight_decay : 0.0f,
          static_cast<float>(bc1),
          static_cast<float>(1.0 / std::sqrt(bc2))};
}

// Elements [begin, end) of one chunk. Lowp is the 16-bit host type of param_lowp, or void when
// there is none. Inlined into each ISA clone below, so each compiles it for its own vectors.
template <typename Lowp>
[[gnu::always_inline]] inline void adam_range(const AdamCoeffs& k, const OptimChunk& c,
                                              int64_t begin, int64_t end) {
  float* __restrict p = c.param;
  const float* __restrict g = c.grad;
  float* __restrict m = c.state1;
  float* __restrict v = c.state2;
  [[maybe_unused]] Lowp* __restrict lowp = static_cast<Lowp*>(c.param_lowp);
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float grad = g[i] * k.grad_scale + k.l2_decay * p[i];
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * grad;
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * grad * grad;
    const float denom = std::sqrt(vi) * k.inv_sqrt_bias_correction2 + k.eps;
    const float update = (mi / k.bias_correction1) / denom + k.decoupled_decay * p[i];
    const float pi = p[i] - k.lr * update;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    store_lowp(lowp, i, pi);
  }
}

// One clone per ISA, picked at load time by the CPU it runs on (GCC's target_clones): the library
// is built for x86-64-v2 (SSE4.2), and ZeRO-Offload's step is bound by this loop, which AVX2 and
// AVX-512 run about twice as fast (DeepSpeed builds its CPU Adam for them too). The library
// compiles with -ffp-contract=off, so every clone rounds exactly as the baseline does.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define ZT_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ZT_CPU_CLONES
#endif
ZT_CPU_CLONES void adam_range_f32(const AdamCoeffs& k, const OptimChunk& c, int64_t b, int64_t e) {
  adam_range<void>(k, c, b, e);
}
ZT_CPU_CLONES void adam_range_bf16(const AdamCoeffs& k, const OptimChunk& c, int64_t b, int64_t e) {
  adam_range<bf16_t>(k, c, b, e);
}
ZT_CPU_CLONES void adam_range_f16(const AdamCoeffs& k, const OptimChunk& c, int64_t b, int64_t e) {
  adam_range<f16_t>(k, c, b, e);
}

// The chunk in blocks, split over the OpenMP threads; each block runs through the clone.
void adam_chunk(const AdamCoeffs& k, const OptimChunk& c,
                void (*range)(const AdamCoeffs&, const OptimChunk&, int64_t, int64_t)) {
  constexpr int64_t kBlock = int64_t{1} << 14;  // 64 KiB of each fp32 stream: L2-sized work
  const int64_t blocks = (c.n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (parallel : c.n >= kParallelMinWork)
  for (int64_t b = 0; b < blocks; ++b) range(k, c, b * kBlock, std::min(c.n, (b + 1) * kBlock));
}

}  // namespace

void adam_step(const AdamArgs& args, std::span<const OptimChunk> chunks, Device /*device*/,
               const Stream& s) {
  const AdamCoeffs k = adam_coeffs(args);
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const OptimChunk& c = chunks[ci];
    ZT_ASSERT(c.n >= 0, "adam_step: chunk {} has n = {}", ci, c.n);
    if (c.n == 0) continue;
    ZT_ASSERT(c.param && c.grad && c.state1 && c.state2,
              "adam_step: chunk {} (n = {}) needs param, grad, exp_avg (state1) and exp_avg_sq "
              "(state2)",
              ci, c.n);
    if (!c.param_lowp) {
      adam_chunk(k, c, adam_range_f32);
    } else if (c.lowp_dtype == DType::bf16) {
      adam_chunk(k, c, adam_range_bf16);
    } else {
      ZT_ASSERT(c.lowp_dtype == DType::f16, "adam_step: chunk {} lowp_dtype {} must be bf16 or f16",
                ci, dtype_name(c.lowp_dtype));
      adam_chunk(k, c, adam_range_f16);
    }
  }
}

}  // namespace zt::kernels::cpu
