// CPU reference of softmax cross-entropy over the vocabulary (contract in kernels/ops.h), and its
// fused form that overwrites the logits with their gradient. Numerically stable: every row is
// shifted by its maximum before exp. Only the first `vocab` columns of a (N, Vp) row are real;
// padding columns are never read, and the fused form writes 0 there. Assumes contiguous CPU
// tensors; compute dtype f32 or f64 (losses are the accum dtype, equal to it on the CPU).
#include <algorithm>
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

// ---- vocabulary-parallel (contract in kernels/ops.h): this rank's columns [col0, col0 + Vl), of
// which those below `vocab` are real; the statistics are f32 whatever the compute dtype.
namespace {

struct ParallelCeDims {
  int64_t N, Vl, real;  // rows, this rank's columns, and how many of them are real
};

ParallelCeDims parallel_dims(const Tensor& logits, int64_t col0, int64_t vocab, const char* op) {
  ZT_ASSERT(logits.device().is_cpu() && logits.ndim() >= 1 && logits.size(-1) >= 1,
            "{} (cpu): logits {} must be (N, Vl) on the CPU", op, logits.shape().str());
  ZT_ASSERT(logits.dtype() == DType::f32 || logits.dtype() == DType::f64,
            "{}: CPU compute dtype must be f32 or f64, got {}", op, dtype_name(logits.dtype()));
  const int64_t Vl = logits.size(-1);
  ZT_ASSERT(col0 >= 0 && vocab >= 1, "{}: col0 {} / vocab {}", op, col0, vocab);
  return {logits.numel() / Vl, Vl, std::max<int64_t>(0, std::min(Vl, vocab - col0))};
}

template <typename T>
double at(const Tensor& t, int64_t i) {
  return static_cast<double>(t.data<T>()[i]);
}

}  // namespace

void crossentropy_parallel_max(Tensor& rowmax, const Tensor& logits, int64_t col0, int64_t vocab,
                               const Stream& s) {
  const ParallelCeDims d = parallel_dims(logits, col0, vocab, "crossentropy_parallel_max");
  ZT_ASSERT(rowmax.dtype() == DType::f32 && rowmax.numel() == d.N,
            "crossentropy_parallel_max: rowmax must be {} f32", d.N);
  float* m = rowmax.data<float>();
  const bool f64 = logits.dtype() == DType::f64;
  for (int64_t i = 0; i < d.N; ++i) {
    double v = -INFINITY;
    for (int64_t j = 0; j < d.real; ++j) {
      v = std::max(v, f64 ? at<double>(logits, i * d.Vl + j) : at<float>(logits, i * d.Vl + j));
    }
    m[i] = static_cast<float>(v);
  }
}

void crossentropy_parallel_sums(Tensor& sums, const Tensor& logits, const Tensor& targets,
                                const Tensor& rowmax, int64_t col0, int64_t vocab,
                                const Stream& s) {
  const ParallelCeDims d = parallel_dims(logits, col0, vocab, "crossentropy_parallel_sums");
  ZT_ASSERT(sums.dtype() == DType::f32 && sums.numel() == 2 * d.N && targets.numel() == d.N &&
                targets.dtype() == DType::i32 && rowmax.numel() == d.N,
            "crossentropy_parallel_sums: sums (N,2) f32, targets (N) i32, rowmax (N) for N = {}",
            d.N);
  float* out = sums.data<float>();
  const int32_t* t = targets.data<int32_t>();
  const float* m = rowmax.data<float>();
  const bool f64 = logits.dtype() == DType::f64;
  for (int64_t i = 0; i < d.N; ++i) {
    ZT_ASSERT(t[i] < vocab, "crossentropy_parallel_sums: target {} at row {} is outside [0, {})",
              t[i], i, vocab);
    double sum = 0, target = 0;
    if (t[i] >= 0) {
      for (int64_t j = 0; j < d.real; ++j) {
        const double x = f64 ? at<double>(logits, i * d.Vl + j) : at<float>(logits, i * d.Vl + j);
        sum += std::exp(x - static_cast<double>(m[i]));
      }
      const int64_t local = t[i] - col0;
      if (local >= 0 && local < d.real) {
        target = f64 ? at<double>(logits, i * d.Vl + local) : at<float>(logits, i * d.Vl + local);
      }
    }
    out[2 * i] = static_cast<float>(sum);
    out[2 * i + 1] = static_cast<float>(target);
  }
}

void crossentropy_parallel_finish(Tensor& losses, Tensor& logits, const Tensor& targets,
                                  const Tensor& rowmax, const Tensor& sums, int64_t col0,
                                  int64_t vocab, float dloss, bool grad, const Stream& s) {
  const ParallelCeDims d = parallel_dims(logits, col0, vocab, "crossentropy_parallel_finish");
  ZT_ASSERT(losses.numel() == d.N && losses.dtype() == accum_dtype(logits.dtype()) &&
                sums.numel() == 2 * d.N && rowmax.numel() == d.N && targets.numel() == d.N,
            "crossentropy_parallel_finish: losses (N) accum dtype, sums (N,2), rowmax and "
            "targets (N) for N = {}",
            d.N);
  const int32_t* t = targets.data<int32_t>();
  const float* m = rowmax.data<float>();
  const float* sm = sums.data<float>();
  const bool f64 = logits.dtype() == DType::f64;
  for (int64_t i = 0; i < d.N; ++i) {
    const bool counted = t[i] >= 0;
    const double mx = m[i], sum = sm[2 * i], z = sm[2 * i + 1];
    const double loss = counted ? mx + std::log(sum) - z : 0.0;
    if (f64) {
      losses.data<double>()[i] = loss;
    } else {
      losses.data<float>()[i] = static_cast<float>(loss);
    }
    if (!grad) continue;
    for (int64_t j = 0; j < d.Vl; ++j) {
      double g = 0;
      if (counted && j < d.real) {
        const double x = f64 ? at<double>(logits, i * d.Vl + j) : at<float>(logits, i * d.Vl + j);
        g = dloss * (std::exp(x - mx) / sum - (col0 + j == t[i] ? 1.0 : 0.0));
      }
      if (f64) {
        logits.data<double>()[i * d.Vl + j] = g;
      } else {
        logits.data<float>()[i * d.Vl + j] = static_cast<float>(g);
      }
    }
  }
}

}  // namespace zt::kernels::cpu
