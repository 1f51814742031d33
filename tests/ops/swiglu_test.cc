// Tests of the CPU SwiGLU (kernels/cpu/swiglu.cc): forward against silu(gate) * up in long
// double, backward against central finite differences of L = sum(w * out) in f64, dgate_up
// written (not accumulated), also when it aliases gate_up.
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

constexpr int64_t B = 2, T = 3, F = 6, N = B * T;

TEST(Swiglu, ForwardMatchesNaive) {
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor gate_up = random_tensor({B, T, 2 * F}, dt, 1, -4.0, 4.0);
    Tensor out = Tensor::empty({B, T, F}, dt);
    kernels::swiglu_forward(out, gate_up);
    const std::vector<double> gu = gate_up.to_doubles();
    std::vector<double> expected;
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t f = 0; f < F; ++f) {
        const long double g = gu[i * 2 * F + f];
        const long double u = gu[i * 2 * F + F + f];
        expected.push_back(static_cast<double>(g / (1.0L + std::exp(-g)) * u));
      }
    }
    const double tol = dt == DType::f64 ? 1e-14 : 2e-6;
    expect_close(out.to_doubles(), expected, tol, tol, "swiglu out");
  }
}

TEST(Swiglu, BackwardMatchesFiniteDifferences) {
  Tensor gate_up = random_tensor({B, T, 2 * F}, DType::f64, 2, -4.0, 4.0);
  Tensor out = Tensor::empty({B, T, F}, DType::f64);
  const std::vector<double> w = random_weights(N * F, 3);
  auto loss = [&] {
    kernels::swiglu_forward(out, gate_up);
    return weighted_sum(out, w);
  };
  const std::vector<double> fd = finite_difference(gate_up, loss);
  Tensor dout = Tensor::from_doubles(w, {B, T, F}, DType::f64);
  Tensor dgate_up = random_tensor({B, T, 2 * F}, DType::f64, 4);  // garbage: written
  kernels::swiglu_backward(dgate_up, dout, gate_up);
  expect_close(dgate_up.to_doubles(), fd, 1e-8, 1e-6, "dgate_up");
  kernels::swiglu_backward(dgate_up, dout, gate_up);
  expect_close(dgate_up.to_doubles(), fd, 1e-8, 1e-6, "dgate_up after a second backward");
  // The gradient may overwrite the saved activation (gate_up is dead after the backward).
  Tensor inplace = gate_up.clone();
  kernels::swiglu_backward(inplace, dout, inplace);
  expect_close(inplace.to_doubles(), fd, 1e-8, 1e-6, "dgate_up aliasing gate_up");
}

}  // namespace
}  // namespace zt
