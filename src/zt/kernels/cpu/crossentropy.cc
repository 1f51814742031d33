// CPU reference of softmax cross-entropy over the vocabulary (contract in kernels/ops.h), and its
// fused form that overwrites the logits with their gradient. Numerically stable: every row is
// shifted by its maximum before exp. Only the first `vocab` columns of a (N, Vp) row are real;
// padding columns are never read, and the fused form writes 0 there. Assumes contiguous CPU
// tensors; compute dtype f32 or f64 (losses are the accum dtype, equal to it on the CPU).
#include <cmath>
#include <cstdint>

#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

struct CrossEntropyDims {
  int64_t N, Vp, V;
};

// Max and sum of exp(x - max) over row[0, V).
template <typename T>
void crossentropy_row_stats(const T* row, int64_t V, T& maxv, T& sum) {
  maxv = row[0];
  for (int64_t j = 1; j < V; ++j) maxv = row[j] > maxv ? row[j] : maxv;
  sum = 0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - maxv);
}

template <typename T>
void crossentropy_forward_impl(T* losses, const T* logits, const int32_t* targets,
                               const CrossEntropyDims& d) {
#pragma omp parallel for if (parallel : d.N * d.V >= kParallelMinWork)
  for (int64_t i = 0; i < d.N; ++i) {
    const T* row = logits + i * d.Vp;
    if (targets[i] < 0) {  // not counted (transformers' ignore index)
      losses[i] = 0;
      continue;
    }
    T maxv, sum;
    crossentropy_row_stats(row, d.V, maxv, sum);
    losses[i] = maxv + std::log(sum) - row[targets[i]];
  }
}

template <typename T>
void crossentropy_fused_impl(T* losses, T* logits, const int32_t* targets, T dloss,
                             const CrossEntropyDims& d) {
#pragma omp parallel for if (parallel : d.N * d.Vp >= kParallelMinWork)
  for (int64_t i = 0; i < d.N; ++i) {
    T* row = logits + i * d.Vp;
    const int64_t target = targets[i];
    if (target < 0) {  // not counted: no loss, no gradient
      losses[i] = 0;
      for (int64_t j = 0; j < d.Vp; ++j) row[j] = 0;
      continue;
    }
    T maxv, sum;
    crossentropy_row_stats(row, d.V, maxv, sum);
    losses[i] = maxv + std::log(sum) - row[target];
    const T inv = T{1} / sum;
    for (int64_t j = 0; j < d.V; ++j) {
      const T prob = std::exp(row[j] - maxv) * inv;
      row[j] = dloss * (prob - (j == target ? T{1} : T{0}));
    }
    for (int64_t j = d.V; j < d.Vp; ++j) row[j] = 0;
  }
}

CrossEntropyDims crossentropy_check(const Tensor& losses, const Tensor& logits,
                                    const Tensor& targets, int64_t vocab, const char* op) {
  ZT_ASSERT(losses.device().is_cpu() && logits.device().is_cpu() && targets.device().is_cpu(),
            "{} (cpu): all tensors must be on the CPU", op);
  ZT_ASSERT(logits.ndim() >= 1 && logits.size(-1) >= 1, "{}: logits {} has no vocabulary", op,
            logits.shape().str());
  const int64_t Vp = logits.size(-1);
  const CrossEntropyDims d{logits.numel() / Vp, Vp, vocab};
  ZT_ASSERT(vocab >= 1 && vocab <= Vp, "{}: vocab {} must be in [1, {}] (logits {})", op, vocab, Vp,
            logits.shape().str());
  ZT_ASSERT(targets.dtype() == DType::i32 && targets.numel() == d.N,
            "{}: targets {} {} must be {} i32 values (logits {})", op, targets.shape().str(),
            dtype_name(targets.dtype()), d.N, logits.shape().str());
  ZT_ASSERT(losses.numel() == d.N && losses.dtype() == accum_dtype(logits.dtype()),
            "{}: losses {} {} must be {} values of the accum dtype of logits ({})", op,
            losses.shape().str(), dtype_name(losses.dtype()), d.N, dtype_name(logits.dtype()));
  const int32_t* t = targets.data<int32_t>();
  for (int64_t i = 0; i < d.N; ++i) {
    ZT_ASSERT(t[i] < vocab, "{}: target {} at row {} is outside [0, {})", op, t[i], i, vocab);
  }
  return d;
}

}  // namespace

void crossentropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets,
                          int64_t vocab, const Stream& s) {
  const CrossEntropyDims d =
      crossentropy_check(losses, logits, targets, vocab, "crossentropy_forward");
  if (logits.dtype() == DType::f32) {
    crossentropy_forward_impl(losses.data<float>(), logits.data<float>(), targets.data<int32_t>(),
                              d);
  } else {
    ZT_ASSERT(logits.dtype() == DType::f64,
              "crossentropy_forward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(logits.dtype()));
    crossentropy_forward_impl(losses.data<double>(), logits.data<double>(), targets.data<int32_t>(),
                              d);
  }
}

void crossentropy_fused(Tensor& losses, Tensor& logits, const Tensor& targets, int64_t vocab,
                        float dloss, const Stream& s) {
  const CrossEntropyDims d =
      crossentropy_check(losses, logits, targets, vocab, "crossentropy_fused");
  if (logits.dtype() == DType::f32) {
    crossentropy_fused_impl(losses.data<float>(), logits.data<float>(), targets.data<int32_t>(),
                            dloss, d);
  } else {
    ZT_ASSERT(logits.dtype() == DType::f64,
              "crossentropy_fused: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(logits.dtype()));
    crossentropy_fused_impl(losses.data<double>(), logits.data<double>(), targets.data<int32_t>(),
                            static_cast<double>(dloss), d);
  }
}

}  // namespace zt::kernels::cpu
