// Tests of the CPU argmax_rows (kernels/cpu/argmax.cc): against a scan written here, with ties
// (the lowest index wins, as torch.argmax), NaN skipped, and padding columns past `vocab` never
// chosen even when they hold the largest values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

TEST(ArgmaxRows, LowestIndexOfTheMaximumWithinTheVocabulary) {
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t rows = 37, vocab = 1000, vp = 1024;
    // Values on a coarse grid: many ties.
    std::vector<double> v = testing::random_tensor({rows, vp}, DType::f64, 3).to_doubles();
    for (double& x : v) x = std::round(x * 4.0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = vocab; j < vp; ++j) v[i * vp + j] = 100.0;  // padding: never chosen
    }
    Tensor logits = Tensor::from_doubles(v, {rows, vp}, dt);
    Tensor out = Tensor::empty({rows}, DType::i32);
    kernels::argmax_rows(out, logits, vocab);
    for (int64_t i = 0; i < rows; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < vocab; ++j) {
        if (v[i * vp + j] > v[i * vp + best]) best = j;
      }
      EXPECT_EQ(out.data<int32_t>()[i], best) << "row " << i;
    }
  }
}

TEST(ArgmaxRows, NanIsSkippedAndAllNanGivesZero) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor logits = Tensor::from_doubles({nan, 1.0, 3.0, nan, nan, nan, -2.0, -1.0, -1.0}, {3, 3},
                                       DType::f32);
  Tensor out = Tensor::empty({3}, DType::i32);
  kernels::argmax_rows(out, logits, 3);
  EXPECT_EQ(out.data<int32_t>()[0], 2);
  EXPECT_EQ(out.data<int32_t>()[1], 0);
  EXPECT_EQ(out.data<int32_t>()[2], 1);
}

}  // namespace
}  // namespace zt
