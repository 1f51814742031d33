// CPU reference of the token + position embedding (contract in kernels/ops.h).
// Assumes contiguous CPU tensors; compute dtype f32 or f64, and on the CPU the accumulator dtype
// equals the compute dtype, so dwte/dwpe have the activations' element type.
#include <cstdint>

#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

struct EmbeddingDims {
  int64_t B, T, C, V, max_t;
};

void embedding_check_tokens(const int32_t* tokens, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i) {
    ZT_ASSERT(tokens[i] >= 0 && tokens[i] < V,
              "embedding: token id {} at position {} is outside the vocabulary [0, {})", tokens[i],
              i, V);
  }
}

template <typename T>
void embedding_forward_impl(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                            const EmbeddingDims& d) {
#pragma omp parallel for if (parallel : d.B * d.T * d.C >= kParallelMinWork)
  for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
    const int64_t t = bt % d.T;
    const T* tok_row = wte + static_cast<int64_t>(tokens[bt]) * d.C;
    const T* pos_row = wpe + t * d.C;
    T* o = out + bt * d.C;
    for (int64_t c = 0; c < d.C; ++c) o[c] = tok_row[c] + pos_row[c];
  }
}

template <typename T>
void embedding_backward_impl(T* dwte, T* dwpe, const T* dout, const int32_t* tokens,
                             const EmbeddingDims& d) {
  // dwpe: row t sums over the batch; rows are independent, so threads split them.
#pragma omp parallel for if (parallel : d.B * d.T * d.C >= kParallelMinWork)
  for (int64_t t = 0; t < d.T; ++t) {
    T* g = dwpe + t * d.C;
    for (int64_t b = 0; b < d.B; ++b) {
      const T* src = dout + (b * d.T + t) * d.C;
      for (int64_t c = 0; c < d.C; ++c) g[c] += src[c];
    }
  }
  // dwte: several positions may carry the same token, so threads split the channels instead of
  // the positions; each thread owns a block of columns of every dwte row (no write races).
  constexpr int64_t kBlock = 64;
  const int64_t num_blocks = (d.C + kBlock - 1) / kBlock;
#pragma omp parallel for if (parallel : d.B * d.T * d.C >= kParallelMinWork)
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t c1 = c0 + kBlock < d.C ? c0 + kBlock : d.C;
    for (int64_t bt = 0; bt < d.B * d.T; ++bt) {
      T* g = dwte + static_cast<int64_t>(tokens[bt]) * d.C;
      const T* src = dout + bt * d.C;
      for (int64_t c = c0; c < c1; ++c) g[c] += src[c];
    }
  }
}

}  // namespace

void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && tokens.device().is_cpu() && wte.device().is_cpu() &&
                wpe.device().is_cpu(),
            "embedding_forward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(tokens.dtype() == DType::i32 && tokens.ndim() == 2,
            "embedding_forward: tokens must be (B,T) i32, got {} {}", tokens.shape().str(),
            dtype_name(tokens.dtype()));
  ZT_ASSERT(wte.ndim() == 2 && wpe.ndim() == 2 && wte.size(1) == wpe.size(1),
            "embedding_forward: wte (V,C) and wpe (maxT,C) disagree: {} vs {}", wte.shape().str(),
            wpe.shape().str());
  const EmbeddingDims d{tokens.size(0), tokens.size(1), wte.size(1), wte.size(0), wpe.size(0)};
  ZT_ASSERT(d.max_t >= d.T, "embedding_forward: sequence length {} exceeds wpe rows {}", d.T,
            d.max_t);
  ZT_ASSERT(out.ndim() == 3 && out.size(0) == d.B && out.size(1) == d.T && out.size(2) == d.C,
            "embedding_forward: out {} is not (B,T,C) = ({},{},{})", out.shape().str(), d.B, d.T,
            d.C);
  ZT_ASSERT(out.dtype() == wte.dtype() && out.dtype() == wpe.dtype(),
            "embedding_forward: out {}, wte {}, wpe {} must share the compute dtype",
            dtype_name(out.dtype()), dtype_name(wte.dtype()), dtype_name(wpe.dtype()));
  embedding_check_tokens(tokens.data<int32_t>(), d.B * d.T, d.V);
  if (out.dtype() == DType::f32) {
    embedding_forward_impl(out.data<float>(), tokens.data<int32_t>(), wte.data<float>(),
                           wpe.data<float>(), d);
  } else {
    ZT_ASSERT(out.dtype() == DType::f64,
              "embedding_forward: CPU compute dtype must be f32 or f64, "
              "got {}",
              dtype_name(out.dtype()));
    embedding_forward_impl(out.data<double>(), tokens.data<int32_t>(), wte.data<double>(),
                           wpe.data<double>(), d);
  }
}

void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        const Stream& s) {
  ZT_ASSERT(dwte.device().is_cpu() && dwpe.device().is_cpu() && dout.device().is_cpu() &&
                tokens.device().is_cpu(),
            "embedding_backward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(tokens.dtype() == DType::i32 && tokens.ndim() == 2,
            "embedding_backward: tokens must be (B,T) i32, got {} {}", tokens.shape().str(),
            dtype_name(tokens.dtype()));
  ZT_ASSERT(dwte.ndim() == 2 && dwpe.ndim() == 2 && dwte.size(1) == dwpe.size(1),
            "embedding_backward: dwte (V,C) and dwpe (maxT,C) disagree: {} vs {}",
            dwte.shape().str(), dwpe.shape().str());
  const EmbeddingDims d{tokens.size(0), tokens.size(1), dwte.size(1), dwte.size(0), dwpe.size(0)};
  ZT_ASSERT(d.max_t >= d.T, "embedding_backward: sequence length {} exceeds dwpe rows {}", d.T,
            d.max_t);
  ZT_ASSERT(dout.ndim() == 3 && dout.size(0) == d.B && dout.size(1) == d.T && dout.size(2) == d.C,
            "embedding_backward: dout {} is not (B,T,C) = ({},{},{})", dout.shape().str(), d.B, d.T,
            d.C);
  ZT_ASSERT(dwte.dtype() == accum_dtype(dout.dtype()) && dwpe.dtype() == dwte.dtype(),
            "embedding_backward: dwte {} / dwpe {} must be the accum dtype of dout {}",
            dtype_name(dwte.dtype()), dtype_name(dwpe.dtype()), dtype_name(dout.dtype()));
  embedding_check_tokens(tokens.data<int32_t>(), d.B * d.T, d.V);
  if (dout.dtype() == DType::f32) {
    embedding_backward_impl(dwte.data<float>(), dwpe.data<float>(), dout.data<float>(),
                            tokens.data<int32_t>(), d);
  } else {
    ZT_ASSERT(dout.dtype() == DType::f64,
              "embedding_backward: CPU compute dtype must be f32 or "
              "f64, got {}",
              dtype_name(dout.dtype()));
    embedding_backward_impl(dwte.data<double>(), dwpe.data<double>(), dout.data<double>(),
                            tokens.data<int32_t>(), d);
  }
}

namespace {

template <typename T>
void lookup_forward_impl(T* out, const int32_t* ids, const T* table, int64_t n, int64_t C,
                         Accumulate mode) {
#pragma omp parallel for if (parallel : n * C >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    const T* row = table + static_cast<int64_t>(ids[i]) * C;
    T* o = out + i * C;
    if (mode == Accumulate::kAdd) {
      for (int64_t c = 0; c < C; ++c) o[c] += row[c];
    } else {
      for (int64_t c = 0; c < C; ++c) o[c] = row[c];
    }
  }
}

template <typename T>
void lookup_backward_impl(T* dtable, const T* dout, const int32_t* ids, int64_t n, int64_t C) {
  // Several positions may carry the same id: threads own blocks of columns (no write races).
  constexpr int64_t kBlock = 64;
  const int64_t num_blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for if (parallel : n * C >= kParallelMinWork)
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int64_t i = 0; i < n; ++i) {
      T* g = dtable + static_cast<int64_t>(ids[i]) * C;
      const T* src = dout + i * C;
      for (int64_t c = c0; c < c1; ++c) g[c] += src[c];
    }
  }
}

void lookup_check(const Tensor& ids, const Tensor& table, const Tensor& act, const char* op) {
  ZT_ASSERT(ids.device().is_cpu() && table.device().is_cpu() && act.device().is_cpu(),
            "{} (cpu): all tensors must be on the CPU", op);
  ZT_ASSERT(ids.dtype() == DType::i32, "{}: ids must be i32, got {}", op, dtype_name(ids.dtype()));
  ZT_ASSERT(table.ndim() == 2 && act.numel() == ids.numel() * table.size(1),
            "{}: activations {} are not ids {} x table width {}", op, act.shape().str(),
            ids.shape().str(), table.ndim() == 2 ? table.size(1) : -1);
  embedding_check_tokens(ids.data<int32_t>(), ids.numel(), table.size(0));
}

}  // namespace

void embedding_lookup_forward(Tensor& out, const Tensor& ids, const Tensor& table, Accumulate mode,
                              const Stream& s) {
  lookup_check(ids, table, out, "embedding_lookup_forward");
  ZT_ASSERT(out.dtype() == table.dtype(), "embedding_lookup_forward: out {} and table {} differ",
            dtype_name(out.dtype()), dtype_name(table.dtype()));
  if (out.dtype() == DType::f32) {
    lookup_forward_impl(out.data<float>(), ids.data<int32_t>(), table.data<float>(), ids.numel(),
                        table.size(1), mode);
  } else {
    ZT_ASSERT(out.dtype() == DType::f64,
              "embedding_lookup_forward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(out.dtype()));
    lookup_forward_impl(out.data<double>(), ids.data<int32_t>(), table.data<double>(), ids.numel(),
                        table.size(1), mode);
  }
}

void embedding_lookup_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids,
                               const Stream& s) {
  lookup_check(ids, dtable, dout, "embedding_lookup_backward");
  ZT_ASSERT(dtable.dtype() == accum_dtype(dout.dtype()),
            "embedding_lookup_backward: dtable {} must be the accum dtype of dout {}",
            dtype_name(dtable.dtype()), dtype_name(dout.dtype()));
  if (dout.dtype() == DType::f32) {
    lookup_backward_impl(dtable.data<float>(), dout.data<float>(), ids.data<int32_t>(), ids.numel(),
                         dtable.size(1));
  } else {
    ZT_ASSERT(dout.dtype() == DType::f64,
              "embedding_lookup_backward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dout.dtype()));
    lookup_backward_impl(dtable.data<double>(), dout.data<double>(), ids.data<int32_t>(),
                         ids.numel(), dtable.size(1));
  }
}

namespace {

template <typename T>
void range_forward_impl(T* out, const int32_t* ids, const T* table, int64_t n, int64_t C,
                        int64_t row0, int64_t rows) {
#pragma omp parallel for if (parallel : n * C >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = static_cast<int64_t>(ids[i]) - row0;
    T* o = out + i * C;
    if (r < 0 || r >= rows) {
      for (int64_t c = 0; c < C; ++c) o[c] = 0;
    } else {
      for (int64_t c = 0; c < C; ++c) o[c] = table[r * C + c];
    }
  }
}

template <typename T>
void range_backward_impl(T* dtable, const T* dout, const int32_t* ids, int64_t n, int64_t C,
                         int64_t row0, int64_t rows) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = static_cast<int64_t>(ids[i]) - row0;
    if (r < 0 || r >= rows) continue;
    for (int64_t c = 0; c < C; ++c) dtable[r * C + c] += dout[i * C + c];
  }
}

void range_check(const Tensor& ids, const Tensor& table, const Tensor& act, const char* op) {
  ZT_ASSERT(ids.device().is_cpu() && table.device().is_cpu() && act.device().is_cpu(),
            "{} (cpu): all tensors must be on the CPU", op);
  ZT_ASSERT(ids.dtype() == DType::i32, "{}: ids must be i32, got {}", op, dtype_name(ids.dtype()));
  ZT_ASSERT(table.ndim() == 2 && act.numel() == ids.numel() * table.size(1),
            "{}: activations {} are not ids {} x table width {}", op, act.shape().str(),
            ids.shape().str(), table.ndim() == 2 ? table.size(1) : -1);
}

}  // namespace

void embedding_range_forward(Tensor& out, const Tensor& ids, const Tensor& table, int64_t row0,
                             const Stream& s) {
  range_check(ids, table, out, "embedding_range_forward");
  ZT_ASSERT(out.dtype() == table.dtype(), "embedding_range_forward: out {} and table {} differ",
            dtype_name(out.dtype()), dtype_name(table.dtype()));
  if (out.dtype() == DType::f32) {
    range_forward_impl(out.data<float>(), ids.data<int32_t>(), table.data<float>(), ids.numel(),
                       table.size(1), row0, table.size(0));
  } else {
    ZT_ASSERT(out.dtype() == DType::f64, "embedding_range_forward: CPU dtype f32 or f64, got {}",
              dtype_name(out.dtype()));
    range_forward_impl(out.data<double>(), ids.data<int32_t>(), table.data<double>(), ids.numel(),
                       table.size(1), row0, table.size(0));
  }
}

void embedding_range_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids, int64_t row0,
                              const Stream& s) {
  range_check(ids, dtable, dout, "embedding_range_backward");
  ZT_ASSERT(dtable.dtype() == accum_dtype(dout.dtype()),
            "embedding_range_backward: dtable {} must be the accum dtype of dout {}",
            dtype_name(dtable.dtype()), dtype_name(dout.dtype()));
  if (dout.dtype() == DType::f32) {
    range_backward_impl(dtable.data<float>(), dout.data<float>(), ids.data<int32_t>(), ids.numel(),
                        dtable.size(1), row0, dtable.size(0));
  } else {
    ZT_ASSERT(dout.dtype() == DType::f64, "embedding_range_backward: CPU dtype f32 or f64, got {}",
              dtype_name(dout.dtype()));
    range_backward_impl(dtable.data<double>(), dout.data<double>(), ids.data<int32_t>(),
                        ids.numel(), dtable.size(1), row0, dtable.size(0));
  }
}

}  // namespace zt::kernels::cpu
