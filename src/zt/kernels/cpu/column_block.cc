// CPU reference of the column-block ops (contracts in kernels/op_table.inc): cols_add adds a
// narrow matrix into a block of columns of a wide one (a LoRA delta into its part of a fused
// projection's output), cols_copy reads such a block out (that delta's gradient). Assumes
// contiguous CPU tensors of one float dtype; element access and arithmetic as cpu/float_elem.h.
#include <cstdint>

#include "zt/kernels/column_block.h"
#include "zt/kernels/cpu/cpu_ops.h"
#include "zt/kernels/cpu/float_elem.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

template <typename T>
void cols_add_impl(T* out, const T* in, float alpha, const ColumnBlock& b) {
  const MathType<T> a = static_cast<MathType<T>>(alpha);
#pragma omp parallel for if (parallel : b.rows * b.block_width >= kParallelMinWork)
  for (int64_t i = 0; i < b.rows; ++i) {
    T* o = out + i * b.width + b.col0;
    const T* x = in + i * b.block_width;
    for (int64_t j = 0; j < b.block_width; ++j) {
      o[j] = elem_store<T>(elem_load(o[j]) + a * elem_load(x[j]));
    }
  }
}

template <typename T>
void cols_copy_impl(T* out, const T* in, const ColumnBlock& b) {
#pragma omp parallel for if (parallel : b.rows * b.block_width >= kParallelMinWork)
  for (int64_t i = 0; i < b.rows; ++i) {
    const T* x = in + i * b.width + b.col0;
    T* o = out + i * b.block_width;
    for (int64_t j = 0; j < b.block_width; ++j) o[j] = x[j];
  }
}

void check_cpu_pair(const Tensor& out, const Tensor& in, const char* op) {
  ZT_ASSERT(out.device().is_cpu() && in.device().is_cpu(),
            "{} (cpu): both tensors must be on the CPU", op);
  ZT_ASSERT(out.dtype() == in.dtype(), "{}: out {} and in {} must share the dtype", op,
            dtype_name(out.dtype()), dtype_name(in.dtype()));
}

}  // namespace

void cols_add(Tensor& out, const Tensor& in, int64_t col0, float alpha, const Stream& s) {
  const ColumnBlock b = column_block(out, in, col0, "cols_add");
  check_cpu_pair(out, in, "cols_add");
  float_dtype_visit(out.dtype(), "cols_add", [&](auto tag) {
    using T = decltype(tag);
    cols_add_impl(static_cast<T*>(out.data()), static_cast<const T*>(in.data()), alpha, b);
  });
}

void cols_copy(Tensor& out, const Tensor& in, int64_t col0, const Stream& s) {
  const ColumnBlock b = column_block(in, out, col0, "cols_copy");
  check_cpu_pair(out, in, "cols_copy");
  float_dtype_visit(out.dtype(), "cols_copy", [&](auto tag) {
    using T = decltype(tag);
    cols_copy_impl(static_cast<T*>(out.data()), static_cast<const T*>(in.data()), b);
  });
}

}  // namespace zt::kernels::cpu
