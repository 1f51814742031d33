// Tests of the CPU matmul (kernels/cpu/matmul.cc): forward against a triple loop, backward against
// central finite differences of L = sum(w * out) in f64 (with and without bias, with din skipped),
// and the write (din) / accumulate (dweight, dbias) contract; matmul_weight_grad's write and add.
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

constexpr int64_t B = 2, T = 5, K = 8, M = 12, N = B * T;

enum class Bias { kNone, kGiven };
enum class InputGrad { kSkip, kCompute };

std::vector<double> matmul_naive(const Tensor& in, const Tensor& weight, const Tensor* bias) {
  std::vector<double> x = in.to_doubles(), w = weight.to_doubles();
  std::vector<double> b = bias ? bias->to_doubles() : std::vector<double>(M, 0.0);
  std::vector<double> out(N * M);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < M; ++j) {
      long double s = b[j];
      for (int64_t k = 0; k < K; ++k) s += static_cast<long double>(x[i * K + k]) * w[j * K + k];
      out[i * M + j] = static_cast<double>(s);
    }
  }
  return out;
}

TEST(Matmul, ForwardMatchesTripleLoop) {
  for (DType dt : {DType::f64, DType::f32}) {
    for (Bias with_bias : {Bias::kNone, Bias::kGiven}) {
      Tensor in = random_tensor({B, T, K}, dt, 1);
      Tensor weight = random_tensor({M, K}, dt, 2);
      Tensor bias = random_tensor({M}, dt, 3);
      const Tensor* bias_ptr = with_bias == Bias::kGiven ? &bias : nullptr;
      Tensor out = random_tensor({B, T, M}, dt, 4);  // garbage: out is written
      kernels::matmul_forward(out, in, weight, bias_ptr);
      const double tol = dt == DType::f64 ? 1e-13 : 1e-5;
      expect_close(out.to_doubles(), matmul_naive(in, weight, bias_ptr), tol, tol, "matmul out");
    }
  }
}

void matmul_check_backward(Bias with_bias, InputGrad input_grad) {
  Tensor in = random_tensor({B, T, K}, DType::f64, 5);
  Tensor weight = random_tensor({M, K}, DType::f64, 6);
  Tensor bias = random_tensor({M}, DType::f64, 7);
  const bool has_bias = with_bias == Bias::kGiven;
  Tensor out = Tensor::empty({B, T, M}, DType::f64);
  const std::vector<double> w = random_weights(N * M, 8);
  auto loss = [&] {
    kernels::matmul_forward(out, in, weight, has_bias ? &bias : nullptr);
    return weighted_sum(out, w);
  };
  const std::vector<double> fd_in = finite_difference(in, loss);
  const std::vector<double> fd_w = finite_difference(weight, loss);
  const std::vector<double> fd_b = finite_difference(bias, loss);

  Tensor dout = Tensor::from_doubles(w, {B, T, M}, DType::f64);
  Tensor din = random_tensor({B, T, K}, DType::f64, 9);  // garbage: din is written
  const std::vector<double> din_before = din.to_doubles();
  Tensor dweight = Tensor::zeros({M, K}, DType::f64), dbias = Tensor::zeros({M}, DType::f64);
  Tensor* din_ptr = input_grad == InputGrad::kCompute ? &din : nullptr;
  Tensor* dbias_ptr = has_bias ? &dbias : nullptr;
  for (int call = 1; call <= 2; ++call) {
    kernels::matmul_backward(din_ptr, dweight, dbias_ptr, dout, in, weight);
    std::vector<double> w_expected = fd_w, b_expected = fd_b;
    for (double& x : w_expected) x *= call;  // dweight accumulates over calls
    for (double& x : b_expected) x *= call;
    expect_close(dweight.to_doubles(), w_expected, 1e-8, 1e-6, "dweight");
    if (has_bias) expect_close(dbias.to_doubles(), b_expected, 1e-8, 1e-6, "dbias");
    if (input_grad == InputGrad::kCompute) {
      expect_close(din.to_doubles(), fd_in, 1e-8, 1e-6, "din (written, not accumulated)");
    } else {
      EXPECT_EQ(din.to_doubles(), din_before) << "din untouched when skipped";
    }
  }
  if (!has_bias) {
    // Without a bias the loss does not depend on it: its finite difference is 0 (sanity check
    // that the no-bias forward really ignores it).
    expect_close(fd_b, std::vector<double>(M, 0.0), 1e-9, 0, "bias unused");
    EXPECT_EQ(dbias.to_doubles(), std::vector<double>(M, 0.0)) << "dbias untouched";
  }
}

TEST(Matmul, BackwardWithBiasMatchesFiniteDifferences) {
  matmul_check_backward(Bias::kGiven, InputGrad::kCompute);
}

TEST(Matmul, BackwardWithoutBiasMatchesFiniteDifferences) {
  matmul_check_backward(Bias::kNone, InputGrad::kCompute);
}

TEST(Matmul, BackwardWithoutInputGradient) {
  matmul_check_backward(Bias::kGiven, InputGrad::kSkip);
}

TEST(Matmul, Float32BackwardMatchesFloat64) {
  std::vector<double> results[2][3];
  const DType dts[2] = {DType::f64, DType::f32};
  for (int k = 0; k < 2; ++k) {
    Tensor in = random_tensor({B, T, K}, dts[k], 10);
    Tensor weight = random_tensor({M, K}, dts[k], 11);
    Tensor dout = random_tensor({B, T, M}, dts[k], 12);
    Tensor din = Tensor::empty({B, T, K}, dts[k]);
    Tensor dweight = Tensor::zeros({M, K}, dts[k]), dbias = Tensor::zeros({M}, dts[k]);
    kernels::matmul_backward(&din, dweight, &dbias, dout, in, weight);
    results[k][0] = din.to_doubles();
    results[k][1] = dweight.to_doubles();
    results[k][2] = dbias.to_doubles();
  }
  expect_close(results[1][0], results[0][0], 1e-5, 1e-5, "din f32 vs f64");
  expect_close(results[1][1], results[0][1], 1e-5, 1e-5, "dweight f32 vs f64");
  expect_close(results[1][2], results[0][2], 1e-5, 1e-5, "dbias f32 vs f64");
}

// matmul_weight_grad against a triple loop in f64: kWrite ignores the buffer's old values (NaN
// there must not leak: BLAS does not read C at beta 0), kAdd adds to them, no rows writes zeros;
// and in f32 it equals matmul_backward's dweight bit for bit (the same GEMM).
TEST(Matmul, WeightGradWritesOrAddsAsTheTripleLoop) {
  Tensor in = random_tensor({N, K}, DType::f64, 71);
  Tensor dout = random_tensor({N, M}, DType::f64, 72);
  const std::vector<double> x = in.to_doubles(), g = dout.to_doubles();
  std::vector<double> product(M * K, 0.0);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t n = 0; n < N; ++n) product[m * K + k] += g[n * M + m] * x[n * K + k];
    }
  }
  Tensor dw = Tensor::from_doubles(std::vector<double>(M * K, std::nan("")), {M, K}, DType::f64);
  kernels::matmul_weight_grad(dw, dout, in, kernels::Accumulate::kWrite);
  expect_close(dw.to_doubles(), product, 1e-12, 1e-12, "written");
  kernels::matmul_weight_grad(dw, dout, in, kernels::Accumulate::kAdd);
  std::vector<double> twice = product;
  for (double& v : twice) v *= 2;
  expect_close(dw.to_doubles(), twice, 1e-12, 1e-12, "added");

  Tensor no_rows_in = Tensor::empty({0, K}, DType::f64);
  Tensor no_rows_dout = Tensor::empty({0, M}, DType::f64);
  kernels::matmul_weight_grad(dw, no_rows_dout, no_rows_in, kernels::Accumulate::kWrite);
  EXPECT_EQ(dw.to_doubles(), std::vector<double>(M * K, 0.0));

  Tensor in32 = random_tensor({N, K}, DType::f32, 73);
  Tensor dout32 = random_tensor({N, M}, DType::f32, 74);
  Tensor w32 = random_tensor({M, K}, DType::f32, 75);
  Tensor via_backward = Tensor::zeros({M, K}, DType::f32);
  kernels::matmul_backward(nullptr, via_backward, nullptr, dout32, in32, w32);
  Tensor alone = Tensor::zeros({M, K}, DType::f32);
  kernels::matmul_weight_grad(alone, dout32, in32, kernels::Accumulate::kAdd);
  EXPECT_EQ(alone.to_doubles(), via_backward.to_doubles());
}

TEST(MatmulDeathTest, ShapeMismatchAbortsNamingTheShapes) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";  // OpenMP/BLAS threads may exist
  Tensor in = random_tensor({B, T, K + 1}, DType::f64, 16);
  Tensor weight = random_tensor({M, K}, DType::f64, 17);
  Tensor out = Tensor::empty({B, T, M}, DType::f64);
  EXPECT_DEATH(kernels::matmul_forward(out, in, weight, nullptr),
               "matmul_forward: in \\[2, 5, 9\\] does not end in K = 8");
}

}  // namespace
}  // namespace zt
