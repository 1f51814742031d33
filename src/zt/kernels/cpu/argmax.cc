// CPU reference of argmax_rows (contract in kernels/op_table.inc): a plain scan per row, the
// first maximum wins, NaN is skipped.
#include <cstdint>

#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels::cpu {
namespace {

template <typename T>
void argmax_rows_impl(int32_t* out, const T* logits, int64_t rows, int64_t vp, int64_t vocab) {
#pragma omp parallel for if (parallel : rows * vocab >= (int64_t{1} << 16))
  for (int64_t i = 0; i < rows; ++i) {
    const T* row = logits + i * vp;
    int64_t best = 0;
    bool found = false;
    for (int64_t j = 0; j < vocab; ++j) {
      if (row[j] != row[j]) continue;  // NaN
      if (!found || row[j] > row[best]) {
        best = j;
        found = true;
      }
    }
    out[i] = static_cast<int32_t>(best);
  }
}

}  // namespace

void argmax_rows(Tensor& out, const Tensor& logits, int64_t vocab, const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && logits.device().is_cpu(),
            "argmax_rows (cpu): all tensors must be on the CPU");
  ZT_ASSERT(logits.ndim() >= 1 && vocab >= 1 && vocab <= logits.size(-1),
            "argmax_rows: vocab {} must be in [1, {}] (logits {})", vocab,
            logits.ndim() >= 1 ? logits.size(-1) : 0, logits.shape().str());
  const int64_t vp = logits.size(-1), rows = logits.numel() / vp;
  ZT_ASSERT(out.dtype() == DType::i32 && out.numel() == rows,
            "argmax_rows: out {} {} must be {} i32 values", out.shape().str(),
            dtype_name(out.dtype()), rows);
  if (logits.dtype() == DType::f32) {
    argmax_rows_impl(out.data<int32_t>(), logits.data<float>(), rows, vp, vocab);
  } else {
    ZT_ASSERT(logits.dtype() == DType::f64, "argmax_rows: CPU dtype must be f32 or f64, got {}",
              dtype_name(logits.dtype()));
    argmax_rows_impl(out.data<int32_t>(), logits.data<double>(), rows, vp, vocab);
  }
}

}  // namespace zt::kernels::cpu
