// Tests of the CPU GELU (kernels/cpu/gelu.cc): forward against the tanh formula in long double,
// backward against central finite differences in f64, din written (not accumulated), and finite
// gradients far in the tails in f32.
#include <gtest/gtest.h>

#include <cmath>
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

constexpr int64_t B = 2, T = 5, C = 8, N = B * T * C;

TEST(Gelu, ForwardMatchesTanhFormula) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor in = random_tensor({B, T, C}, dt, 1, -4.0, 4.0);
    Tensor out = Tensor::empty({B, T, C}, dt);
    kernels::gelu_forward(out, in);
    std::vector<double> expected;
    for (double x : in.to_doubles()) {
      const long double xl = x;
      const long double s = std::sqrt(2.0L / 3.14159265358979323846264338327950288L);
      expected.push_back(
          static_cast<double>(0.5L * xl * (1.0L + std::tanh(s * (xl + 0.044715L * xl * xl * xl)))));
    }
    const double tol = dt == DType::f64 ? 1e-14 : 1e-6;
    expect_close(out.to_doubles(), expected, tol, tol, "gelu out");
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  Tensor in = random_tensor({B, T, C}, DType::f64, 2, -4.0, 4.0);
  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  const std::vector<double> w = random_weights(N, 3);
  auto loss = [&] {
    kernels::gelu_forward(out, in);
    return weighted_sum(out, w);
  };
  const std::vector<double> fd = finite_difference(in, loss);
  Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
  Tensor din = random_tensor({B, T, C}, DType::f64, 4);  // garbage: din is written
  kernels::gelu_backward(din, dout, in);
  expect_close(din.to_doubles(), fd, 1e-8, 1e-6, "din");
  kernels::gelu_backward(din, dout, in);
  expect_close(din.to_doubles(), fd, 1e-8, 1e-6, "din after a second backward (not doubled)");
}

TEST(Gelu, Float32MatchesFloat64AndStaysFiniteInTheTails) {
  std::vector<double> xs = {-30, -12, -6, -1.5, -0.3, 0, 0.3, 1.5, 6, 12, 30};
  Tensor out64 = Tensor::empty({11}, DType::f64), out32 = Tensor::empty({11}, DType::f32);
  Tensor din64 = Tensor::empty({11}, DType::f64), din32 = Tensor::empty({11}, DType::f32);
  Tensor in64 = Tensor::from_doubles(xs, {11}, DType::f64);
  Tensor in32 = Tensor::from_doubles(xs, {11}, DType::f32);
  Tensor dout64 = Tensor::from_doubles(std::vector<double>(11, 1.0), {11}, DType::f64);
  Tensor dout32 = Tensor::from_doubles(std::vector<double>(11, 1.0), {11}, DType::f32);
  kernels::gelu_forward(out64, in64);
  kernels::gelu_forward(out32, in32);
  kernels::gelu_backward(din64, dout64, in64);
  kernels::gelu_backward(din32, dout32, in32);
  expect_close(out32.to_doubles(), out64.to_doubles(), 1e-6, 1e-6, "gelu f32 vs f64");
  expect_close(din32.to_doubles(), din64.to_doubles(), 1e-6, 1e-6, "gelu' f32 vs f64");
  // gelu'(x) -> 1 for large x and -> 0 for very negative x.
  EXPECT_NEAR(din32.to_doubles().back(), 1.0, 1e-6);
  EXPECT_NEAR(din32.to_doubles().front(), 0.0, 1e-6);
}

}  // namespace
}  // namespace zt
