// Tests of the CPU kernels behind LoRA adapters and frozen weights: the column-block GEMMs
// (matmul_cols_forward/backward) against plain loops, on odd shapes and both edge blocks; dropout_apply (kernels/cpu/dropout.cc): the drop fraction and the independence of
// neighbouring draws within statistical bounds over 1e6 elements, the 1 / (1 - p) scale,
// determinism, different seeds, in-place use, p = 0, and its backward (the op reapplied to the
// gradient) against finite differences; and the backward of matmul, layernorm and rmsnorm with
// undefined (frozen) parameter gradients against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using testing::expect_close;
using testing::finite_difference;
using testing::random_tensor;
using testing::random_weights;
using testing::weighted_sum;


// Values k/64, k in [-64, 64]: exact in every float dtype, and sums of a few of their small
// multiples stay exact in f32, so one rounding to the dtype is the only error.
Tensor exact_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<double> v = random_tensor(shape, DType::f64, seed).to_doubles();
  for (double& x : v) x = std::round(x * 64.0) / 64.0;
  return Tensor::from_doubles(v, shape, dtype);
}

void expect_equal(const std::vector<double>& actual, const std::vector<double>& expected,
                  const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected[i]) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected "
                    << expected[i];
      return;
    }
  }
}

// matmul_cols_forward / matmul_cols_backward against plain f64 loops: the block [col0, col0+M) of
// a wide (N, Y) matrix, the other columns untouched, din written or accumulated; `in` (and din)
// either (N, K) or a wider (N, W) read and written at columns [in_col0, in_col0+K) only.
TEST(MatmulCols, ForwardAndBackwardEqualPlainLoops) {
  constexpr int64_t N = 7, K = 5, M = 11, Y = 29;
  const float alpha = 0.625f;
  struct InBlock {
    int64_t W, in_col0;
  };
  for (const InBlock ib :
       {InBlock{K, 0}, InBlock{K + 6, 0}, InBlock{K + 6, 4}, InBlock{K + 6, 6}}) {
    const int64_t W = ib.W, c0 = ib.in_col0;
    for (DType dt : {DType::f32, DType::f64}) {
      for (int64_t col0 : {int64_t{0}, int64_t{9}, Y - M}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " col0 " + std::to_string(col0) + " in (N, " +
                     std::to_string(W) + ") from column " + std::to_string(c0));
        Tensor x = exact_tensor({N, W}, dt, 31);
        Tensor w = exact_tensor({M, K}, dt, 32);
        Tensor wide = exact_tensor({N, Y}, dt, 33);
        const std::vector<double> xv = x.to_doubles(), wv = w.to_doubles(), yv = wide.to_doubles();
        std::vector<double> fwd = yv;
        for (int64_t i = 0; i < N; ++i) {
          for (int64_t j = 0; j < M; ++j) {
            double t = 0;
            for (int64_t k = 0; k < K; ++k) t += xv[i * W + c0 + k] * wv[j * K + k];
            fwd[i * Y + col0 + j] += double{alpha} * t;
          }
        }
        Tensor out = wide.clone();
        kernels::matmul_cols_forward(out, x, w, col0, alpha, c0);
        expect_close(out.to_doubles(), fwd, 1e-6, 1e-6, "matmul_cols_forward");
        // Backward with the wide matrix as dout; din's columns outside the block keep their values.
        std::vector<double> din(N * W, 0.0), dw(M * K, 0.0);
        for (int64_t i = 0; i < N; ++i) {
          for (int64_t j = 0; j < M; ++j) {
            const double g = double{alpha} * yv[i * Y + col0 + j];
            for (int64_t k = 0; k < K; ++k) {
              din[i * W + c0 + k] += g * wv[j * K + k];
              dw[j * K + k] += g * xv[i * W + c0 + k];
            }
          }
        }
        Tensor din_t = exact_tensor({N, W}, dt, 34);  // accumulated into
        const std::vector<double> din0 = din_t.to_doubles();
        Tensor dw_t = exact_tensor({M, K}, dt, 35);
        const std::vector<double> dw0 = dw_t.to_doubles();
        kernels::matmul_cols_backward(&din_t, dw_t, wide, col0, alpha, x, w, true,
                                      kernels::Accumulate::kAdd, c0);
        std::vector<double> din_acc = din, dw_acc = dw;
        for (size_t i = 0; i < din.size(); ++i) din_acc[i] += din0[i];
        for (size_t i = 0; i < dw.size(); ++i) dw_acc[i] += dw0[i];
        expect_close(din_t.to_doubles(), din_acc, 1e-6, 1e-6, "din accumulated");
        expect_close(dw_t.to_doubles(), dw_acc, 1e-6, 1e-6, "dweight");
        Tensor din_w = exact_tensor({N, W}, dt, 36);
        std::vector<double> din_written = din_w.to_doubles();
        for (int64_t i = 0; i < N; ++i) {
          for (int64_t k = 0; k < K; ++k) din_written[i * W + c0 + k] = din[i * W + c0 + k];
        }
        Tensor frozen;
        kernels::matmul_cols_backward(&din_w, frozen, wide, col0, alpha, x, w, false,
                                      kernels::Accumulate::kAdd, c0);
        expect_close(din_w.to_doubles(), din_written, 1e-6, 1e-6, "din written");
        // kWrite: dweight's old values are not read.
        Tensor dw_w = exact_tensor({M, K}, dt, 37);
        kernels::matmul_cols_backward(nullptr, dw_w, wide, col0, alpha, x, w, false,
                                      kernels::Accumulate::kWrite, c0);
        expect_close(dw_w.to_doubles(), dw, 1e-6, 1e-6, "dweight written");
      }
    }
  }
}

// With no rows, kWrite writes dweight's zeros (kAdd leaves it).
TEST(MatmulCols, WriteWithNoRowsGivesZeros) {
  Tensor x = Tensor::empty({0, 4}, DType::f32), wide = Tensor::empty({0, 6}, DType::f32);
  Tensor w = exact_tensor({3, 4}, DType::f32, 41);
  Tensor dw = exact_tensor({3, 4}, DType::f32, 42);
  const std::vector<double> before = dw.to_doubles();
  kernels::matmul_cols_backward(nullptr, dw, wide, 1, 1.0f, x, w, false, kernels::Accumulate::kAdd,
                                0);
  EXPECT_EQ(dw.to_doubles(), before);
  kernels::matmul_cols_backward(nullptr, dw, wide, 1, 1.0f, x, w, false,
                                kernels::Accumulate::kWrite, 0);
  EXPECT_EQ(dw.to_doubles(), std::vector<double>(12, 0.0));
}

// ---- dropout
constexpr int64_t kMillion = 1000000;

// The mask (1 kept, 0 dropped) of dropout_apply on all-ones input.
std::vector<int> dropout_mask(int64_t n, float p, uint64_t seed, DType dt = DType::f32) {
  Tensor ones = Tensor::from_doubles(std::vector<double>(n, 1.0), {n}, dt);
  Tensor out = Tensor::empty({n}, dt);
  kernels::dropout_apply(out, ones, p, seed);
  std::vector<int> keep(n);
  const std::vector<double> v = out.to_doubles();
  for (int64_t i = 0; i < n; ++i) keep[i] = v[i] != 0.0;
  return keep;
}

TEST(Dropout, FractionScaleAndNeighboursWithinBounds) {
  for (float p : {0.1f, 0.5f}) {
    SCOPED_TRACE("p " + std::to_string(p));
    Tensor ones = Tensor::from_doubles(std::vector<double>(kMillion, 1.0), {kMillion}, DType::f32);
    Tensor out = Tensor::empty({kMillion}, DType::f32);
    kernels::dropout_apply(out, ones, p, 1234);
    const std::vector<double> v = out.to_doubles();
    const double scale = 1.0 / (1.0 - double{p});
    int64_t dropped = 0, both_dropped = 0;
    for (int64_t i = 0; i < kMillion; ++i) {
      if (v[i] == 0.0) {
        ++dropped;
        if (i > 0 && v[i - 1] == 0.0) ++both_dropped;
      } else {
        ASSERT_NEAR(v[i], scale, 1e-7 * scale) << "kept element " << i;
      }
    }
    // Binomial: 6 standard deviations (sqrt(p (1 - p) / n) <= 5e-4) and 2.5e-3 on p^2.
    const double sd = std::sqrt(double{p} * (1.0 - p) / kMillion);
    EXPECT_NEAR(double(dropped) / kMillion, p, 6 * sd);
    EXPECT_NEAR(double(both_dropped) / (kMillion - 1), double{p} * p, 2.5e-3);
  }
}

TEST(Dropout, SeedDeterminesTheMask) {
  const float p = 0.3f;
  const int64_t n = 100000;
  const std::vector<int> a = dropout_mask(n, p, 7);
  EXPECT_EQ(dropout_mask(n, p, 7), a) << "same seed, same mask";
  EXPECT_EQ(dropout_mask(n, p, 7, DType::bf16), a) << "the mask does not depend on the dtype";
  // Independent masks disagree at a fraction 2 p (1 - p) of the positions (5 standard
  // deviations), for adjacent seeds and seeds differing in the top bit too.
  for (uint64_t other : {uint64_t{8}, uint64_t{7} ^ (uint64_t{1} << 63), uint64_t{123456789}}) {
    const std::vector<int> b = dropout_mask(n, p, other);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += a[i] != b[i];
    EXPECT_NEAR(double(differ) / n, 2.0 * p * (1.0 - p), 8e-3) << "seed " << other;
  }
}

TEST(Dropout, InPlaceAndZeroP) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor in = random_tensor({3, 1001}, dt, 41);
    Tensor out = Tensor::empty(in.shape(), dt);
    kernels::dropout_apply(out, in, 0.25f, 99);
    Tensor same = in.clone();
    kernels::dropout_apply(same, same, 0.25f, 99);
    expect_equal(same.to_doubles(), out.to_doubles(), "in place");
    kernels::dropout_apply(out, in, 0.0f, 99);
    expect_equal(out.to_doubles(), in.to_doubles(), "p = 0 copies");
  }
}

TEST(Dropout, ReappliedToTheGradientMatchesFiniteDifferences) {
  const float p = 0.3f;
  const uint64_t seed = 0xDEADBEEFCAFEF00Dull;
  Tensor x = random_tensor({7, 29}, DType::f64, 51);
  Tensor y = Tensor::empty(x.shape(), DType::f64);
  const std::vector<double> w = random_weights(x.numel(), 52);
  auto loss = [&] {
    kernels::dropout_apply(y, x, p, seed);
    return weighted_sum(y, w);
  };
  const std::vector<double> fd = finite_difference(x, loss);
  Tensor dy = Tensor::from_doubles(w, x.shape(), DType::f64);
  Tensor dx = Tensor::empty(x.shape(), DType::f64);
  kernels::dropout_apply(dx, dy, p, seed);
  expect_close(dx.to_doubles(), fd, 1e-8, 1e-7, "dx");
  int64_t dropped = 0;
  for (double g : fd) dropped += g == 0.0;
  EXPECT_GT(dropped, 0) << "some elements must be dropped";
}

TEST(DropoutDeathTest, PMustBeInUnitInterval) {
  Tensor x = Tensor::zeros({4}, DType::f32);
  EXPECT_DEATH(kernels::dropout_apply(x, x, 1.0f, 0), "dropout_apply: p = 1 is outside");
  EXPECT_DEATH(kernels::dropout_apply(x, x, -0.1f, 0), "dropout_apply: p = -0.1 is outside");
}

// ---- frozen parameters: undefined gradients are skipped, din is still right.
constexpr int64_t N = 10, K = 8, M = 12, C = 9;

TEST(FrozenWeights, MatmulBackwardWithoutDweight) {
  Tensor in = random_tensor({2, 5, K}, DType::f64, 61);
  Tensor weight = random_tensor({M, K}, DType::f64, 62);
  Tensor bias = random_tensor({M}, DType::f64, 63);
  Tensor out = Tensor::empty({2, 5, M}, DType::f64);
  const std::vector<double> w = random_weights(N * M, 64);
  auto loss = [&] {
    kernels::matmul_forward(out, in, weight, &bias);
    return weighted_sum(out, w);
  };
  const std::vector<double> fd_in = finite_difference(in, loss);
  const std::vector<double> fd_b = finite_difference(bias, loss);
  Tensor dout = Tensor::from_doubles(w, {2, 5, M}, DType::f64);
  Tensor din = random_tensor({2, 5, K}, DType::f64, 65);  // garbage: din is written
  Tensor frozen;
  Tensor dbias = Tensor::zeros({M}, DType::f64);
  kernels::matmul_backward(&din, frozen, &dbias, dout, in, weight);
  expect_close(din.to_doubles(), fd_in, 1e-8, 1e-6, "din");
  expect_close(dbias.to_doubles(), fd_b, 1e-8, 1e-6, "dbias (the bias is trained)");
  EXPECT_FALSE(frozen.defined());
}

enum class Frozen : unsigned char { kWeight, kBias, kBoth };

TEST(FrozenWeights, LayernormBackwardWithoutParameterGradients) {
  Tensor in = random_tensor({N, C}, DType::f64, 71);
  Tensor weight = random_tensor({C}, DType::f64, 72, 0.5, 1.5);
  Tensor bias = random_tensor({C}, DType::f64, 73);
  Tensor out = Tensor::empty({N, C}, DType::f64);
  Tensor mean = Tensor::empty({N}, DType::f64), rstd = Tensor::empty({N}, DType::f64);
  const std::vector<double> w = random_weights(N * C, 74);
  auto loss = [&] {
    kernels::layernorm_forward(out, mean, rstd, in, weight, bias, 1e-5f);
    return weighted_sum(out, w);
  };
  const std::vector<double> fd_in = finite_difference(in, loss);
  const std::vector<double> fd_w = finite_difference(weight, loss);
  const std::vector<double> fd_b = finite_difference(bias, loss);
  loss();  // leaves mean/rstd of the unperturbed input
  Tensor dout = Tensor::from_doubles(w, {N, C}, DType::f64);
  for (Frozen f : {Frozen::kWeight, Frozen::kBias, Frozen::kBoth}) {
    SCOPED_TRACE(static_cast<int>(f));
    const bool weight_frozen = f == Frozen::kWeight || f == Frozen::kBoth;
    const bool bias_frozen = f == Frozen::kBias || f == Frozen::kBoth;
    Tensor dweight = weight_frozen ? Tensor() : Tensor::zeros({C}, DType::f64);
    Tensor dbias = bias_frozen ? Tensor() : Tensor::zeros({C}, DType::f64);
    // din aliasing dout, as a block updates its gradient in place: the parameter gradients are
    // no longer read first when frozen, din must still be right.
    Tensor din = dout.clone();
    kernels::layernorm_backward(din, dweight, dbias, din, in, weight, mean, rstd, nullptr);
    expect_close(din.to_doubles(), fd_in, 1e-8, 1e-6, "din");
    if (!weight_frozen) expect_close(dweight.to_doubles(), fd_w, 1e-8, 1e-6, "dweight");
    if (!bias_frozen) expect_close(dbias.to_doubles(), fd_b, 1e-8, 1e-6, "dbias");
  }
}

TEST(FrozenWeights, RmsnormBackwardWithoutDweight) {
  Tensor in = random_tensor({N, C}, DType::f64, 81);
  Tensor weight = random_tensor({C}, DType::f64, 82, 0.5, 1.5);
  Tensor out = Tensor::empty({N, C}, DType::f64);
  Tensor rstd = Tensor::empty({N}, DType::f64);
  const std::vector<double> w = random_weights(N * C, 83);
  auto loss = [&] {
    kernels::rmsnorm_forward(out, rstd, in, weight, 1e-6f);
    return weighted_sum(out, w);
  };
  std::vector<double> fd_in = finite_difference(in, loss);
  loss();  // leaves rstd of the unperturbed input
  Tensor dres = random_tensor({N, C}, DType::f64, 84);
  const std::vector<double> r = dres.to_doubles();
  for (size_t i = 0; i < fd_in.size(); ++i) fd_in[i] += r[i];
  Tensor dout = Tensor::from_doubles(w, {N, C}, DType::f64);
  Tensor frozen;
  // din aliasing dresidual (the residual stream's gradient updated in place).
  kernels::rmsnorm_backward(dres, frozen, dout, in, weight, rstd, &dres);
  expect_close(dres.to_doubles(), fd_in, 1e-8, 1e-6, "din");
}

}  // namespace
}  // namespace zt
