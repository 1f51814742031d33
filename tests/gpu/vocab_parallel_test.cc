// The vocabulary-parallel kernels (tensor parallelism) on the GPU against the CPU reference, in
// f32, bf16 and f16, for each column part of split logits (GPT-2's padded vocabulary over 2
// parts, a tiny one over 4 with parts of padding only): the part's row max, its sums (the
// softmax denominator's share and the target's logit), and the loss and gradient it finishes
// with the reduced statistics; and the range lookups of a split table and their backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

// Columns [c0, c0 + n) of a (rows, cols) f32 CPU tensor.
Tensor columns(const Tensor& t, int64_t c0, int64_t n) {
  const int64_t rows = t.size(0), cols = t.size(1);
  Tensor out = Tensor::empty({rows, n}, DType::f32);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(t.data<float>() + r * cols + c0, n, out.data<float>() + r * n);
  }
  return out;
}

void check_parts(int64_t rows, int64_t vocab, int64_t padded, int parts, float dloss,
                 uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " over " << parts << " parts");
  Tensor logits = exact_tensor({rows, padded}, seed, 8.0);
  Tensor targets = random_ints({rows}, static_cast<int32_t>(vocab), seed + 1);
  for (int64_t i = 2; i < rows; i += 3) targets.data<int32_t>()[i] = -100;
  const int64_t vl = padded / parts;
  // The reduced statistics, from the CPU parts (what every rank would hold after its
  // all-reduces).
  Tensor max_all = Tensor::empty({rows}, DType::f32);
  std::fill_n(max_all.data<float>(), rows, -INFINITY);
  for (int p = 0; p < parts; ++p) {
    Tensor m = Tensor::empty({rows}, DType::f32);
    kernels::crossentropy_parallel_max(m, columns(logits, p * vl, vl), p * vl, vocab);
    for (int64_t i = 0; i < rows; ++i) {
      max_all.data<float>()[i] = std::max(max_all.data<float>()[i], m.data<float>()[i]);
    }
  }
  Tensor sums_all = Tensor::zeros({rows, 2}, DType::f32);
  for (int p = 0; p < parts; ++p) {
    Tensor sm = Tensor::empty({rows, 2}, DType::f32);
    kernels::crossentropy_parallel_sums(sm, columns(logits, p * vl, vl), targets, max_all, p * vl,
                                        vocab);
    for (int64_t k = 0; k < 2 * rows; ++k) sums_all.data<float>()[k] += sm.data<float>()[k];
  }
  const Device dev = Device::cuda(0);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    for (int p = 0; p < parts; ++p) {
      SCOPED_TRACE(::testing::Message() << "part " << p);
      Tensor part = columns(logits, p * vl, vl);  // (exact in every dtype)
      Tensor part_d = to_cuda(part, d.dtype);
      Tensor targets_d = targets.to(dev);
      Tensor m_ref = Tensor::empty({rows}, DType::f32);
      kernels::crossentropy_parallel_max(m_ref, part, p * vl, vocab);
      Tensor m_d = Tensor::empty({rows}, DType::f32, dev);
      kernels::crossentropy_parallel_max(m_d, part_d, p * vl, vocab);
      // Equal (the max picks a value; -inf where the part has no real column).
      const auto md = values(m_d), mr = values(m_ref);
      for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(md[i], mr[i]) << "row max " << i;
      Tensor s_ref = Tensor::empty({rows, 2}, DType::f32);
      kernels::crossentropy_parallel_sums(s_ref, part, targets, max_all, p * vl, vocab);
      Tensor s_d = Tensor::empty({rows, 2}, DType::f32, dev);
      kernels::crossentropy_parallel_sums(s_d, part_d, targets_d, max_all.to(dev), p * vl, vocab);
      const double stol = std::max(1e-5, 1e-7 * std::sqrt(double(vl)));
      expect_close(values(s_d), values(s_ref), stol, stol, "sums");
      Tensor l_ref = Tensor::empty({rows}, DType::f32);
      Tensor g_ref = part.clone();
      kernels::crossentropy_parallel_finish(l_ref, g_ref, targets, max_all, sums_all, p * vl,
                                            vocab, dloss, true);
      Tensor l_d = Tensor::empty({rows}, DType::f32, dev);
      kernels::crossentropy_parallel_finish(l_d, part_d, targets_d, max_all.to(dev),
                                            sums_all.to(dev), p * vl, vocab, dloss, true);
      expect_close(values(l_d), values(l_ref), 1e-5, 1e-5, "losses");
      const double rtol = std::max(d.rtol, 1e-4);
      expect_close(values(part_d), values(g_ref), 1e-3 * rtol * std::abs(dloss) + 1e-9, rtol,
                   "dlogits");
    }
  }
}

TEST(VocabParallelCuda, CrossEntropyPartsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_parts(5, 50257, 50304, 2, 0.25f, 71);
  check_parts(7, 60, 128, 4, 1.0f, 73);
}

TEST(VocabParallelCuda, RangeLookupsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  const int64_t V = 96, C = 40, parts = 3, rows = V / parts;
  const Device dev = Device::cuda(0);
  Tensor table = exact_tensor({V, C}, 81);
  Tensor ids = random_ints({3, 11}, static_cast<int32_t>(V), 82);
  Tensor dout = exact_tensor({3, 11, C}, 83);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    for (int64_t p = 0; p < parts; ++p) {
      Tensor mine = Tensor::empty({rows, C}, DType::f32);
      std::copy_n(table.data<float>() + p * rows * C, rows * C, mine.data<float>());
      Tensor out_ref = Tensor::empty({3, 11, C}, DType::f32);
      kernels::embedding_range_forward(out_ref, ids, mine, p * rows);
      Tensor out_d = Tensor::empty({3, 11, C}, d.dtype, dev);
      kernels::embedding_range_forward(out_d, ids.to(dev), to_cuda(mine, d.dtype), p * rows);
      expect_close(values(out_d), values(out_ref), 1e-30, 0, "range lookup");
      Tensor g_ref = Tensor::zeros({rows, C}, DType::f32);
      kernels::embedding_range_backward(g_ref, dout, ids, p * rows);
      Tensor g_d = Tensor::zeros({rows, C}, DType::f32, dev);
      kernels::embedding_range_backward(g_d, to_cuda(dout, d.dtype), ids.to(dev), p * rows);
      expect_close(values(g_d), values(g_ref), 1e-6, 1e-6, "range backward");
    }
  }
}

}  // namespace
}  // namespace zt::testing
