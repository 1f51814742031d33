// CPU reference of the elementwise helpers (contract in kernels/ops.h): dtype casts among the
// float types, scaling, the inf/nan check of a scaled gradient, and the sum of squares for the
// global gradient norm. Assumes contiguous CPU tensors. Element access is cpu/float_elem.h's;
// f64 -> bf16/f16 rounds through f32, as PyTorch does.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "zt/kernels/cpu/cpu_ops.h"
#include "zt/kernels/cpu/float_elem.h"
#include "zt/kernels/grad_clip.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

template <typename D, typename S>
void cast_impl(D* dst, const S* src, int64_t n) {
#pragma omp parallel for if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<D, S>) {
      dst[i] = src[i];
    } else if constexpr (std::is_same_v<S, double> || std::is_same_v<D, double>) {
      dst[i] = elem_store<D>(static_cast<double>(elem_load(src[i])));
    } else {
      dst[i] = elem_store<D>(static_cast<float>(elem_load(src[i])));
    }
  }
}

// x *= scale; returns whether any scaled element is inf or nan (as stored, after rounding).
template <typename T>
bool scale_impl(T* x, float scale, int64_t n) {
  const MathType<T> k = static_cast<MathType<T>>(scale);
  int nonfinite = 0;
#pragma omp parallel for reduction(| : nonfinite) if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    x[i] = elem_store<T>(elem_load(x[i]) * k);
    nonfinite |= std::isfinite(elem_load(x[i])) ? 0 : 1;
  }
  return nonfinite != 0;
}

// out = [out +] (T) in * scale, the product rounded to T before the add (no contraction: the
// build passes -ffp-contract=off).
template <typename T, typename S>
void add_scaled_impl(T* out, const S* in, float scale, bool add, int64_t n) {
  const T k = static_cast<T>(scale);
#pragma omp parallel for if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    T v;
    if constexpr (std::is_same_v<S, double> || std::is_same_v<T, double>) {
      v = static_cast<T>(static_cast<double>(elem_load(in[i])));
    } else {
      v = static_cast<T>(elem_load(in[i]));
    }
    const T p = v * k;
    out[i] = add ? out[i] + p : p;
  }
}

template <typename T>
double sum_squares_impl(const T* x, int64_t n) {
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(elem_load(x[i]));
    sum += v * v;
  }
  return sum;
}

}  // namespace

void cast(Tensor& dst, const Tensor& src, const Stream& s) {
  ZT_ASSERT(dst.device().is_cpu() && src.device().is_cpu(),
            "cast (cpu): both tensors must be on the CPU");
  ZT_ASSERT(dst.numel() == src.numel(), "cast: dst {} and src {} differ in numel",
            dst.shape().str(), src.shape().str());
  float_dtype_visit(dst.dtype(), "cast", [&](auto d_tag) {
    using D = decltype(d_tag);
    float_dtype_visit(src.dtype(), "cast", [&](auto s_tag) {
      using S = decltype(s_tag);
      cast_impl(static_cast<D*>(dst.data()), static_cast<const S*>(src.data()), src.numel());
    });
  });
}

void scale_inplace(Tensor& x, float scale, const Stream& s) {
  ZT_ASSERT(x.device().is_cpu(), "scale_inplace (cpu): x must be on the CPU");
  float_dtype_visit(x.dtype(), "scale_inplace", [&](auto tag) {
    using T = decltype(tag);
    scale_impl(static_cast<T*>(x.data()), scale, x.numel());
  });
}

void scale_rows(Tensor& x, const Tensor& scale, const Stream& s) {
  ZT_ASSERT(x.device().is_cpu() && scale.device().is_cpu(),
            "scale_rows (cpu): x and scale must be on the CPU");
  ZT_ASSERT(x.ndim() >= 1 && scale.dtype() == DType::f32 && scale.numel() == x.size(0),
            "scale_rows: scale {} {} must be ({}) f32, one per row of x {}", scale.shape().str(),
            dtype_name(scale.dtype()), x.ndim() >= 1 ? x.size(0) : 0, x.shape().str());
  const int64_t rows = x.ndim() >= 1 ? x.size(0) : 0;
  const int64_t cols = rows > 0 ? x.numel() / rows : 0;
  const float* w = scale.data<float>();
  float_dtype_visit(x.dtype(), "scale_rows", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(x.data());
    for (int64_t r = 0; r < rows; ++r) {
      const MathType<T> f = static_cast<MathType<T>>(w[r]);
      for (int64_t c = 0; c < cols; ++c) {
        p[r * cols + c] = elem_store<T>(elem_load(p[r * cols + c]) * f);
      }
    }
  });
}

void add_scaled(Tensor& out, const Tensor& in, float scale, Accumulate mode, const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && in.device().is_cpu(),
            "add_scaled (cpu): both tensors must be on the CPU");
  ZT_ASSERT(out.numel() == in.numel() && (out.dtype() == DType::f32 || out.dtype() == DType::f64),
            "add_scaled: out {} {} must be f32 or f64 with the numel of in {}", out.shape().str(),
            dtype_name(out.dtype()), in.shape().str());
  const bool add = mode == Accumulate::kAdd;
  float_dtype_visit(in.dtype(), "add_scaled", [&](auto s_tag) {
    using S = decltype(s_tag);
    const S* src = static_cast<const S*>(in.data());
    if (out.dtype() == DType::f32) {
      add_scaled_impl(out.data<float>(), src, scale, add, in.numel());
    } else {
      add_scaled_impl(out.data<double>(), src, scale, add, in.numel());
    }
  });
}

void scale_check_nonfinite(Tensor& x, float scale, Tensor& found_nonfinite, const Stream& s) {
  ZT_ASSERT(x.device().is_cpu() && found_nonfinite.device().is_cpu(),
            "scale_check_nonfinite (cpu): both tensors must be on the CPU");
  ZT_ASSERT(found_nonfinite.numel() == 1 && found_nonfinite.dtype() == DType::f32,
            "scale_check_nonfinite: found_nonfinite {} {} must be (1) f32",
            found_nonfinite.shape().str(), dtype_name(found_nonfinite.dtype()));
  bool nonfinite = false;
  float_dtype_visit(x.dtype(), "scale_check_nonfinite", [&](auto tag) {
    using T = decltype(tag);
    nonfinite = scale_impl(static_cast<T*>(x.data()), scale, x.numel());
  });
  // Set, never cleared: one flag collects the overflow of every gradient buffer of a step.
  if (nonfinite) found_nonfinite.data<float>()[0] = 1.0f;
}

void zero_tensors(std::span<const Tensor> tensors, Device /*device*/, const Stream& s) {
  for (const Tensor& t : tensors) {
    ZT_ASSERT(t.device().is_cpu(), "zero_tensors: a tensor on {} in a CPU call", t.device().str());
    Tensor(t).zero(s);
  }
}

void sum_squares_accumulate(Tensor& acc, const Tensor& x, const Stream& s) {
  ZT_ASSERT(acc.device().is_cpu() && x.device().is_cpu(),
            "sum_squares_accumulate (cpu): both tensors must be on the CPU");
  ZT_ASSERT(acc.numel() == 1 && acc.dtype() == DType::f64,
            "sum_squares_accumulate: acc {} {} must be (1) f64", acc.shape().str(),
            dtype_name(acc.dtype()));
  double sum = 0;
  float_dtype_visit(x.dtype(), "sum_squares_accumulate", [&](auto tag) {
    using T = decltype(tag);
    sum = sum_squares_impl(static_cast<const T*>(x.data()), x.numel());
  });
  acc.data<double>()[0] += sum;
}

void grad_clip_scale(Tensor& out, const Tensor& sumsq, double loss_scale, double max_norm,
                     const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && sumsq.device().is_cpu(),
            "grad_clip_scale (cpu): both tensors must be on the CPU");
  ZT_ASSERT(out.numel() == 1 && out.dtype() == DType::f32 && sumsq.numel() == 1 &&
                sumsq.dtype() == DType::f64,
            "grad_clip_scale: out {} {} must be (1) f32 and sumsq {} {} (1) f64", out.shape().str(),
            dtype_name(out.dtype()), sumsq.shape().str(), dtype_name(sumsq.dtype()));
  out.data<float>()[0] = grad_clip_factor(sumsq.data<double>()[0], loss_scale, max_norm);
}

}  // namespace zt::kernels::cpu
