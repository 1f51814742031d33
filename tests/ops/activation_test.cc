// Tests of the CPU activations (kernels/cpu/activation.cc): each function against its formula in
// long double, each derivative against central finite differences in f64 (din written, not
// accumulated), ReLU's derivative 0 at 0, and finite values far in the tails in f32.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using kernels::Activation;
using testing::expect_close;
using testing::finite_difference;
using testing::random_tensor;
using testing::random_weights;
using testing::weighted_sum;

constexpr int64_t B = 2, T = 5, C = 8, N = B * T * C;

struct ActCase {
  Activation act;
  const char* name;
  long double (*f)(long double);
};

long double gelu_tanh(long double x) {
  const long double s = std::sqrt(2.0L / 3.14159265358979323846264338327950288L);
  return 0.5L * x * (1.0L + std::tanh(s * (x + 0.044715L * x * x * x)));
}
long double gelu_erf(long double x) {
  return 0.5L * x * (1.0L + std::erf(x / std::sqrt(2.0L)));
}
long double relu(long double x) {
  return x > 0 ? x : 0.0L;
}
long double silu(long double x) {
  return x / (1.0L + std::exp(-x));
}
long double tanh_act(long double x) {
  return std::tanh(x);
}

const ActCase kCases[] = {
    {Activation::kGeluTanh, "gelu_tanh", gelu_tanh},
    {Activation::kGeluErf, "gelu_erf", gelu_erf},
    {Activation::kRelu, "relu", relu},
    {Activation::kSilu, "silu", silu},
    {Activation::kTanh, "tanh", tanh_act},
};

TEST(Activation, ForwardMatchesFormulas) {
  for (const ActCase& a : kCases) {
    for (DType dt : {DType::f64, DType::f32}) {
      SCOPED_TRACE(::testing::Message() << a.name << " " << dtype_name(dt));
      Tensor in = random_tensor({B, T, C}, dt, 1, -5.0, 5.0);
      Tensor out = Tensor::empty({B, T, C}, dt);
      kernels::activation_forward(out, in, a.act);
      std::vector<double> expected;
      for (double x : in.to_doubles()) expected.push_back(static_cast<double>(a.f(x)));
      const double tol = dt == DType::f64 ? 1e-14 : 1e-6;
      expect_close(out.to_doubles(), expected, tol, tol, a.name);
    }
  }
}

TEST(Activation, GeluFormsDiffer) {
  // The two GELUs agree to ~1e-3 only: a test input where they differ by more than the forward
  // tolerance shows which one each enum value computes.
  Tensor in = Tensor::from_doubles({1.5}, {1}, DType::f64);
  Tensor a = Tensor::empty({1}, DType::f64), b = Tensor::empty({1}, DType::f64);
  kernels::activation_forward(a, in, Activation::kGeluTanh);
  kernels::activation_forward(b, in, Activation::kGeluErf);
  EXPECT_GT(std::fabs(a.item() - b.item()), 1e-5);
  EXPECT_NEAR(b.item(), 1.5 * 0.9331927987311419, 1e-14);  // Phi(1.5) = 0.93319...
}

TEST(Activation, BackwardMatchesFiniteDifferences) {
  for (const ActCase& a : kCases) {
    SCOPED_TRACE(a.name);
    Tensor in = random_tensor({B, T, C}, DType::f64, 2, -5.0, 5.0);
    Tensor out = Tensor::empty({B, T, C}, DType::f64);
    const std::vector<double> w = random_weights(N, 3);
    auto loss = [&] {
      kernels::activation_forward(out, in, a.act);
      return weighted_sum(out, w);
    };
    const std::vector<double> fd = finite_difference(in, loss);
    Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
    Tensor din = random_tensor({B, T, C}, DType::f64, 4);  // garbage: din is written
    kernels::activation_backward(din, dout, in, a.act);
    expect_close(din.to_doubles(), fd, 1e-8, 1e-6, "din");
    kernels::activation_backward(din, dout, in, a.act);
    expect_close(din.to_doubles(), fd, 1e-8, 1e-6, "din after a second backward (not doubled)");
    // din aliasing dout.
    Tensor g = dout.clone();
    kernels::activation_backward(g, g, in, a.act);
    expect_close(g.to_doubles(), fd, 1e-8, 1e-6, "din aliasing dout");
  }
}

TEST(Activation, ReluDerivativeIsZeroAtZero) {
  Tensor in = Tensor::from_doubles({-1.0, 0.0, 1.0}, {3}, DType::f32);
  Tensor dout = Tensor::from_doubles({5.0, 5.0, 5.0}, {3}, DType::f32);
  Tensor din = Tensor::empty({3}, DType::f32);
  kernels::activation_backward(din, dout, in, Activation::kRelu);
  EXPECT_EQ(din.to_doubles(), (std::vector<double>{0.0, 0.0, 5.0}));
}

TEST(Activation, Float32StaysFiniteInTheTails) {
  const std::vector<double> xs = {-200, -90, -30, -12, 0, 12, 30, 90, 200};
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor in = Tensor::from_doubles(xs, {n}, DType::f32);
  Tensor dout = Tensor::from_doubles(std::vector<double>(xs.size(), 1.0), {n}, DType::f32);
  for (const ActCase& a : kCases) {
    SCOPED_TRACE(a.name);
    Tensor out = Tensor::empty({n}, DType::f32), din = Tensor::empty({n}, DType::f32);
    kernels::activation_forward(out, in, a.act);
    kernels::activation_backward(din, dout, in, a.act);
    const std::vector<double> o = out.to_doubles(), g = din.to_doubles();
    for (size_t i = 0; i < xs.size(); ++i) {
      ASSERT_TRUE(std::isfinite(o[i]) && std::isfinite(g[i])) << "x = " << xs[i];
    }
    if (a.act == Activation::kTanh) {  // saturates at -1 and 1 with a vanishing slope
      EXPECT_EQ(o.back(), 1.0);
      EXPECT_EQ(o.front(), -1.0);
      EXPECT_EQ(g.back(), 0.0);
      EXPECT_EQ(g.front(), 0.0);
      continue;
    }
    // f(x) -> x and f'(x) -> 1 for large x; f(x) -> 0 and f'(x) -> 0 for very negative x.
    EXPECT_NEAR(o.back(), 200.0, 1e-4);
    EXPECT_NEAR(g.back(), 1.0, 1e-6);
    EXPECT_NEAR(o.front(), 0.0, 1e-6);
    EXPECT_NEAR(g.front(), 0.0, 1e-6);
  }
}

}  // namespace
}  // namespace zt
