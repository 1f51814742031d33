// CPU reference of dropout_apply (contract in kernels/op_table.inc): the mask comes from
// kernels/dropout_hash.h, as on the GPU, so both backends drop the same elements. Assumes
// contiguous CPU tensors of one float dtype; element access and arithmetic as cpu/float_elem.h.
// out may be in: each element is read before it is written.
#include <cstdint>

#include "zt/kernels/cpu/cpu_ops.h"
#include "zt/kernels/cpu/float_elem.h"
#include "zt/kernels/dropout_hash.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

template <typename T>
void dropout_impl(T* out, const T* in, float p, MathType<T> scale, uint64_t seed, int64_t n) {
#pragma omp parallel for if (parallel : n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = dropout_uniform(seed, static_cast<uint64_t>(i)) >= p;
    out[i] = keep ? elem_store<T>(elem_load(in[i]) * scale) : elem_store<T>(MathType<T>{0});
  }
}

}  // namespace

void dropout_apply(Tensor& out, const Tensor& in, float p, uint64_t seed, const Stream& s) {
  const double scale = dropout_scale(p);
  ZT_ASSERT(out.device().is_cpu() && in.device().is_cpu(),
            "dropout_apply (cpu): both tensors must be on the CPU");
  ZT_ASSERT(out.numel() == in.numel() && out.dtype() == in.dtype(),
            "dropout_apply: out {} {} and in {} {} must have the same numel and dtype",
            out.shape().str(), dtype_name(out.dtype()), in.shape().str(), dtype_name(in.dtype()));
  float_dtype_visit(in.dtype(), "dropout_apply", [&](auto tag) {
    using T = decltype(tag);
    dropout_impl(static_cast<T*>(out.data()), static_cast<const T*>(in.data()), p,
                 static_cast<MathType<T>>(scale), seed, in.numel());
  });
}

}  // namespace zt::kernels::cpu
