// Tests of the CPU reference of fused attention, causal and bidirectional
// (kernels/cpu/flash_attention.cc), against
// the unfused reference (kernels/cpu/attention.cc, itself checked against finite differences in
// attention_test.cc): the same out and dqkv in f64, and lse equal to the log of the softmax
// normaliser computed here from the unfused probabilities and scores. Also against central finite
// differences directly, so the fused backward does not lean on the unfused one alone.
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

void check_against_unfused(int64_t B, int64_t T, int NH, int64_t HS, uint64_t seed,
                           kernels::AttnKind kind = kernels::AttnKind::kCausal) {
  const int64_t C = NH * HS;
  Tensor qkv = random_tensor({B, T, 3 * C}, DType::f64, seed, -2.0, 2.0);
  Tensor dout = random_tensor({B, T, C}, DType::f64, seed + 1);

  Tensor out_ref = Tensor::empty({B, T, C}, DType::f64);
  Tensor qkvr = Tensor::empty({3, B, NH, T, HS}, DType::f64);
  Tensor att = Tensor::empty({B, NH, T, T}, DType::f64);
  Tensor dqkv_ref = Tensor::empty({B, T, 3 * C}, DType::f64);
  kernels::attention_forward(out_ref, qkvr, att, qkv, NH, kind, nullptr);
  kernels::attention_backward(dqkv_ref, dout, qkvr, att, NH, kind);

  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  Tensor lse = Tensor::empty({B, NH, T}, DType::f32);
  Tensor dqkv = random_tensor({B, T, 3 * C}, DType::f64, seed + 2);  // must be overwritten
  kernels::flash_attention_forward(out, lse, qkv, NH, kind);
  kernels::flash_attention_backward(dqkv, dout, qkv, out, lse, NH, kind);
  expect_close(out.to_doubles(), out_ref.to_doubles(), 1e-12, 1e-10, "out");
  expect_close(dqkv.to_doubles(), dqkv_ref.to_doubles(), 1e-6, 1e-5, "dqkv (lse is stored in f32)");

  // lse[t] = s[t, 0] - log att[t, 0], since att[t, 0] = exp(s[t, 0] - lse[t]) and key 0 is never
  // masked; s[t, 0] = q_t . k_0 / sqrt(HS) from qkv directly.
  const std::vector<double> x = qkv.to_doubles(), a = att.to_doubles(), l = lse.to_doubles();
  std::vector<double> expected(l.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        double s = 0;
        for (int64_t i = 0; i < HS; ++i) {
          s += x[(b * T + t) * 3 * C + h * HS + i] * x[(b * T) * 3 * C + C + h * HS + i];
        }
        s /= std::sqrt(static_cast<double>(HS));
        expected[(b * NH + h) * T + t] = s - std::log(a[((b * NH + h) * T + t) * T]);
      }
    }
  }
  expect_close(l, expected, 1e-6, 1e-6, "lse (f32)");
}

TEST(FlashAttentionCpu, MatchesUnfusedReference) {
  check_against_unfused(2, 7, 2, 4, 11);
  check_against_unfused(1, 1, 3, 5, 12);  // one token attends only to itself
  check_against_unfused(2, 33, 2, 8, 13);
}

TEST(FlashAttentionCpu, BidirectionalMatchesUnfusedReference) {
  check_against_unfused(2, 7, 2, 4, 14, kernels::AttnKind::kBidirectional);
  check_against_unfused(1, 1, 3, 5, 15, kernels::AttnKind::kBidirectional);
  check_against_unfused(2, 33, 2, 8, 16, kernels::AttnKind::kBidirectional);
}

void check_finite_differences(kernels::AttnKind kind) {
  constexpr int64_t B = 1, T = 6, NH = 2, HS = 3, C = NH * HS;
  Tensor qkv = random_tensor({B, T, 3 * C}, DType::f64, 21);
  const std::vector<double> w = random_weights(B * T * C, 22);
  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  Tensor lse = Tensor::empty({B, NH, T}, DType::f32);
  auto loss = [&] {
    kernels::flash_attention_forward(out, lse, qkv, NH, kind);
    return weighted_sum(out, w);
  };
  const std::vector<double> fd = finite_difference(qkv, loss);
  loss();
  // lse in f32 enters backward's recomputed probabilities: tolerance of f32 relative rounding.
  Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
  Tensor dqkv = Tensor::empty({B, T, 3 * C}, DType::f64);
  kernels::flash_attention_backward(dqkv, dout, qkv, out, lse, NH, kind);
  expect_close(dqkv.to_doubles(), fd, 1e-6, 1e-5, "dqkv vs finite differences");
}

TEST(FlashAttentionCpu, BackwardMatchesFiniteDifferences) {
  check_finite_differences(kernels::AttnKind::kCausal);
}

TEST(FlashAttentionCpu, BidirectionalBackwardMatchesFiniteDifferences) {
  check_finite_differences(kernels::AttnKind::kBidirectional);
}

TEST(FlashAttentionCpu, SupportedShapes) {
  EXPECT_TRUE(kernels::flash_attention_supported(Device::cpu(), DType::f32, 10));
  EXPECT_FALSE(kernels::flash_attention_supported(Device::cpu(), DType::bf16, 64));
  EXPECT_FALSE(kernels::flash_attention_supported(Device::cuda(0), DType::f32, 64));
  EXPECT_FALSE(kernels::flash_attention_supported(Device::cuda(0), DType::bf16, 96));
}

}  // namespace
}  // namespace zt
