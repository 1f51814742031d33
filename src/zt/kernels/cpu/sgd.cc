// CPU SGD step over flat fp32 chunks, torch.optim.SGD's math (contract in kernels/ops.h): weight
// decay added to the gradient, an optional momentum buffer (state1) with dampening and Nesterov,
// and on the first step the buffer is a copy of the gradient. Assumes host pointers that stay
// valid for the call and chunks that do not overlap.
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

enum class SgdMomentum : unsigned char { kNone, kFirst, kRunning };

// Lowp is the 16-bit host type of param_lowp, or void when there is none.
template <typename Lowp>
void sgd_chunk(const SgdArgs& a, SgdMomentum mom, const OptimChunk& c) {
  float* __restrict p = c.param;
  const float* __restrict g = c.grad;
  float* __restrict buf = c.state1;
  [[maybe_unused]] Lowp* __restrict lowp = static_cast<Lowp*>(c.param_lowp);
  const float one_minus_damp = 1.0f - a.dampening;
  const float grad_scale = a.grad_scale_at != nullptr ? *a.grad_scale_at : a.grad_scale;
#pragma omp parallel for simd if (parallel : c.n >= kParallelMinWork)
  for (int64_t i = 0; i < c.n; ++i) {
    float d = g[i] * grad_scale;
    if (a.weight_decay != 0.0f) d += a.weight_decay * p[i];
    if (mom != SgdMomentum::kNone) {
      const float b = mom == SgdMomentum::kFirst ? d : a.momentum * buf[i] + one_minus_damp * d;
      buf[i] = b;
      d = a.nesterov ? d + a.momentum * b : b;
    }
    const float pi = p[i] - a.lr * d;
    p[i] = pi;
    store_lowp(lowp, i, pi);
  }
}

}  // namespace

void sgd_step(const SgdArgs& args, std::span<const OptimChunk> chunks, Device /*device*/,
              const Stream& s) {
  // torch rejects Nesterov without momentum or with dampening; so does the contract here.
  ZT_ASSERT(!args.nesterov || (args.momentum > 0.0f && args.dampening == 0.0f),
            "sgd_step: nesterov needs momentum > 0 and dampening 0 (momentum {}, dampening {})",
            args.momentum, args.dampening);
  const SgdMomentum mom = args.momentum == 0.0f ? SgdMomentum::kNone
                          : args.first_step     ? SgdMomentum::kFirst
                                                : SgdMomentum::kRunning;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const OptimChunk& c = chunks[ci];
    ZT_ASSERT(c.n >= 0, "sgd_step: chunk {} has n = {}", ci, c.n);
    if (c.n == 0) continue;
    ZT_ASSERT(c.param && c.grad && (mom == SgdMomentum::kNone || c.state1),
              "sgd_step: chunk {} (n = {}) needs param, grad and, with momentum {}, the momentum "
              "buffer (state1)",
              ci, c.n, args.momentum);
    if (!c.param_lowp) {
      sgd_chunk<void>(args, mom, c);
    } else if (c.lowp_dtype == DType::bf16) {
      sgd_chunk<bf16_t>(args, mom, c);
    } else {
      ZT_ASSERT(c.lowp_dtype == DType::f16, "sgd_step: chunk {} lowp_dtype {} must be bf16 or f16",
                ci, dtype_name(c.lowp_dtype));
      sgd_chunk<f16_t>(args, mom, c);
    }
  }
}

}  // namespace zt::kernels::cpu
