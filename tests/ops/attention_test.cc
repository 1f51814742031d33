// Tests of the CPU causal self-attention (kernels/cpu/attention.cc): forward against a direct
// triple loop over (query, key, channel) with the causal mask, the saved qkvr/att layouts, backward
// against central finite differences of L = sum(w * out) in f64, dqkv written (not accumulated),
// and f32 against f64.
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

constexpr int64_t B = 2, T = 5, C = 8, NH = 2, HS = C / NH;

struct AttentionNaive {
  std::vector<double> out;  // (B,T,C)
  std::vector<double> att;  // (B,NH,T,T)
};

AttentionNaive attention_naive(const Tensor& qkv_t,
                               kernels::AttnKind kind = kernels::AttnKind::kCausal,
                               const std::vector<int32_t>& key_mask = {}) {
  const std::vector<double> qkv = qkv_t.to_doubles();
  auto at = [&](int64_t b, int64_t t, int64_t which, int64_t h, int64_t i) {
    return static_cast<long double>(qkv[(b * T + t) * 3 * C + which * C + h * HS + i]);
  };
  AttentionNaive r{std::vector<double>(B * T * C), std::vector<double>(B * NH * T * T, 0.0)};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        std::vector<long double> p(T, 0.0L);
        long double denom = 0;
        const int64_t end = kind == kernels::AttnKind::kCausal ? t + 1 : T;
        for (int64_t u = 0; u < end; ++u) {  // keys after the query are masked out (causal)
          if (!key_mask.empty() && key_mask[b * T + u] == 0) continue;  // padding key
          long double score = 0;
          for (int64_t i = 0; i < HS; ++i) score += at(b, t, 0, h, i) * at(b, u, 1, h, i);
          p[u] = std::exp(score / std::sqrt(static_cast<long double>(HS)));
          denom += p[u];
        }
        for (int64_t u = 0; u < T; ++u) {
          p[u] = denom > 0 ? p[u] / denom : 0;
          r.att[((b * NH + h) * T + t) * T + u] = static_cast<double>(p[u]);
        }
        for (int64_t i = 0; i < HS; ++i) {
          long double o = 0;
          for (int64_t u = 0; u < T; ++u) o += p[u] * at(b, u, 2, h, i);
          r.out[(b * T + t) * C + h * HS + i] = static_cast<double>(o);
        }
      }
    }
  }
  return r;
}

TEST(Attention, ForwardMatchesTripleLoop) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor qkv = random_tensor({B, T, 3 * C}, dt, 1, -2.0, 2.0);
    Tensor out = Tensor::empty({B, T, C}, dt);
    Tensor qkvr = Tensor::empty({3, B, NH, T, HS}, dt);
    Tensor att = random_tensor({B, NH, T, T}, dt, 2);  // garbage above the diagonal must be zeroed
    kernels::attention_forward(out, qkvr, att, qkv, static_cast<int>(NH),
                               kernels::AttnKind::kCausal, nullptr);
    AttentionNaive ref = attention_naive(qkv);
    const double tol = dt == DType::f64 ? 1e-13 : 1e-5;
    expect_close(out.to_doubles(), ref.out, tol, tol, "attention out");
    expect_close(att.to_doubles(), ref.att, tol, tol, "attention probabilities");

    // qkvr[s,b,h,t,i] = qkv[b,t,s*C + h*HS + i], bit for bit.
    std::vector<double> src = qkv.to_doubles(), permuted;
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < NH; ++h)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < HS; ++i)
              permuted.push_back(src[(b * T + t) * 3 * C + s * C + h * HS + i]);
    EXPECT_EQ(qkvr.to_doubles(), permuted) << "qkvr layout";
  }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  Tensor qkv = random_tensor({B, T, 3 * C}, DType::f64, 3, -2.0, 2.0);
  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  Tensor qkvr = Tensor::empty({3, B, NH, T, HS}, DType::f64);
  Tensor att = Tensor::empty({B, NH, T, T}, DType::f64);
  const std::vector<double> w = random_weights(B * T * C, 4);
  auto loss = [&] {
    kernels::attention_forward(out, qkvr, att, qkv, static_cast<int>(NH),
                               kernels::AttnKind::kCausal, nullptr);
    return weighted_sum(out, w);
  };
  const std::vector<double> fd = finite_difference(qkv, loss);
  loss();  // qkvr and att of the unperturbed input

  Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
  Tensor dqkv = random_tensor({B, T, 3 * C}, DType::f64, 5);  // garbage: dqkv is written
  kernels::attention_backward(dqkv, dout, qkvr, att, static_cast<int>(NH),
                              kernels::AttnKind::kCausal);
  expect_close(dqkv.to_doubles(), fd, 1e-8, 1e-6, "dqkv");
  kernels::attention_backward(dqkv, dout, qkvr, att, static_cast<int>(NH),
                              kernels::AttnKind::kCausal);
  expect_close(dqkv.to_doubles(), fd, 1e-8, 1e-6, "dqkv after a second backward (not doubled)");
}

// Encoders (BERT): every key, minus the padding keys of each row; the probabilities of masked keys
// are 0, and backward (which reads them from att) needs no mask of its own.
TEST(Attention, BidirectionalWithPaddingMask) {
  const std::vector<int32_t> mask_values = {1, 1, 1, 1, 1, 1, 1, 0, 0, 0};  // row 1: 3 padding keys
  Tensor mask = Tensor::empty({B, T}, DType::i32);
  std::copy(mask_values.begin(), mask_values.end(), mask.data<int32_t>());
  for (const kernels::AttnKind kind :
       {kernels::AttnKind::kBidirectional, kernels::AttnKind::kCausal}) {
    Tensor qkv = random_tensor({B, T, 3 * C}, DType::f64, 11, -2.0, 2.0);
    Tensor out = Tensor::empty({B, T, C}, DType::f64);
    Tensor qkvr = Tensor::empty({3, B, NH, T, HS}, DType::f64);
    Tensor att = random_tensor({B, NH, T, T}, DType::f64, 12);
    kernels::attention_forward(out, qkvr, att, qkv, static_cast<int>(NH), kind, &mask);
    AttentionNaive ref = attention_naive(qkv, kind, mask_values);
    expect_close(out.to_doubles(), ref.out, 1e-13, 1e-13, "masked attention out");
    expect_close(att.to_doubles(), ref.att, 1e-13, 1e-13, "masked attention probabilities");

    const std::vector<double> w = random_weights(B * T * C, 13);
    auto loss = [&] {
      kernels::attention_forward(out, qkvr, att, qkv, static_cast<int>(NH), kind, &mask);
      return weighted_sum(out, w);
    };
    const std::vector<double> fd = finite_difference(qkv, loss);
    loss();
    Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
    Tensor dqkv = random_tensor({B, T, 3 * C}, DType::f64, 14);
    kernels::attention_backward(dqkv, dout, qkvr, att, static_cast<int>(NH), kind);
    expect_close(dqkv.to_doubles(), fd, 1e-8, 1e-6, "masked attention dqkv");
  }
}

TEST(Attention, Float32MatchesFloat64) {
  std::vector<double> results[2][2];  // [dtype][out, dqkv]
  const DType dts[2] = {DType::f64, DType::f32};
  for (int k = 0; k < 2; ++k) {
    const DType dt = dts[k];
    Tensor qkv = random_tensor({B, T, 3 * C}, dt, 6, -2.0, 2.0);
    Tensor dout = random_tensor({B, T, C}, dt, 7);
    Tensor out = Tensor::empty({B, T, C}, dt);
    Tensor qkvr = Tensor::empty({3, B, NH, T, HS}, dt);
    Tensor att = Tensor::empty({B, NH, T, T}, dt);
    Tensor dqkv = Tensor::empty({B, T, 3 * C}, dt);
    kernels::attention_forward(out, qkvr, att, qkv, static_cast<int>(NH),
                               kernels::AttnKind::kCausal, nullptr);
    kernels::attention_backward(dqkv, dout, qkvr, att, static_cast<int>(NH),
                                kernels::AttnKind::kCausal);
    results[k][0] = out.to_doubles();
    results[k][1] = dqkv.to_doubles();
  }
  expect_close(results[1][0], results[0][0], 1e-5, 1e-5, "out f32 vs f64");
  expect_close(results[1][1], results[0][1], 1e-5, 1e-5, "dqkv f32 vs f64");
}

}  // namespace
}  // namespace zt
