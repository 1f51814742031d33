// Tests of the CPU elementwise helpers (kernels/cpu/elementwise.cc): casts among f32/f64/bf16/f16
// against zt/core/half.h's rounding (specials included) and exact round trips, scaling,
// scale_check_nonfinite's flag (set on inf/nan, never cleared), add_scaled against cast, scale and
// add in turn, and sum_squares_accumulate against a long-double sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/test_util.h"
#include "zt/core/half.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Ordinary values, round-to-even ties of bf16 (1 + 2^-8, 1 + 3 * 2^-8), f16 overflow (65520)
// and underflow (1e-8, 6e-8: subnormal), f32 extremes and specials.
std::vector<float> cast_values() {
  return {0.0f,     -0.0f,    1.0f, -1.5f, 3.14159265f, 1e-3f,     1.00390625f, 1.01171875f,
          65504.0f, 65520.0f, 1e5f, 1e-8f, 6e-8f,       -2.5e-6f,  3.0e38f,     -1e-40f,
          kInf,     -kInf,    kNan, 0.1f,  -7.77f,      1234.5678f};
}

// Same value, or both NaN.
void expect_same_value(double actual, double expected, size_t i, const char* what) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << what << " at " << i;
  } else {
    EXPECT_EQ(actual, expected) << what << " at " << i;
  }
}

TEST(Cast, Float32ToBf16AndF16RoundsAsHalfH) {
  const std::vector<float> v = cast_values();
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor src = Tensor::from_floats(v, {n}, DType::f32);
  Tensor b = Tensor::empty({n}, DType::bf16), h = Tensor::empty({n}, DType::f16);
  kernels::cast(b, src);
  kernels::cast(h, src);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(b.data<bf16_t>()[i].bits, float_to_bf16(v[i]).bits) << "bf16 at " << i;
    EXPECT_EQ(h.data<f16_t>()[i].bits, float_to_f16(v[i]).bits) << "f16 at " << i;
    expect_same_value(bf16_to_float(b.data<bf16_t>()[i]), round_to_bf16(v[i]), i, "bf16 value");
    expect_same_value(f16_to_float(h.data<f16_t>()[i]), round_to_f16(v[i]), i, "f16 value");
  }
  // The spot checks the rounding rule itself: ties to even, overflow to inf.
  EXPECT_EQ(bf16_to_float(b.data<bf16_t>()[6]), 1.0f);
  EXPECT_EQ(bf16_to_float(b.data<bf16_t>()[7]), 1.015625f);
  EXPECT_EQ(f16_to_float(h.data<f16_t>()[9]), kInf);
}

TEST(Cast, SixteenBitRoundTripsThroughWiderTypesAreExact) {
  const std::vector<float> v = cast_values();
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor src = Tensor::from_floats(v, {n}, DType::f32);
  for (DType half : {DType::bf16, DType::f16}) {
    for (DType wide : {DType::f32, DType::f64}) {
      Tensor a = Tensor::empty({n}, half), w = Tensor::empty({n}, wide);
      Tensor back = Tensor::empty({n}, half);
      kernels::cast(a, src);
      kernels::cast(w, a);
      kernels::cast(back, w);
      EXPECT_EQ(std::memcmp(a.data(), back.data(), a.nbytes()), 0)
          << dtype_name(half) << " -> " << dtype_name(wide) << " -> " << dtype_name(half);
    }
  }
}

TEST(Cast, Float64AndCrossSixteenBitConversions) {
  std::vector<double> d = {1.0 / 3.0, -2.0 / 7.0, 1e-30, 1e300, 65519.0, 1.0 + 1e-12};
  const int64_t n = static_cast<int64_t>(d.size());
  Tensor src = Tensor::from_doubles(d, {n}, DType::f64);
  Tensor f = Tensor::empty({n}, DType::f32), b = Tensor::empty({n}, DType::bf16);
  Tensor h_from_b = Tensor::empty({n}, DType::f16), back = Tensor::empty({n}, DType::f64);
  kernels::cast(f, src);
  kernels::cast(b, src);
  kernels::cast(h_from_b, b);
  kernels::cast(back, f);
  for (size_t i = 0; i < d.size(); ++i) {
    const float fi = static_cast<float>(d[i]);
    EXPECT_EQ(f.data<float>()[i], fi) << i;
    EXPECT_EQ(back.data<double>()[i], static_cast<double>(fi)) << i;
    EXPECT_EQ(b.data<bf16_t>()[i].bits, float_to_bf16(fi).bits) << i;
    EXPECT_EQ(h_from_b.data<f16_t>()[i].bits, float_to_f16(round_to_bf16(fi)).bits) << i;
  }
}

TEST(ScaleInplace, ScalesEveryFloatDtype) {
  const std::vector<double> v = {0.5, -1.25, 3.0, 1e-3, -7.0};
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Tensor x = Tensor::from_doubles(v, {5}, dt);
    const std::vector<double> before = x.to_doubles();
    kernels::scale_inplace(x, 0.375f);
    const std::vector<double> after = x.to_doubles();
    for (size_t i = 0; i < v.size(); ++i) {
      double expected = before[i] * 0.375;  // exact in f64 for these values
      if (dt == DType::f32) expected = static_cast<float>(expected);
      if (dt == DType::bf16) expected = round_to_bf16(static_cast<float>(expected));
      if (dt == DType::f16) expected = round_to_f16(static_cast<float>(expected));
      EXPECT_EQ(after[i], expected) << dtype_name(dt) << " at " << i;
    }
  }
}

// add_scaled is cast, scale_inplace and add_inplace in one pass: the same bits as those three in
// turn (f32 and f64 accumulators, every input dtype, a scale that rounds), and kWrite ignores the
// accumulator's old values (NaN there must not leak).
TEST(AddScaled, EqualsCastScaleAddInTurn) {
  const float scale = 1.0f / 3.0f;
  for (DType acc_t : {DType::f32, DType::f64}) {
    for (DType in_t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string(dtype_name(acc_t)) + " += " + std::string(dtype_name(in_t)));
      Tensor in = testing::random_tensor({1000}, in_t, 11, -50.0, 50.0);
      Tensor acc = testing::random_tensor({1000}, acc_t, 12, -50.0, 50.0);
      Tensor expected = acc.clone();
      Tensor c = Tensor::empty({1000}, acc_t);
      kernels::cast(c, in);
      kernels::scale_inplace(c, scale);
      kernels::add_inplace(expected, c);
      kernels::add_scaled(acc, in, scale, kernels::Accumulate::kAdd);
      EXPECT_EQ(acc.to_doubles(), expected.to_doubles());

      Tensor fresh = Tensor::from_doubles(std::vector<double>(1000, std::nan("")), {1000}, acc_t);
      kernels::add_scaled(fresh, in, scale, kernels::Accumulate::kWrite);
      EXPECT_EQ(fresh.to_doubles(), c.to_doubles());
    }
  }
}

// grad_clip_scale against DeepSpeed's clipping written out here (clip_grad_norm_: the unscaled
// norm n, clip = (n + 1e-6) / max_norm, applied when > 1, folded with the loss scale): no
// clipping, clipping off, a clipped norm, a loss scale, and non-finite sums (no clipping then).
TEST(GradClipScale, MatchesDeepSpeedsClipping) {
  struct Case {
    double sumsq, loss_scale, max_norm;
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (Case c : {Case{0.25, 1.0, 1.0}, Case{9.0, 1.0, 0.0}, Case{9.0, 1.0, 1.0},
                 Case{1e6, 1024.0, 2.5}, Case{0.0, 1.0, 1.0}, Case{inf, 1.0, 1.0},
                 Case{std::nan(""), 65536.0, 1.0}, Case{2.0, 3.0, 0.1}}) {
    const double n = std::sqrt(c.sumsq) / c.loss_scale;
    double combined = c.loss_scale;
    if (c.max_norm > 0 && std::isfinite(n) && (n + 1e-6) / c.max_norm > 1) {
      combined = (n + 1e-6) / c.max_norm * c.loss_scale;
    }
    Tensor out = Tensor::zeros({1}, DType::f32);
    Tensor sumsq = Tensor::from_doubles({c.sumsq}, {1}, DType::f64);
    kernels::grad_clip_scale(out, sumsq, c.loss_scale, c.max_norm);
    EXPECT_EQ(out.data<float>()[0], static_cast<float>(1.0 / combined))
        << c.sumsq << " " << c.loss_scale << " " << c.max_norm;
  }
}

// Runs scale_check_nonfinite on `values` (in `dt`) with the flag starting at `flag_before`.
float check_flag(const std::vector<float>& values, DType dt, float scale, float flag_before) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor x = Tensor::from_floats(values, {n}, dt);
  Tensor flag = Tensor::from_floats({flag_before}, {1}, DType::f32);
  kernels::scale_check_nonfinite(x, scale, flag);
  return flag.data<float>()[0];
}

TEST(ScaleCheckNonfinite, SetsTheFlagOnInfAndNanOnly) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_EQ(check_flag({1.0f, -2.0f, 0.5f}, dt, 2.0f, 0.0f), 0.0f) << "finite: left alone";
    EXPECT_EQ(check_flag({1.0f, -2.0f, 0.5f}, dt, 2.0f, 1.0f), 1.0f) << "never cleared";
    EXPECT_EQ(check_flag({1.0f, kInf, 0.5f}, dt, 2.0f, 0.0f), 1.0f) << "inf";
    EXPECT_EQ(check_flag({1.0f, -kInf, 0.5f}, dt, 0.5f, 0.0f), 1.0f) << "-inf";
    EXPECT_EQ(check_flag({kNan, 1.0f, 0.5f}, dt, 1.0f, 0.0f), 1.0f) << "nan";
  }
  // A finite value that overflows when scaled counts, in the type it is stored in.
  EXPECT_EQ(check_flag({3.0e38f}, DType::f32, 10.0f, 0.0f), 1.0f);
  EXPECT_EQ(check_flag({60000.0f}, DType::f16, 2.0f, 0.0f), 1.0f);
  EXPECT_EQ(check_flag({60000.0f}, DType::f32, 2.0f, 0.0f), 0.0f);
}

TEST(ScaleCheckNonfinite, ScalesTheValues) {
  Tensor x = Tensor::from_floats({1.0f, -3.0f, 0.25f}, {3}, DType::f32);
  Tensor flag = Tensor::zeros({1}, DType::f32);
  kernels::scale_check_nonfinite(x, 0.5f, flag);
  EXPECT_EQ(x.to_floats(), (std::vector<float>{0.5f, -1.5f, 0.125f}));
}

TEST(SumSquaresAccumulate, AddsToTheAccumulatorAcrossDtypes) {
  Tensor acc = Tensor::from_doubles({2.5}, {1}, DType::f64);
  long double expected = 2.5L;
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::f16}) {
    Tensor x = testing::random_tensor({1000}, dt, seed++, -3.0, 3.0);
    for (double v : x.to_doubles()) expected += static_cast<long double>(v) * v;
    kernels::sum_squares_accumulate(acc, x);
  }
  EXPECT_NEAR(acc.item(), static_cast<double>(expected), 1e-12 * static_cast<double>(expected));
}

TEST(Elementwise, LargeTensorsTakeTheParallelPaths) {
  constexpr int64_t n = 100000;  // above the kernels' OpenMP threshold
  Tensor x = testing::random_tensor({n}, DType::f32, 7, -2.0, 2.0);
  const std::vector<float> v = x.to_floats();
  Tensor b = Tensor::empty({n}, DType::bf16);
  kernels::cast(b, x);
  long double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(b.data<bf16_t>()[i].bits, float_to_bf16(v[i]).bits) << i;
    sq += static_cast<long double>(v[i]) * v[i];
  }
  Tensor acc = Tensor::zeros({1}, DType::f64);
  kernels::sum_squares_accumulate(acc, x);
  EXPECT_NEAR(acc.item(), static_cast<double>(sq), 1e-12 * static_cast<double>(sq));

  Tensor flag = Tensor::zeros({1}, DType::f32);
  kernels::scale_check_nonfinite(x, 2.0f, flag);
  EXPECT_EQ(flag.item(), 0.0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x.data<float>()[i], 2.0f * v[i]) << i;
  x.data<float>()[n - 1] = kNan;  // one bad element, in the last thread's share
  kernels::scale_check_nonfinite(x, 1.0f, flag);
  EXPECT_EQ(flag.item(), 1.0);
}

}  // namespace
}  // namespace zt
