// Tests of the CPU layernorm (kernels/cpu/layernorm.cc): forward against a long-double reference
// (eps 1e-5, biased variance), backward against central finite differences of L = sum(w * out)
// in f64, with and without the fused dresidual, and the write/accumulate contract.
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

constexpr int64_t B = 2, T = 5, C = 8, N = B * T;

struct LayernormNaive {
  std::vector<double> out, mean, rstd;
};

LayernormNaive layernorm_naive(const Tensor& in, const Tensor& weight, const Tensor& bias,
                               long double eps = static_cast<long double>(1e-5f)) {
  std::vector<double> x = in.to_doubles(), w = weight.to_doubles(), b = bias.to_doubles();
  LayernormNaive r;
  for (int64_t i = 0; i < N; ++i) {
    long double m = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[i * C + c] - m) * (x[i * C + c] - m);
    var /= C;  // biased, as torch.nn.LayerNorm
    const long double rs = 1.0L / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) {
      r.out.push_back(static_cast<double>((x[i * C + c] - m) * rs * w[c] + b[c]));
    }
    r.mean.push_back(static_cast<double>(m));
    r.rstd.push_back(static_cast<double>(rs));
  }
  return r;
}

TEST(Layernorm, ForwardMatchesNaiveInBothDtypes) {
  for (DType dt : {DType::f64, DType::f32}) {
    // An offset and a small spread make the variance sensitive to how it is computed.
    Tensor in = random_tensor({B, T, C}, dt, 1, 2.0, 3.0);
    Tensor weight = random_tensor({C}, dt, 2, 0.5, 1.5);
    Tensor bias = random_tensor({C}, dt, 3);
    Tensor out = Tensor::empty({B, T, C}, dt);
    Tensor mean = Tensor::empty({N}, dt), rstd = Tensor::empty({N}, dt);
    kernels::layernorm_forward(out, mean, rstd, in, weight, bias, 1e-5f);
    LayernormNaive ref = layernorm_naive(in, weight, bias);
    const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
    expect_close(out.to_doubles(), ref.out, tol, tol, "layernorm out");
    expect_close(mean.to_doubles(), ref.mean, tol, tol, "layernorm mean");
    expect_close(rstd.to_doubles(), ref.rstd, tol, tol, "layernorm rstd");
  }
}

// BERT's eps (1e-12) against GPT-2's (1e-5) on rows of tiny variance, where the two differ a lot:
// the kernel must use the eps it is given.
TEST(Layernorm, UsesTheGivenEps) {
  Tensor in = random_tensor({B, T, C}, DType::f64, 21, 1.0, 1.0 + 1e-4);
  Tensor weight = random_tensor({C}, DType::f64, 22, 0.5, 1.5);
  Tensor bias = random_tensor({C}, DType::f64, 23);
  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  Tensor mean = Tensor::empty({N}, DType::f64), rstd = Tensor::empty({N}, DType::f64);
  for (const float eps : {1e-12f, 1e-5f}) {
    kernels::layernorm_forward(out, mean, rstd, in, weight, bias, eps);
    LayernormNaive ref = layernorm_naive(in, weight, bias, static_cast<long double>(eps));
    expect_close(rstd.to_doubles(), ref.rstd, 1e-9, 1e-9, "rstd with the given eps");
    expect_close(out.to_doubles(), ref.out, 1e-9, 1e-9, "out with the given eps");
  }
}

// Runs the f64 forward + finite differences and the analytic backward; checks every gradient.
// With a residual gradient, din must equal the finite-difference gradient plus it.
enum class Residual { kNone, kGiven };

void layernorm_check_backward(Residual residual) {
  const bool with_residual = residual == Residual::kGiven;
  Tensor in = random_tensor({B, T, C}, DType::f64, 4);
  Tensor weight = random_tensor({C}, DType::f64, 5, 0.5, 1.5);
  Tensor bias = random_tensor({C}, DType::f64, 6);
  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  Tensor mean = Tensor::empty({N}, DType::f64), rstd = Tensor::empty({N}, DType::f64);
  const std::vector<double> w = random_weights(N * C, 7);
  auto loss = [&] {
    kernels::layernorm_forward(out, mean, rstd, in, weight, bias, 1e-5f);
    return weighted_sum(out, w);
  };
  std::vector<double> fd_in = finite_difference(in, loss);
  const std::vector<double> fd_w = finite_difference(weight, loss);
  const std::vector<double> fd_b = finite_difference(bias, loss);
  loss();  // leaves mean/rstd of the unperturbed input

  Tensor dres = random_tensor({B, T, C}, DType::f64, 8);
  if (with_residual) {
    std::vector<double> r = dres.to_doubles();
    for (size_t i = 0; i < fd_in.size(); ++i) fd_in[i] += r[i];
  }
  Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
  Tensor din = random_tensor({B, T, C}, DType::f64, 9);  // garbage: din is written, not added to
  Tensor dweight = Tensor::zeros({C}, DType::f64), dbias = Tensor::zeros({C}, DType::f64);
  const Tensor* dres_ptr = with_residual ? &dres : nullptr;
  kernels::layernorm_backward(din, dweight, dbias, dout, in, weight, mean, rstd, dres_ptr);
  expect_close(din.to_doubles(), fd_in, 1e-8, 1e-6, "din");
  expect_close(dweight.to_doubles(), fd_w, 1e-8, 1e-6, "dweight");
  expect_close(dbias.to_doubles(), fd_b, 1e-8, 1e-6, "dbias");

  // Second call: parameter gradients double, din is the same (overwritten, not accumulated).
  kernels::layernorm_backward(din, dweight, dbias, dout, in, weight, mean, rstd, dres_ptr);
  std::vector<double> w2 = fd_w, b2 = fd_b;
  for (double& x : w2) x *= 2;
  for (double& x : b2) x *= 2;
  expect_close(din.to_doubles(), fd_in, 1e-8, 1e-6, "din after two backwards");
  expect_close(dweight.to_doubles(), w2, 1e-8, 1e-6, "dweight after two backwards");
  expect_close(dbias.to_doubles(), b2, 1e-8, 1e-6, "dbias after two backwards");

  if (with_residual) {
    // The residual stream's gradient updated in place (din and dresidual one buffer), as a
    // transformer block uses it.
    Tensor stream = dres.clone();
    Tensor dw = Tensor::zeros({C}, DType::f64), db = Tensor::zeros({C}, DType::f64);
    kernels::layernorm_backward(stream, dw, db, dout, in, weight, mean, rstd, &stream);
    expect_close(stream.to_doubles(), fd_in, 1e-8, 1e-6, "din aliasing dresidual");
  }
}

TEST(Layernorm, BackwardMatchesFiniteDifferences) {
  layernorm_check_backward(Residual::kNone);
}

TEST(Layernorm, BackwardWithResidualMatchesFiniteDifferences) {
  layernorm_check_backward(Residual::kGiven);
}

TEST(Layernorm, Float32BackwardMatchesFloat64) {
  Tensor grads[2][3];  // [dtype][din, dweight, dbias]
  const DType dts[2] = {DType::f64, DType::f32};
  for (int k = 0; k < 2; ++k) {
    const DType dt = dts[k];
    Tensor in = random_tensor({B, T, C}, dt, 10);
    Tensor weight = random_tensor({C}, dt, 11, 0.5, 1.5);
    Tensor bias = random_tensor({C}, dt, 12);
    Tensor dout = random_tensor({B, T, C}, dt, 13);
    Tensor dres = random_tensor({B, T, C}, dt, 14);
    Tensor out = Tensor::empty({B, T, C}, dt);
    Tensor mean = Tensor::empty({N}, dt), rstd = Tensor::empty({N}, dt);
    kernels::layernorm_forward(out, mean, rstd, in, weight, bias, 1e-5f);
    grads[k][0] = Tensor::empty({B, T, C}, dt);
    grads[k][1] = Tensor::zeros({C}, dt);
    grads[k][2] = Tensor::zeros({C}, dt);
    kernels::layernorm_backward(grads[k][0], grads[k][1], grads[k][2], dout, in, weight, mean, rstd,
                                &dres);
  }
  const char* names[3] = {"din", "dweight", "dbias"};
  for (int j = 0; j < 3; ++j) {
    expect_close(grads[1][j].to_doubles(), grads[0][j].to_doubles(), 1e-5, 1e-4, names[j]);
  }
}

}  // namespace
}  // namespace zt
