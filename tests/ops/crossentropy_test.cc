// Tests of the CPU softmax cross-entropy (kernels/cpu/crossentropy.cc): losses against a
// long-double log-softmax that reads only the real vocabulary columns, stability with large logits,
// and the fused form: same losses, logits overwritten with finite differences of dloss *
// sum(losses), padding columns 0.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using testing::expect_close;
using testing::finite_difference;
using testing::random_ints;
using testing::random_tensor;

constexpr int64_t B = 2, T = 5, N = B * T, V = 11, Vp = 16;

// Logits whose padding columns hold large values: a kernel that read them would be far off.
Tensor crossentropy_logits(DType dt, uint64_t seed, double offset = 0.0) {
  std::vector<double> v = random_tensor({B, T, Vp}, DType::f64, seed, -3.0, 3.0).to_doubles();
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < Vp; ++j) v[i * Vp + j] = j < V ? v[i * Vp + j] + offset : 40.0 + j;
  }
  return Tensor::from_doubles(v, {B, T, Vp}, dt);
}

std::vector<double> crossentropy_naive(const Tensor& logits, const Tensor& targets) {
  const std::vector<double> x = logits.to_doubles();
  std::vector<double> losses;
  for (int64_t i = 0; i < N; ++i) {
    long double m = x[i * Vp];
    for (int64_t j = 1; j < V; ++j) m = std::fmax(m, static_cast<long double>(x[i * Vp + j]));
    long double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<long double>(x[i * Vp + j]) - m);
    const int32_t target = targets.data<int32_t>()[i];
    if (target < 0) {  // not counted (ignore index)
      losses.push_back(0.0);
      continue;
    }
    // -log_softmax(x)[target] = logsumexp(x) - x[target]
    losses.push_back(static_cast<double>(m + std::log(sum) - x[i * Vp + target]));
  }
  return losses;
}

TEST(CrossEntropy, ForwardMatchesLogSoftmaxAndIgnoresPadding) {
  for (DType dt : {DType::f64, DType::f32}) {
    for (double offset : {0.0, 1000.0}) {  // 1000: exp would overflow without the max shift
      Tensor logits = crossentropy_logits(dt, 1, offset);
      Tensor targets = random_ints({B, T}, static_cast<int32_t>(V), 2);
      Tensor losses = Tensor::empty({B, T}, dt);
      kernels::crossentropy_forward(losses, logits, targets, V);
      // f32 logits near 1000 carry an absolute rounding error of ~3e-5 each.
      const double tol = dt == DType::f64 ? 1e-12 : (offset > 0 ? 2e-4 : 2e-6);
      expect_close(losses.to_doubles(), crossentropy_naive(logits, targets), tol, tol, "losses");
    }
  }
}

TEST(CrossEntropy, FusedLossesAndGradientMatchFiniteDifferences) {
  const float dloss = 1.0f / static_cast<float>(N);  // the mean over tokens, as training uses it
  Tensor logits = crossentropy_logits(DType::f64, 3);
  Tensor targets = random_ints({B, T}, static_cast<int32_t>(V), 4);
  Tensor losses = Tensor::empty({B, T}, DType::f64);
  auto loss = [&] {
    kernels::crossentropy_forward(losses, logits, targets, V);
    double s = 0;
    for (double l : losses.to_doubles()) s += l;
    return static_cast<double>(dloss) * s;
  };
  // Padding columns are not read, so their finite differences are exactly 0.
  const std::vector<double> fd = finite_difference(logits, loss);
  loss();
  const std::vector<double> expected_losses = losses.to_doubles();

  Tensor fused_losses = Tensor::empty({B, T}, DType::f64);
  kernels::crossentropy_fused(fused_losses, logits, targets, V, dloss);
  expect_close(fused_losses.to_doubles(), expected_losses, 1e-14, 1e-14, "fused losses");
  expect_close(logits.to_doubles(), fd, 1e-9, 1e-6, "dlogits");
  std::vector<double> dl = logits.to_doubles();
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = V; j < Vp; ++j) EXPECT_EQ(dl[i * Vp + j], 0.0) << "padding " << i << "," << j;
  }
}

// transformers' labels use -100 for positions that do not count (prompt tokens, MLM's unmasked
// tokens): loss 0 and no gradient there, the other rows unchanged.
TEST(CrossEntropy, NegativeTargetsAreIgnored) {
  const float dloss = 0.5f;
  Tensor logits = crossentropy_logits(DType::f64, 31);
  Tensor targets = random_ints({B, T}, static_cast<int32_t>(V), 32);
  targets.data<int32_t>()[0] = -100;
  targets.data<int32_t>()[7] = -1;
  Tensor losses = Tensor::empty({B, T}, DType::f64);
  kernels::crossentropy_forward(losses, logits, targets, V);
  expect_close(losses.to_doubles(), crossentropy_naive(logits, targets), 1e-12, 1e-12,
               "losses with ignored rows");
  auto loss = [&] {
    kernels::crossentropy_forward(losses, logits, targets, V);
    double s = 0;
    for (double l : losses.to_doubles()) s += l;
    return static_cast<double>(dloss) * s;
  };
  const std::vector<double> fd = finite_difference(logits, loss);
  Tensor fused_losses = Tensor::empty({B, T}, DType::f64);
  kernels::crossentropy_fused(fused_losses, logits, targets, V, dloss);
  expect_close(logits.to_doubles(), fd, 1e-9, 1e-6, "dlogits with ignored rows");
  EXPECT_EQ(fused_losses.to_doubles()[0], 0.0);
  EXPECT_EQ(fused_losses.to_doubles()[7], 0.0);
}

TEST(CrossEntropy, FusedFloat32MatchesFloat64) {
  const float dloss = 0.25f;
  Tensor targets = random_ints({B, T}, static_cast<int32_t>(V), 5);
  Tensor logits64 = crossentropy_logits(DType::f64, 6);
  Tensor logits32 = crossentropy_logits(DType::f32, 6);
  Tensor losses64 = Tensor::empty({N}, DType::f64), losses32 = Tensor::empty({N}, DType::f32);
  kernels::crossentropy_fused(losses64, logits64, targets, V, dloss);
  kernels::crossentropy_fused(losses32, logits32, targets, V, dloss);
  expect_close(losses32.to_doubles(), losses64.to_doubles(), 1e-6, 1e-6, "losses f32 vs f64");
  expect_close(logits32.to_doubles(), logits64.to_doubles(), 1e-7, 1e-6, "dlogits f32 vs f64");
}

TEST(CrossEntropyDeathTest, TargetInPaddingAborts) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";  // OpenMP threads may exist
  Tensor logits = crossentropy_logits(DType::f64, 8);
  Tensor targets = Tensor::zeros({B, T}, DType::i32);
  targets.data<int32_t>()[3] = static_cast<int32_t>(V);  // a padding column, not a token
  Tensor losses = Tensor::empty({B, T}, DType::f64);
  EXPECT_DEATH(kernels::crossentropy_forward(losses, logits, targets, V),
               "target 11 at row 3 is outside \\[0, 11\\)");
}

}  // namespace
}  // namespace zt
