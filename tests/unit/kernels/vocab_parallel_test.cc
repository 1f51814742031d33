// The vocabulary-parallel kernels (tensor parallelism) on the CPU against the whole-vocabulary
// ones: the cross-entropy of logits split into T column parts, with the max and the sums
// reduced over the parts as the ranks reduce them, gives crossentropy_fused's losses and, part
// by part, its gradient (padding columns and rows not counted zero); the range lookups of a
// table split into row parts sum to the whole lookup, and their backward fills each part's rows
// of the whole backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using testing::random_ints;

Tensor random_logits(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 7;
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = static_cast<float>(static_cast<double>(x % 20001) / 1000.0 - 10.0);
  }
  return Tensor::from_floats(v, {rows, cols}, DType::f32);
}

// Columns [c0, c0 + n) of a (rows, cols) tensor, as a tensor of its own.
Tensor columns(const Tensor& t, int64_t c0, int64_t n) {
  const int64_t rows = t.size(0), cols = t.size(1);
  Tensor out = Tensor::empty({rows, n}, t.dtype());
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(t.data<float>() + r * cols + c0, n, out.data<float>() + r * n);
  }
  return out;
}

void check_split(int64_t rows, int64_t vocab, int64_t padded, int parts, float dloss) {
  SCOPED_TRACE(::testing::Message() << rows << " rows, vocab " << vocab << " of " << padded
                                    << ", " << parts << " parts");
  Tensor logits = random_logits(rows, padded, 11);
  Tensor targets = random_ints({rows}, static_cast<int32_t>(vocab), 12);
  for (int64_t i = 1; i < rows; i += 3) targets.data<int32_t>()[i] = -100;
  Tensor want_grad = logits.clone();
  Tensor want = Tensor::empty({rows}, DType::f32);
  kernels::crossentropy_fused(want, want_grad, targets, vocab, dloss);

  const int64_t vl = padded / parts;
  std::vector<Tensor> part(static_cast<size_t>(parts)), rowmax(static_cast<size_t>(parts));
  Tensor max_all = Tensor::empty({rows}, DType::f32);
  std::fill_n(max_all.data<float>(), rows, -INFINITY);
  for (int p = 0; p < parts; ++p) {
    part[p] = columns(logits, p * vl, vl);
    rowmax[p] = Tensor::empty({rows}, DType::f32);
    kernels::crossentropy_parallel_max(rowmax[p], part[p], p * vl, vocab);
    for (int64_t i = 0; i < rows; ++i) {
      max_all.data<float>()[i] = std::max(max_all.data<float>()[i], rowmax[p].data<float>()[i]);
    }
  }
  Tensor sums_all = Tensor::zeros({rows, 2}, DType::f32);
  for (int p = 0; p < parts; ++p) {
    Tensor sums = Tensor::empty({rows, 2}, DType::f32);
    kernels::crossentropy_parallel_sums(sums, part[p], targets, max_all, p * vl, vocab);
    for (int64_t k = 0; k < 2 * rows; ++k) sums_all.data<float>()[k] += sums.data<float>()[k];
  }
  for (int p = 0; p < parts; ++p) {
    Tensor losses = Tensor::empty({rows}, DType::f32);
    kernels::crossentropy_parallel_finish(losses, part[p], targets, max_all, sums_all, p * vl,
                                          vocab, dloss, true);
    for (int64_t i = 0; i < rows; ++i) {
      EXPECT_NEAR(losses.data<float>()[i], want.data<float>()[i],
                  2e-5 * std::max(1.0f, std::abs(want.data<float>()[i])))
          << "row " << i << ", part " << p;
      for (int64_t j = 0; j < vl; ++j) {
        EXPECT_NEAR(part[p].data<float>()[i * vl + j], want_grad.data<float>()[i * padded + p * vl + j],
                    1e-6 * std::abs(dloss))
            << "row " << i << ", column " << p * vl + j;
      }
    }
  }
}

TEST(VocabParallel, CrossEntropyOfTheSplitLogitsIsTheWholeOne) {
  check_split(7, 120, 128, 2, 0.25f);  // the padding in the last part only
  check_split(5, 60, 128, 4, 1.0f);    // whole parts of padding (no real column)
  check_split(4, 96, 96, 3, 0.5f);     // no padding
}

TEST(VocabParallel, RangeLookupsSumToTheWholeLookup) {
  const int64_t V = 12, C = 5, parts = 3, rows = V / parts;
  Tensor table = random_logits(V, C, 21);
  Tensor ids = random_ints({2, 7}, static_cast<int32_t>(V), 22);
  Tensor whole = Tensor::empty({2, 7, C}, DType::f32);
  kernels::embedding_lookup_forward(whole, ids, table, kernels::Accumulate::kWrite);
  Tensor dout = random_logits(14, C, 23).reshape({2, 7, C});
  Tensor dwhole = Tensor::zeros({V, C}, DType::f32);
  kernels::embedding_lookup_backward(dwhole, dout, ids);
  std::vector<float> sum(static_cast<size_t>(14 * C), 0.0f);
  for (int64_t p = 0; p < parts; ++p) {
    Tensor mine = Tensor::empty({rows, C}, DType::f32);
    std::copy_n(table.data<float>() + p * rows * C, rows * C, mine.data<float>());
    Tensor out = Tensor::empty({2, 7, C}, DType::f32);
    kernels::embedding_range_forward(out, ids, mine, p * rows);
    for (int64_t k = 0; k < 14 * C; ++k) sum[static_cast<size_t>(k)] += out.data<float>()[k];
    Tensor dmine = Tensor::zeros({rows, C}, DType::f32);
    kernels::embedding_range_backward(dmine, dout, ids, p * rows);
    for (int64_t k = 0; k < rows * C; ++k) {
      EXPECT_EQ(dmine.data<float>()[k], dwhole.data<float>()[p * rows * C + k]) << "part " << p;
    }
  }
  for (int64_t k = 0; k < 14 * C; ++k) EXPECT_EQ(sum[static_cast<size_t>(k)], whole.data<float>()[k]);
}

}  // namespace
}  // namespace zt
