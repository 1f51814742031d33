// Tests of the CPU rotary + grouped-query expansion (kernels/cpu/qkv_expand.cc): the forward
// against the layout and the rotate-half formula written out in long double, the backward against
// central finite differences of L = sum(w * out) in f64 (din written), for grouped (NH 4, KV 2),
// multi-query (KV 1) and plain multi-head (KV = NH) heads, with and without rotary, at a position
// offset.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/rotary_util.h"
#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using testing::expect_close;
using testing::finite_difference;
using testing::random_tensor;
using testing::random_weights;
using testing::rotary_tables;
using testing::rotate_naive;
using testing::weighted_sum;

constexpr int64_t B = 2, T = 3, NH = 4;
constexpr int64_t kPosOffset = 5;
constexpr int64_t kMaxPos = kPosOffset + T + 2;

enum class Rotary : unsigned char { kOff, kOn };

struct ExpandCase {
  int64_t KV, HS;
  Rotary rotary;
};

std::vector<ExpandCase> expand_cases() {
  std::vector<ExpandCase> cases;
  for (int64_t kv : {2, 1, 4}) {
    cases.push_back({kv, 6, Rotary::kOn});
    cases.push_back({kv, 6, Rotary::kOff});
  }
  cases.push_back({2, 5, Rotary::kOff});  // odd head size: fine without rotary
  return cases;
}

// out[b,t,slot C + h HS + i] written straight from the contract.
std::vector<double> expand_naive(const Tensor& in, const ExpandCase& c,
                                 const testing::RotaryTables* rt) {
  const int64_t KV = c.KV, HS = c.HS, C = NH * HS, W = (NH + 2 * KV) * HS;
  const std::vector<double> x = in.to_doubles();
  const std::vector<double> cs = rt ? rt->cos.to_doubles() : std::vector<double>{};
  const std::vector<double> sn = rt ? rt->sin.to_doubles() : std::vector<double>{};
  std::vector<double> out(static_cast<size_t>(B * T * 3 * C));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t slot = 0; slot < 3; ++slot) {
        for (int64_t h = 0; h < NH; ++h) {
          const int64_t kv_head = h / (NH / KV);
          const int64_t src_head = slot == 0 ? h : slot == 1 ? NH + kv_head : NH + KV + kv_head;
          std::vector<long double> head(static_cast<size_t>(HS));
          for (int64_t i = 0; i < HS; ++i) head[i] = x[(b * T + t) * W + src_head * HS + i];
          if (rt && slot < 2) head = rotate_naive(head, cs, sn, kPosOffset + t);
          for (int64_t i = 0; i < HS; ++i) {
            out[(b * T + t) * 3 * C + slot * C + h * HS + i] = static_cast<double>(head[i]);
          }
        }
      }
    }
  }
  return out;
}

TEST(QkvExpand, ForwardMatchesNaive) {
  for (const ExpandCase& c : expand_cases()) {
    for (DType dt : {DType::f64, DType::f32}) {
      SCOPED_TRACE(::testing::Message() << "KV " << c.KV << " HS " << c.HS << " rotary "
                                        << (c.rotary == Rotary::kOn) << " " << dtype_name(dt));
      const testing::RotaryTables rt = rotary_tables(kMaxPos, c.HS);
      const testing::RotaryTables* rtp = c.rotary == Rotary::kOn ? &rt : nullptr;
      Tensor in = random_tensor({B, T, (NH + 2 * c.KV) * c.HS}, dt, 1);
      Tensor out = random_tensor({B, T, 3 * NH * c.HS}, dt, 2);  // garbage: written
      kernels::qkv_expand_forward(out, in, NH, static_cast<int>(c.KV), rtp ? &rt.cos : nullptr,
                                  rtp ? &rt.sin : nullptr, kPosOffset);
      const double tol = dt == DType::f64 ? 1e-14 : 1e-6;
      expect_close(out.to_doubles(), expand_naive(in, c, rtp), tol, tol, "out");
    }
  }
}

TEST(QkvExpand, BackwardMatchesFiniteDifferences) {
  for (const ExpandCase& c : expand_cases()) {
    SCOPED_TRACE(::testing::Message()
                 << "KV " << c.KV << " HS " << c.HS << " rotary " << (c.rotary == Rotary::kOn));
    const testing::RotaryTables rt = rotary_tables(kMaxPos, c.HS);
    const Tensor* cos = c.rotary == Rotary::kOn ? &rt.cos : nullptr;
    const Tensor* sin = c.rotary == Rotary::kOn ? &rt.sin : nullptr;
    const int kv = static_cast<int>(c.KV);
    const int64_t W = (NH + 2 * c.KV) * c.HS, C3 = 3 * NH * c.HS;
    Tensor in = random_tensor({B, T, W}, DType::f64, 3);
    Tensor out = Tensor::empty({B, T, C3}, DType::f64);
    const std::vector<double> w = random_weights(B * T * C3, 4);
    auto loss = [&] {
      kernels::qkv_expand_forward(out, in, NH, kv, cos, sin, kPosOffset);
      return weighted_sum(out, w);
    };
    const std::vector<double> fd = finite_difference(in, loss);
    Tensor dout = Tensor::from_doubles(w, {B, T, C3}, DType::f64);
    Tensor din = random_tensor({B, T, W}, DType::f64, 5);  // garbage: written
    kernels::qkv_expand_backward(din, dout, NH, kv, cos, sin, kPosOffset);
    expect_close(din.to_doubles(), fd, 1e-8, 1e-6, "din");
    kernels::qkv_expand_backward(din, dout, NH, kv, cos, sin, kPosOffset);
    expect_close(din.to_doubles(), fd, 1e-8, 1e-6, "din after a second backward (not doubled)");
  }
}

TEST(QkvExpand, Float32BackwardMatchesFloat64) {
  const testing::RotaryTables rt = rotary_tables(kMaxPos, 8);
  const int64_t KV = 2, W = (NH + 2 * KV) * 8, C3 = 3 * NH * 8;
  Tensor din[2];
  const DType dts[2] = {DType::f64, DType::f32};
  for (int k = 0; k < 2; ++k) {
    Tensor dout = random_tensor({B, T, C3}, dts[k], 6);
    din[k] = Tensor::empty({B, T, W}, dts[k]);
    kernels::qkv_expand_backward(din[k], dout, NH, KV, &rt.cos, &rt.sin, kPosOffset);
  }
  expect_close(din[1].to_doubles(), din[0].to_doubles(), 1e-6, 1e-5, "din f32 vs f64");
}

}  // namespace
}  // namespace zt
