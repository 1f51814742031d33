// Tests of the CPU ops at sizes above their OpenMP threshold (kParallelMinWork in kernels/cpu/),
// so the multi-threaded paths run: forwards against naive loops, backwards against naive
// gradient formulas or a directional finite difference (one pair of forwards along a random
// direction, cheap at any size). The small-size tests beside this file check every element by
// finite differences on the single-threaded paths.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using testing::expect_close;
using testing::random_ints;
using testing::random_tensor;
using testing::random_weights;
using testing::weighted_sum;

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  long double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<long double>(a[i]) * b[i];
  return static_cast<double>(s);
}

// (f(x + h d) - f(x - h d)) / 2h for a random direction d, and d itself; x is restored.
struct Directional {
  double derivative;
  std::vector<double> direction;
};
Directional directional_difference(Tensor& x, const std::function<double()>& f, uint64_t seed) {
  const double h = 1e-6;
  std::vector<double> d = random_weights(x.numel(), seed);
  double* p = x.data<double>();
  std::vector<double> orig(p, p + x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = orig[i] + h * d[i];
  const double fp = f();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = orig[i] - h * d[i];
  const double fm = f();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = orig[i];
  return {(fp - fm) / (2 * h), d};
}

void expect_directional(const Tensor& grad, Tensor& x, const std::function<double()>& f,
                        uint64_t seed, const char* what) {
  Directional dd = directional_difference(x, f, seed);
  const double analytic = dot(grad.to_doubles(), dd.direction);
  EXPECT_NEAR(analytic, dd.derivative, 1e-6 * (1.0 + std::abs(dd.derivative))) << what;
}

TEST(ParallelOps, EmbeddingMatchesNaive) {
  constexpr int64_t B = 4, T = 64, C = 128, V = 50;
  Tensor tokens = random_ints({B, T}, static_cast<int32_t>(V), 1);
  Tensor wte = random_tensor({V, C}, DType::f64, 2), wpe = random_tensor({T, C}, DType::f64, 3);
  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  kernels::embedding_forward(out, tokens, wte, wpe);
  Tensor dout = random_tensor({B, T, C}, DType::f64, 4);
  Tensor dwte = Tensor::zeros({V, C}, DType::f64), dwpe = Tensor::zeros({T, C}, DType::f64);
  kernels::embedding_backward(dwte, dwpe, dout, tokens);

  std::vector<double> te = wte.to_doubles(), pe = wpe.to_doubles(), g = dout.to_doubles();
  std::vector<double> out_ref(B * T * C), dwte_ref(V * C, 0.0), dwpe_ref(T * C, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = tokens.data<int32_t>()[b * T + t];
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = (b * T + t) * C + c;
        out_ref[i] = te[id * C + c] + pe[t * C + c];
        dwte_ref[id * C + c] += g[i];
        dwpe_ref[t * C + c] += g[i];
      }
    }
  }
  expect_close(out.to_doubles(), out_ref, 1e-15, 1e-15, "out");
  expect_close(dwte.to_doubles(), dwte_ref, 1e-12, 1e-12, "dwte");
  expect_close(dwpe.to_doubles(), dwpe_ref, 1e-12, 1e-12, "dwpe");
}

TEST(ParallelOps, LayernormMatchesNaiveAndDirectionalDifferences) {
  constexpr int64_t N = 256, C = 128;
  Tensor in = random_tensor({N, C}, DType::f64, 5, -2.0, 3.0);
  Tensor weight = random_tensor({C}, DType::f64, 6, 0.5, 1.5);
  Tensor bias = random_tensor({C}, DType::f64, 7);
  Tensor out = Tensor::empty({N, C}, DType::f64);
  Tensor mean = Tensor::empty({N}, DType::f64), rstd = Tensor::empty({N}, DType::f64);
  kernels::layernorm_forward(out, mean, rstd, in, weight, bias, 1e-5f);
  std::vector<double> x = in.to_doubles(), w = weight.to_doubles(), b = bias.to_doubles(), ref;
  for (int64_t i = 0; i < N; ++i) {
    long double m = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) var += (x[i * C + c] - m) * (x[i * C + c] - m);
    const long double r = 1.0L / std::sqrt(var / C + 1e-5L);
    for (int64_t c = 0; c < C; ++c) {
      ref.push_back(static_cast<double>((x[i * C + c] - m) * r * w[c] + b[c]));
    }
  }
  expect_close(out.to_doubles(), ref, 1e-12, 1e-12, "out");

  const std::vector<double> wts = random_weights(N * C, 8);
  auto loss = [&] {
    kernels::layernorm_forward(out, mean, rstd, in, weight, bias, 1e-5f);
    return weighted_sum(out, wts);
  };
  loss();
  Tensor dout = Tensor::from_doubles(wts, {N, C}, DType::f64);
  Tensor din = Tensor::empty({N, C}, DType::f64);
  Tensor dweight = Tensor::zeros({C}, DType::f64), dbias = Tensor::zeros({C}, DType::f64);
  kernels::layernorm_backward(din, dweight, dbias, dout, in, weight, mean, rstd, nullptr);
  expect_directional(din, in, loss, 9, "din");
  expect_directional(dweight, weight, loss, 10, "dweight");
  expect_directional(dbias, bias, loss, 11, "dbias");
}

TEST(ParallelOps, MatmulMatchesNaive) {
  constexpr int64_t N = 128, K = 64, M = 256;
  Tensor in = random_tensor({N, K}, DType::f64, 12), weight = random_tensor({M, K}, DType::f64, 13);
  Tensor bias = random_tensor({M}, DType::f64, 14), dout = random_tensor({N, M}, DType::f64, 15);
  Tensor out = Tensor::empty({N, M}, DType::f64), din = Tensor::empty({N, K}, DType::f64);
  Tensor dweight = Tensor::zeros({M, K}, DType::f64), dbias = Tensor::zeros({M}, DType::f64);
  kernels::matmul_forward(out, in, weight, &bias);
  kernels::matmul_backward(&din, dweight, &dbias, dout, in, weight);
  std::vector<double> x = in.to_doubles(), w = weight.to_doubles(), bv = bias.to_doubles();
  std::vector<double> g = dout.to_doubles();
  std::vector<double> out_ref(N * M), din_ref(N * K, 0.0), dw_ref(M * K, 0.0), db_ref(M, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < M; ++j) {
      double s = bv[j];
      for (int64_t k = 0; k < K; ++k) {
        s += x[i * K + k] * w[j * K + k];
        din_ref[i * K + k] += g[i * M + j] * w[j * K + k];
        dw_ref[j * K + k] += g[i * M + j] * x[i * K + k];
      }
      out_ref[i * M + j] = s;
      db_ref[j] += g[i * M + j];
    }
  }
  expect_close(out.to_doubles(), out_ref, 1e-12, 1e-12, "out");
  expect_close(din.to_doubles(), din_ref, 1e-12, 1e-12, "din");
  expect_close(dweight.to_doubles(), dw_ref, 1e-12, 1e-12, "dweight");
  expect_close(dbias.to_doubles(), db_ref, 1e-12, 1e-12, "dbias");
}

TEST(ParallelOps, GeluMatchesElementwiseDifferences) {
  constexpr int64_t n = 40000;
  Tensor in = random_tensor({n}, DType::f64, 16, -5.0, 5.0);
  Tensor dout = random_tensor({n}, DType::f64, 17);
  Tensor din = Tensor::empty({n}, DType::f64);
  kernels::gelu_backward(din, dout, in);
  // gelu is elementwise, so one pair of forwards gives every element's central difference.
  const double h = 1e-6;
  std::vector<double> x = in.to_doubles(), xp = x, xm = x;
  for (int64_t i = 0; i < n; ++i) {
    xp[i] += h;
    xm[i] -= h;
  }
  Tensor inp = Tensor::from_doubles(xp, {n}, DType::f64);
  Tensor inm = Tensor::from_doubles(xm, {n}, DType::f64);
  Tensor outp = Tensor::empty({n}, DType::f64), outm = Tensor::empty({n}, DType::f64);
  kernels::gelu_forward(outp, inp);
  kernels::gelu_forward(outm, inm);
  std::vector<double> fp = outp.to_doubles(), fm = outm.to_doubles(), g = dout.to_doubles(), ref;
  for (int64_t i = 0; i < n; ++i) ref.push_back(g[i] * (fp[i] - fm[i]) / (2 * h));
  expect_close(din.to_doubles(), ref, 1e-8, 1e-6, "din");
}

TEST(ParallelOps, AttentionMatchesNaiveAndDirectionalDifferences) {
  constexpr int64_t B = 4, T = 64, C = 64, NH = 4, HS = C / NH;
  Tensor qkv = random_tensor({B, T, 3 * C}, DType::f64, 18, -2.0, 2.0);
  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  Tensor qkvr = Tensor::empty({3, B, NH, T, HS}, DType::f64);
  Tensor att = Tensor::empty({B, NH, T, T}, DType::f64);
  kernels::attention_forward(out, qkvr, att, qkv, static_cast<int>(NH), kernels::AttnKind::kCausal,
                             nullptr);
  std::vector<double> q = qkv.to_doubles(), ref(B * T * C);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        std::vector<long double> p(t + 1);
        long double sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          long double s = 0;
          for (int64_t i = 0; i < HS; ++i) {
            s += q[(b * T + t) * 3 * C + h * HS + i] * q[(b * T + u) * 3 * C + C + h * HS + i];
          }
          p[u] = std::exp(s / std::sqrt(static_cast<long double>(HS)));
          sum += p[u];
        }
        for (int64_t i = 0; i < HS; ++i) {
          long double o = 0;
          for (int64_t u = 0; u <= t; ++u)
            o += p[u] / sum * q[(b * T + u) * 3 * C + 2 * C + h * HS + i];
          ref[(b * T + t) * C + h * HS + i] = static_cast<double>(o);
        }
      }
    }
  }
  expect_close(out.to_doubles(), ref, 1e-12, 1e-12, "out");

  const std::vector<double> w = random_weights(B * T * C, 19);
  auto loss = [&] {
    kernels::attention_forward(out, qkvr, att, qkv, static_cast<int>(NH),
                               kernels::AttnKind::kCausal, nullptr);
    return weighted_sum(out, w);
  };
  loss();
  Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
  Tensor dqkv = Tensor::empty({B, T, 3 * C}, DType::f64);
  kernels::attention_backward(dqkv, dout, qkvr, att, static_cast<int>(NH),
                              kernels::AttnKind::kCausal);
  expect_directional(dqkv, qkv, loss, 20, "dqkv");
}

TEST(ParallelOps, CrossEntropyFusedMatchesSoftmaxFormula) {
  constexpr int64_t N = 512, V = 100, Vp = 128;
  const float dloss = 1.0f / N;
  Tensor logits = random_tensor({N, Vp}, DType::f64, 21, -4.0, 4.0);
  Tensor targets = random_ints({N}, static_cast<int32_t>(V), 22);
  const std::vector<double> x = logits.to_doubles();
  Tensor losses = Tensor::empty({N}, DType::f64);
  kernels::crossentropy_fused(losses, logits, targets, V, dloss);
  std::vector<double> loss_ref, grad_ref(N * Vp, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    long double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(static_cast<long double>(x[i * Vp + j]));
    const int32_t y = targets.data<int32_t>()[i];
    loss_ref.push_back(static_cast<double>(std::log(z) - x[i * Vp + y]));
    for (int64_t j = 0; j < V; ++j) {
      const long double prob = std::exp(static_cast<long double>(x[i * Vp + j])) / z;
      grad_ref[i * Vp + j] = static_cast<double>(dloss * (prob - (j == y ? 1.0L : 0.0L)));
    }
  }
  expect_close(losses.to_doubles(), loss_ref, 1e-13, 1e-13, "losses");
  expect_close(logits.to_doubles(), grad_ref, 1e-15, 1e-12, "dlogits (0 in padding)");
}

}  // namespace
}  // namespace zt
