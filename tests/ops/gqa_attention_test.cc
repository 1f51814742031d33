// Tests of the CPU in-place rotary of a fused q/k/v projection (rotary_qk_*, kernels/cpu/
// qkv_expand.cc) and of grouped-query attention (gqa_attention_*, kernels/cpu/flash_attention.cc):
//  - rotary_qk_forward against the rotate-half formula written out in long double (q and k
//    rotated at a position offset, v untouched);
//  - rotary_qk_backward against central finite differences of L = sum(w * rotated) in f64;
//  - gqa_attention_forward against the unfused attention (kernels/cpu/attention.cc) of the heads
//    repeated by hand, causal and bidirectional, for grouped (NH 4, KV 2), multi-query (KV 1)
//    and multi-head (KV = NH) heads;
//  - gqa_attention_backward against central finite differences of L = sum(w * out).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/rotary_util.h"
#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using kernels::AttnKind;
using testing::expect_close;
using testing::finite_difference;
using testing::random_tensor;
using testing::random_weights;
using testing::rotary_tables;
using testing::rotate_naive;
using testing::weighted_sum;

constexpr int64_t B = 2, T = 4;
constexpr int NH = 4;
constexpr int64_t kPosOffset = 3;

TEST(RotaryQk, ForwardRotatesQAndKInPlaceAsTheFormula) {
  for (const int KV : {2, 1, 4}) {
    for (const DType dt : {DType::f64, DType::f32}) {
      SCOPED_TRACE(::testing::Message() << "KV " << KV << " " << dtype_name(dt));
      const int64_t HS = 6, W = (NH + 2 * KV) * HS;
      const testing::RotaryTables rt = rotary_tables(kPosOffset + T, HS);
      Tensor qkv = random_tensor({B, T, W}, dt, 11);
      const std::vector<double> x = qkv.to_doubles();
      kernels::rotary_qk_forward(qkv, NH, KV, rt.cos, rt.sin, kPosOffset);
      const std::vector<double> cs = rt.cos.to_doubles(), sn = rt.sin.to_doubles();
      std::vector<double> expected = x;
      for (int64_t bt = 0; bt < B * T; ++bt) {
        for (int64_t h = 0; h < NH + KV; ++h) {  // q and k heads; v stays
          std::vector<long double> head(static_cast<size_t>(HS));
          for (int64_t i = 0; i < HS; ++i) head[i] = x[bt * W + h * HS + i];
          head = rotate_naive(head, cs, sn, kPosOffset + bt % T);
          for (int64_t i = 0; i < HS; ++i) expected[bt * W + h * HS + i] = double(head[i]);
        }
      }
      const double tol = dt == DType::f64 ? 1e-14 : 1e-6;
      expect_close(qkv.to_doubles(), expected, tol, tol, "rotated q/k/v");
    }
  }
}

TEST(RotaryQk, BackwardMatchesFiniteDifferences) {
  const int KV = 2;
  const int64_t HS = 8, W = (NH + 2 * KV) * HS;
  const testing::RotaryTables rt = rotary_tables(kPosOffset + T, HS);
  const Tensor in = random_tensor({B, T, W}, DType::f64, 12);
  const std::vector<double> w = random_weights(B * T * W, 13);
  Tensor x = in.clone();
  auto loss = [&] {
    Tensor y = x.clone();
    kernels::rotary_qk_forward(y, NH, KV, rt.cos, rt.sin, kPosOffset);
    return weighted_sum(y, w);
  };
  const std::vector<double> fd = finite_difference(x, loss);
  Tensor g = Tensor::from_doubles(w, {B, T, W}, DType::f64);
  kernels::rotary_qk_backward(g, NH, KV, rt.cos, rt.sin, kPosOffset);
  expect_close(g.to_doubles(), fd, 1e-8, 1e-6, "dqkv");
}

// qkv (B,T,(NH+2KV)HS) -> (B,T,3 NH HS) with each kv head repeated for its group, by hand.
Tensor repeat_heads(const Tensor& qkv, int KV, int64_t HS) {
  const int64_t W = (NH + 2 * KV) * HS, C = NH * HS;
  const std::vector<double> x = qkv.to_doubles();
  std::vector<double> out(static_cast<size_t>(B * T * 3 * C));
  for (int64_t bt = 0; bt < B * T; ++bt) {
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t j = h / (NH / KV);
      for (int64_t i = 0; i < HS; ++i) {
        out[bt * 3 * C + h * HS + i] = x[bt * W + h * HS + i];
        out[bt * 3 * C + C + h * HS + i] = x[bt * W + (NH + j) * HS + i];
        out[bt * 3 * C + 2 * C + h * HS + i] = x[bt * W + (NH + KV + j) * HS + i];
      }
    }
  }
  return Tensor::from_doubles(out, {B, T, 3 * C}, DType::f64);
}

TEST(GqaAttentionCpu, ForwardMatchesUnfusedAttentionOfRepeatedHeads) {
  for (const AttnKind kind : {AttnKind::kCausal, AttnKind::kBidirectional}) {
    for (const int KV : {2, 1, 4}) {
      SCOPED_TRACE(::testing::Message()
                   << "KV " << KV << (kind == AttnKind::kCausal ? " causal" : " bidirectional"));
      const int64_t HS = 4, W = (NH + 2 * KV) * HS, C = NH * HS;
      Tensor qkv = random_tensor({B, T, W}, DType::f64, 21, -2.0, 2.0);
      Tensor out = Tensor::empty({B, T, C}, DType::f64);
      Tensor lse = Tensor::empty({B, NH, T}, DType::f32);
      kernels::gqa_attention_forward(out, lse, qkv, NH, KV, kind);
      Tensor out_ref = Tensor::empty({B, T, C}, DType::f64);
      Tensor qkvr = Tensor::empty({3, B, NH, T, HS}, DType::f64);
      Tensor att = Tensor::empty({B, NH, T, T}, DType::f64);
      kernels::attention_forward(out_ref, qkvr, att, repeat_heads(qkv, KV, HS), NH, kind, nullptr);
      expect_close(out.to_doubles(), out_ref.to_doubles(), 1e-12, 1e-10, "out");
    }
  }
}

TEST(GqaAttentionCpu, BackwardMatchesFiniteDifferences) {
  for (const AttnKind kind : {AttnKind::kCausal, AttnKind::kBidirectional}) {
    SCOPED_TRACE(kind == AttnKind::kCausal ? "causal" : "bidirectional");
    const int KV = 2;
    const int64_t HS = 4, W = (NH + 2 * KV) * HS, C = NH * HS;
    Tensor qkv = random_tensor({B, T, W}, DType::f64, 22, -1.0, 1.0);
    Tensor out = Tensor::empty({B, T, C}, DType::f64);
    Tensor lse = Tensor::empty({B, NH, T}, DType::f32);
    const std::vector<double> w = random_weights(B * T * C, 23);
    auto loss = [&] {
      kernels::gqa_attention_forward(out, lse, qkv, NH, KV, kind);
      return weighted_sum(out, w);
    };
    const std::vector<double> fd = finite_difference(qkv, loss);
    kernels::gqa_attention_forward(out, lse, qkv, NH, KV, kind);
    Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
    Tensor dqkv = random_tensor({B, T, W}, DType::f64, 24);  // garbage: written
    kernels::gqa_attention_backward(dqkv, dout, qkv, out, lse, NH, KV, kind);
    // lse is kept in f32: the backward's probabilities carry its rounding.
    expect_close(dqkv.to_doubles(), fd, 1e-6, 1e-5, "dqkv");
  }
}

}  // namespace
}  // namespace zt
