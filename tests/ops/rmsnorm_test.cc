// Tests of the CPU RMSNorm (kernels/cpu/rmsnorm.cc): forward against a long-double reference,
// backward against central finite differences of L = sum(w * out) in f64, with and without the
// fused dresidual (also aliasing din), and the write (din) / accumulate (dweight) contract.
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
constexpr float kEps = 1e-6f;  // Llama's rms_norm_eps

struct RmsnormNaive {
  std::vector<double> out, rstd;
};

RmsnormNaive rmsnorm_naive(const Tensor& in, const Tensor& weight, float eps) {
  const std::vector<double> x = in.to_doubles(), w = weight.to_doubles();
  RmsnormNaive r;
  for (int64_t i = 0; i < N; ++i) {
    long double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += static_cast<long double>(x[i * C + c]) * x[i * C + c];
    ms /= C;
    const long double rs = 1.0L / std::sqrt(ms + static_cast<long double>(eps));
    for (int64_t c = 0; c < C; ++c)
      r.out.push_back(static_cast<double>(w[c] * (x[i * C + c] * rs)));
    r.rstd.push_back(static_cast<double>(rs));
  }
  return r;
}

TEST(Rmsnorm, ForwardMatchesNaiveInBothDtypes) {
  for (DType dt : {DType::f64, DType::f32}) {
    SCOPED_TRACE(dtype_name(dt));
    // An offset (no mean is subtracted: it must count in the norm) and one tiny row where eps
    // matters.
    Tensor in = random_tensor({B, T, C}, dt, 1, 0.5, 2.0);
    {
      std::vector<double> v = in.to_doubles();
      for (int64_t c = 0; c < C; ++c) v[c] *= 1e-4;
      in = Tensor::from_doubles(v, {B, T, C}, dt);
    }
    Tensor weight = random_tensor({C}, dt, 2, 0.5, 1.5);
    Tensor out = Tensor::empty({B, T, C}, dt);
    Tensor rstd = Tensor::empty({N}, dt);
    kernels::rmsnorm_forward(out, rstd, in, weight, kEps);
    const RmsnormNaive ref = rmsnorm_naive(in, weight, kEps);
    const double tol = dt == DType::f64 ? 1e-12 : 2e-6;
    expect_close(out.to_doubles(), ref.out, tol, tol, "rmsnorm out");
    expect_close(rstd.to_doubles(), ref.rstd, tol, tol, "rmsnorm rstd");
  }
}

enum class Residual : unsigned char { kNone, kGiven };

void rmsnorm_check_backward(Residual residual) {
  const bool with_residual = residual == Residual::kGiven;
  Tensor in = random_tensor({B, T, C}, DType::f64, 4);
  Tensor weight = random_tensor({C}, DType::f64, 5, 0.5, 1.5);
  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  Tensor rstd = Tensor::empty({N}, DType::f64);
  const std::vector<double> w = random_weights(N * C, 7);
  auto loss = [&] {
    kernels::rmsnorm_forward(out, rstd, in, weight, kEps);
    return weighted_sum(out, w);
  };
  std::vector<double> fd_in = finite_difference(in, loss);
  const std::vector<double> fd_w = finite_difference(weight, loss);
  loss();  // leaves rstd of the unperturbed input

  Tensor dres = random_tensor({B, T, C}, DType::f64, 8);
  if (with_residual) {
    const std::vector<double> r = dres.to_doubles();
    for (size_t i = 0; i < fd_in.size(); ++i) fd_in[i] += r[i];
  }
  Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
  Tensor din = random_tensor({B, T, C}, DType::f64, 9);  // garbage: din is written, not added to
  // A known starting gradient: dweight must end as it plus the new gradient.
  const std::vector<double> dw0(C, 0.25);
  Tensor dweight = Tensor::from_doubles(dw0, {C}, DType::f64);
  const Tensor* dres_ptr = with_residual ? &dres : nullptr;
  kernels::rmsnorm_backward(din, dweight, dout, in, weight, rstd, dres_ptr);
  std::vector<double> w1 = fd_w;
  for (int64_t c = 0; c < C; ++c) w1[c] += dw0[c];
  expect_close(din.to_doubles(), fd_in, 1e-8, 1e-6, "din");
  expect_close(dweight.to_doubles(), w1, 1e-8, 1e-6, "dweight (accumulated onto 0.25)");

  // Second call: dweight grows by the gradient again, din is the same (overwritten).
  kernels::rmsnorm_backward(din, dweight, dout, in, weight, rstd, dres_ptr);
  for (int64_t c = 0; c < C; ++c) w1[c] += fd_w[c];
  expect_close(din.to_doubles(), fd_in, 1e-8, 1e-6, "din after two backwards");
  expect_close(dweight.to_doubles(), w1, 1e-8, 1e-6, "dweight after two backwards");

  // din aliasing the residual-stream gradient (updated in place), or dout.
  Tensor dw = Tensor::zeros({C}, DType::f64);
  if (with_residual) {
    Tensor stream = dres.clone();
    kernels::rmsnorm_backward(stream, dw, dout, in, weight, rstd, &stream);
    expect_close(stream.to_doubles(), fd_in, 1e-8, 1e-6, "din aliasing dresidual");
  } else {
    Tensor g = dout.clone();
    kernels::rmsnorm_backward(g, dw, g, in, weight, rstd, nullptr);
    expect_close(g.to_doubles(), fd_in, 1e-8, 1e-6, "din aliasing dout");
    expect_close(dw.to_doubles(), fd_w, 1e-8, 1e-6, "dweight with din aliasing dout");
  }
}

TEST(Rmsnorm, BackwardMatchesFiniteDifferences) {
  rmsnorm_check_backward(Residual::kNone);
}

TEST(Rmsnorm, BackwardWithResidualMatchesFiniteDifferences) {
  rmsnorm_check_backward(Residual::kGiven);
}

TEST(Rmsnorm, Float32BackwardMatchesFloat64) {
  Tensor grads[2][2];  // [dtype][din, dweight]
  const DType dts[2] = {DType::f64, DType::f32};
  for (int k = 0; k < 2; ++k) {
    const DType dt = dts[k];
    Tensor in = random_tensor({B, T, C}, dt, 10);
    Tensor weight = random_tensor({C}, dt, 11, 0.5, 1.5);
    Tensor dout = random_tensor({B, T, C}, dt, 13);
    Tensor dres = random_tensor({B, T, C}, dt, 14);
    Tensor out = Tensor::empty({B, T, C}, dt);
    Tensor rstd = Tensor::empty({N}, dt);
    kernels::rmsnorm_forward(out, rstd, in, weight, kEps);
    grads[k][0] = Tensor::empty({B, T, C}, dt);
    grads[k][1] = Tensor::zeros({C}, dt);
    kernels::rmsnorm_backward(grads[k][0], grads[k][1], dout, in, weight, rstd, &dres);
  }
  expect_close(grads[1][0].to_doubles(), grads[0][0].to_doubles(), 1e-5, 1e-4, "din");
  expect_close(grads[1][1].to_doubles(), grads[0][1].to_doubles(), 1e-5, 1e-4, "dweight");
}

}  // namespace
}  // namespace zt
