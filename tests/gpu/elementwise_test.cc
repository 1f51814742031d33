// CUDA elementwise ops against the CPU reference and closed forms: GELU forward/backward,
// residual and in-place add (exact), casts between every pair of float dtypes (bit-exact, round
// to nearest even, ties and f16 subnormals included), scaling, the non-finite check of loss
// scaling (inf, nan, f16 overflow, never cleared), the f64 sum of squares and zero_tensors (many
// views of one buffer cleared in one launch, their neighbours untouched).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

constexpr DType kFloatDtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};

// Element-by-element equality (exact results; no NaN in these inputs).
void expect_equal(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << b[i];
      return;
    }
  }
}

TEST(ElementwiseCuda, GeluForwardBackwardMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  const Shape shape{3, 7, 53};
  Tensor in = exact_tensor(shape, 1401, 4.0);  // [-4, 4]: both tails of the tanh
  Tensor dout = exact_tensor(shape, 1402);
  Tensor out_ref = Tensor::empty(shape, DType::f32);
  Tensor din_ref = Tensor::empty(shape, DType::f32);
  kernels::gelu_forward(out_ref, in);
  kernels::gelu_backward(din_ref, dout, in);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor in_d = to_cuda(in, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor out_d = Tensor::empty(shape, d.dtype, Device::cuda(0));
    Tensor din_d = Tensor::empty(shape, d.dtype, Device::cuda(0));
    kernels::gelu_forward(out_d, in_d);
    kernels::gelu_backward(din_d, dout_d, in_d);
    // The absolute margin covers 1 + tanh(u) cancelling in the far negative tail (values ~1e-4
    // whose last bits depend on the tanh implementation).
    expect_close(values(out_d), values(out_ref), 1e-6 + 1e-2 * d.rtol, d.rtol, "gelu out");
    expect_close(values(din_d), values(din_ref), 1e-6 + 1e-2 * d.rtol, d.rtol, "gelu din");
  }
}

TEST(ElementwiseCuda, ResidualAndAddAreExact) {
  ZT_SKIP_WITHOUT_CUDA();
  // (5, 41): one element at a time; (6, 64): 16-byte chunks.
  for (const Shape& shape : {Shape{5, 41}, Shape{6, 64}}) {
    SCOPED_TRACE(shape.str());
    Tensor a = exact_tensor(shape, 1501);
    Tensor b = exact_tensor(shape, 1502);
    // Oracle: (k1 + k2)/64 has 8 significant bits, exact in every dtype.
    std::vector<double> sum = a.to_doubles();
    const std::vector<double> bv = b.to_doubles();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += bv[i];
    for (const DtypeCase& d : kComputeDtypes) {
      SCOPED_TRACE(d.name);
      Tensor a_d = to_cuda(a, d.dtype);
      Tensor b_d = to_cuda(b, d.dtype);
      Tensor out_d = Tensor::empty(shape, d.dtype, Device::cuda(0));
      kernels::residual_forward(out_d, a_d, b_d);
      expect_equal(values(out_d), sum, "residual");
      kernels::add_inplace(a_d, b_d);
      expect_equal(values(a_d), sum, "add_inplace");
    }
  }
}

// Values that exercise rounding: generic ones, ties to even in bf16 (spacing 2^-7 at 1) and f16
// (2^-10 at 1), f16 subnormals, zeros, values near f16's largest finite 65504.
std::vector<double> cast_inputs() {
  std::vector<double> v = random_tensor({257}, DType::f64, 1601, -3.0, 3.0).to_doubles();
  const double extra[] = {0.0,
                          -0.0,
                          1.0 + std::ldexp(1.0, -8),      // bf16 tie -> 1
                          1.0 + 3 * std::ldexp(1.0, -8),  // bf16 tie -> 1 + 2^-6
                          1.0 + std::ldexp(1.0, -11),     // f16 tie -> 1
                          1.0 + 3 * std::ldexp(1.0, -11),
                          3e-6,
                          -7e-8,
                          6.1e-5,
                          65504.0,
                          -60000.0,
                          0.1,
                          1.0 / 3.0};
  v.insert(v.end(), std::begin(extra), std::end(extra));
  return v;
}

TEST(ElementwiseCuda, CastEveryPairMatchesCpuBitExact) {
  ZT_SKIP_WITHOUT_CUDA();
  const std::vector<double> inputs = cast_inputs();
  const Shape shape{static_cast<int64_t>(inputs.size())};
  for (DType src_t : kFloatDtypes) {
    // Source values representable in the source dtype (host conversion).
    Tensor src = Tensor::from_doubles(inputs, shape, src_t);
    Tensor src_d = src.to(Device::cuda(0));
    for (DType dst_t : kFloatDtypes) {
      SCOPED_TRACE(std::string(dtype_name(src_t)) + " -> " + std::string(dtype_name(dst_t)));
      Tensor ref = Tensor::empty(shape, dst_t);
      kernels::cast(ref, src);
      Tensor dst_d = Tensor::empty(shape, dst_t, Device::cuda(0));
      kernels::cast(dst_d, src_d);
      expect_equal(values(dst_d), values(ref), "cast");
    }
  }
}

TEST(ElementwiseCuda, ScaleInplaceMatchesCpuBitExact) {
  ZT_SKIP_WITHOUT_CUDA();
  const Shape shape{1001};
  const float scale = 1.0f / 3.0f;  // rounds: the CPU and GPU must round the same way
  for (DType t : kFloatDtypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Tensor x = random_tensor(shape, t, 1701, -100.0, 100.0);
    Tensor x_d = x.to(Device::cuda(0));
    kernels::scale_inplace(x, scale);
    kernels::scale_inplace(x_d, scale);
    expect_equal(values(x_d), values(x), "scale_inplace");
  }
}

// add_scaled on the GPU gives the CPU's bits (no fused multiply-add), with 16-byte chunks (f32
// into f32, n a multiple of 4) and one element at a time (the other pairs, odd n).
TEST(ElementwiseCuda, AddScaledMatchesCpuBitExact) {
  ZT_SKIP_WITHOUT_CUDA();
  const float scale = 1.0f / 3.0f;
  for (int64_t n : {int64_t{1000}, int64_t{1001}}) {
    for (DType acc_t : {DType::f32, DType::f64}) {
      for (DType in_t : kFloatDtypes) {
        SCOPED_TRACE(std::string(dtype_name(acc_t)) + " += " + std::string(dtype_name(in_t)) +
                     ", n " + std::to_string(n));
        Tensor in = random_tensor({n}, in_t, 1801, -100.0, 100.0);
        for (kernels::Accumulate mode : {kernels::Accumulate::kAdd, kernels::Accumulate::kWrite}) {
          Tensor acc = random_tensor({n}, acc_t, 1802, -100.0, 100.0);
          Tensor acc_d = acc.to(Device::cuda(0));
          kernels::add_scaled(acc, in, scale, mode);
          kernels::add_scaled(acc_d, in.to(Device::cuda(0)), scale, mode);
          expect_equal(values(acc_d), values(acc), "add_scaled");
        }
      }
    }
  }
}

// grad_clip_scale on the GPU gives the CPU's bits (f64 arithmetic on both).
TEST(ElementwiseCuda, GradClipScaleMatchesCpuBitExact) {
  ZT_SKIP_WITHOUT_CUDA();
  for (double sumsq : {0.0, 0.3, 9.0, 1e7, std::numeric_limits<double>::infinity()}) {
    for (double loss_scale : {1.0, 1024.0}) {
      for (double max_norm : {0.0, 1.0, 0.3}) {
        Tensor ref = Tensor::zeros({1}, DType::f32);
        Tensor ss = Tensor::from_doubles({sumsq}, {1}, DType::f64);
        kernels::grad_clip_scale(ref, ss, loss_scale, max_norm);
        Tensor out = Tensor::zeros({1}, DType::f32, Device::cuda(0));
        kernels::grad_clip_scale(out, ss.to(Device::cuda(0)), loss_scale, max_norm);
        EXPECT_EQ(out.item(), ref.item()) << sumsq << " " << loss_scale << " " << max_norm;
      }
    }
  }
}

struct NonfiniteCase {
  const char* name;
  DType dtype;
  double poison;  // written at one position (0 for none)
  float scale;
  float flag_before;
  float flag_after;
};

TEST(ElementwiseCuda, ScaleCheckNonfiniteFlagsInfNanAndOverflow) {
  ZT_SKIP_WITHOUT_CUDA();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const NonfiniteCase cases[] = {
      {"finite f32", DType::f32, 0.0, 0.5f, 0.0f, 0.0f},
      {"finite bf16", DType::bf16, 0.0, 4.0f, 0.0f, 0.0f},
      {"inf f32", DType::f32, inf, 0.5f, 0.0f, 1.0f},
      {"nan bf16", DType::bf16, nan, 1.0f, 0.0f, 1.0f},
      {"f16 overflow when scaled", DType::f16, 40000.0, 2.0f, 0.0f, 1.0f},
      {"f16 large but finite", DType::f16, 30000.0, 2.0f, 0.0f, 0.0f},
      {"flag never cleared", DType::f32, 0.0, 1.0f, 1.0f, 1.0f},
  };
  for (const NonfiniteCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<double> v = random_tensor({4099}, DType::f64, 1801).to_doubles();
    if (c.poison != 0.0) v[3001] = c.poison;
    Tensor x = Tensor::from_doubles(v, {4099}, c.dtype);
    Tensor flag = Tensor::from_floats({c.flag_before}, {1}, DType::f32);
    Tensor x_d = x.to(Device::cuda(0));
    Tensor flag_d = flag.to(Device::cuda(0));
    kernels::scale_check_nonfinite(x, c.scale, flag);
    kernels::scale_check_nonfinite(x_d, c.scale, flag_d);
    EXPECT_EQ(flag_d.item(), c.flag_after);
    EXPECT_EQ(flag.item(), c.flag_after) << "CPU reference";
    if (std::isfinite(c.poison)) {
      std::vector<double> got = values(x_d);
      std::vector<double> want = values(x);
      got[3001] = want[3001] = 0;  // may be inf after an overflow
      expect_equal(got, want, "scaled x");
    }
  }
}

TEST(ElementwiseCuda, SumSquaresAccumulatesInF64) {
  ZT_SKIP_WITHOUT_CUDA();
  const int64_t n = 100003;
  for (DType t : kFloatDtypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Tensor x = Tensor::from_doubles(exact_tensor({n}, 1901, 2.0).to_doubles(), {n}, t);
    // Oracle: the sum written here, in f64, twice (two calls), onto 0.5.
    double expected = 0.5;
    for (double v : x.to_doubles()) expected += 2 * v * v;
    Tensor acc_d = Tensor::from_doubles({0.5}, {1}, DType::f64, Device::cuda(0));
    Tensor x_d = x.to(Device::cuda(0));
    kernels::sum_squares_accumulate(acc_d, x_d);
    kernels::sum_squares_accumulate(acc_d, x_d);
    EXPECT_NEAR(acc_d.item(), expected, 1e-12 * expected);
    Tensor acc = Tensor::from_doubles({0.5}, {1}, DType::f64);
    kernels::sum_squares_accumulate(acc, x);
    kernels::sum_squares_accumulate(acc, x);
    EXPECT_NEAR(acc_d.item(), acc.item(), 1e-12 * expected) << "CPU reference";
  }
}

// zero_tensors: views of one buffer (f32 runs of every size around the 4-element vectors and a
// multi-tensor tile, one past a 16-byte boundary, and 16-bit runs of odd byte counts that take the
// memset path), more than one launch's worth of chunks; every element outside them keeps its
// value (-0 included), every element inside is +0.
TEST(ElementwiseCuda, ZeroTensorsClearsExactlyTheViews) {
  ZT_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int64_t n = 60000;
    Tensor host = Tensor::from_doubles(exact_tensor({n}, 2101, 4.0).to_doubles(), {n}, t);
    Tensor buf = host.to(dev);
    std::vector<double> want = host.to_doubles();
    std::vector<bool> cleared(n, false);
    std::vector<Tensor> views;
    int64_t at = 1;  // one element past the aligned start
    const int64_t small[] = {1, 3, 4, 5, 17, 2, 8};
    const int64_t large[] = {8191, 8192, 8193};
    for (int rep = 0; at < n - 9000; ++rep) {
      const int64_t len = rep < 250 ? small[rep % 7] : large[rep % 3];
      views.push_back(buf.view(at, {len}));
      for (int64_t i = at; i < at + len; ++i) want[i] = 0.0, cleared[i] = true;
      at += len + 1 + rep % 3;  // a gap of 1-3 untouched elements
    }
    ASSERT_GT(views.size(), 192u);  // more chunks than one multi-tensor launch takes (kMtMaxChunks)
    kernels::zero_tensors(views, dev);
    const std::vector<double> got = buf.to_doubles();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], want[i]) << "element " << i;
      if (cleared[i]) {
        ASSERT_FALSE(std::signbit(got[i])) << "element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace zt::testing

namespace zt::testing {
namespace {

// scale_rows (a loss head's per-position weights): each row times its f32 weight, one rounding,
// against the CPU in every compute dtype; rows of 1 and of 1000 columns.
TEST(ScaleRowsCuda, MatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  for (const int64_t cols : {int64_t{1}, int64_t{1000}}) {
    SCOPED_TRACE(cols);
    const int64_t rows = 37;
    Tensor x = exact_tensor({rows, cols}, 31);
    Tensor w = exact_tensor({rows}, 32, 2.0);
    Tensor ref = x.clone();
    kernels::scale_rows(ref, w);
    for (const DtypeCase& d : kComputeDtypes) {
      SCOPED_TRACE(d.name);
      Tensor xd = to_cuda(x, d.dtype);
      kernels::scale_rows(xd, to_cuda(w, DType::f32));
      expect_close(values(xd), values(ref), d.rtol, d.rtol, "scaled rows");
    }
  }
}

}  // namespace
}  // namespace zt::testing
