// Tests of the CPU 2-D max pooling (kernels/cpu/pool.cc): forward values and argmax indices
// against a direct loop written here (padding as -inf, first maximum wins), PyTorch's tie and
// NaN rule on a hand example, backward routing every gradient to its argmax (overlapping
// windows adding up), backward against central finite differences in f64, and the Status of
// impossible geometries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using kernels::Pool2dArgs;
using testing::expect_close;
using testing::finite_difference;
using testing::random_tensor;
using testing::random_weights;
using testing::weighted_sum;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct PoolCase {
  int64_t N, C, H, W;
  Pool2dArgs args;
  const char* name;
};

const PoolCase kCases[] = {
    {2, 3, 8, 8, {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}, "k2 s2"},
    {2, 3, 9, 7, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2}, "k3 s2 odd"},
    {1, 2, 7, 6, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
     "k3 s2 p1"},
    {2, 1, 5, 9, {.kernel_h = 2, .kernel_w = 3, .stride_h = 1, .stride_w = 2, .pad_h = 1, .pad_w = 1},
     "2x3 s(1,2) p(1,1)"},
};

Shape out_shape(const PoolCase& c) {
  auto s = kernels::maxpool2d_out_shape({c.N, c.C, c.H, c.W}, c.args);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return *s;
}

// Values and plane indices by the definition: scan the window in row-major order, padding
// counts as -inf, a strictly greater value replaces the max.
void pool_naive(const PoolCase& c, const std::vector<double>& x, int64_t P, int64_t Q,
                std::vector<double>& out, std::vector<double>& idx) {
  const Pool2dArgs& a = c.args;
  for (int64_t plane = 0; plane < c.N * c.C; ++plane) {
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t q = 0; q < Q; ++q) {
        double best = -kInf;
        int64_t best_i = -1;
        for (int64_t r = 0; r < a.kernel_h; ++r) {
          for (int64_t s = 0; s < a.kernel_w; ++s) {
            const int64_t h = p * a.stride_h - a.pad_h + r, w = q * a.stride_w - a.pad_w + s;
            if (h < 0 || h >= c.H || w < 0 || w >= c.W) continue;
            const double v = x[plane * c.H * c.W + h * c.W + w];
            if (best_i < 0 || v > best) {
              best = v;
              best_i = h * c.W + w;
            }
          }
        }
        out.push_back(best);
        idx.push_back(static_cast<double>(best_i));
      }
    }
  }
}

TEST(MaxPool2d, ForwardMatchesDirectLoop) {
  for (const PoolCase& c : kCases) {
    for (DType dt : {DType::f64, DType::f32}) {
      SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(dt));
      const Shape os = out_shape(c);
      // All negative, so a window that chose the padding (0 or -inf) would show.
      Tensor in = random_tensor({c.N, c.C, c.H, c.W}, dt, 1, -2.0, -1.0);
      Tensor out = random_tensor(os, dt, 2);
      Tensor idx = Tensor::empty(os, DType::i32);
      kernels::maxpool2d_forward(out, idx, in, c.args);
      std::vector<double> expected, expected_idx;
      pool_naive(c, in.to_doubles(), os[2], os[3], expected, expected_idx);
      EXPECT_EQ(out.to_doubles(), expected);  // a max is one of the inputs: exact
      EXPECT_EQ(idx.to_doubles(), expected_idx);
    }
  }
}

TEST(MaxPool2d, TiesNanAndAllMinusInfFollowTorch) {
  // One 4x4 plane, 2x2 windows, stride 2:
  //   [1 3 | 2 2]   window (0,0): max 3, first at (0,1) -> 1; window (0,1): all 2 -> (0,2) = 2
  //   [3 0 | 2 2]
  //   [-inf -inf | 5 NaN]  window (1,0): all -inf -> its first element (2,0) = 8, value -inf
  //   [-inf -inf | 7 1  ]  window (1,1): NaN wins over 5 and 7 -> (2,3) = 11
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor in = Tensor::from_doubles({1, 3, 2, 2, 3, 0, 2, 2, -kInf, -kInf, 5, nan, -kInf, -kInf, 7, 1},
                                   {1, 1, 4, 4}, DType::f64);
  Tensor out = Tensor::empty({1, 1, 2, 2}, DType::f64), idx = Tensor::empty({1, 1, 2, 2}, DType::i32);
  kernels::maxpool2d_forward(out, idx, in,
                                  {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2});
  EXPECT_EQ(idx.to_doubles(), (std::vector<double>{1, 2, 8, 11}));
  const std::vector<double> v = out.to_doubles();
  EXPECT_EQ(v[0], 3);
  EXPECT_EQ(v[1], 2);
  EXPECT_EQ(v[2], -kInf);
  EXPECT_TRUE(std::isnan(v[3]));
}

TEST(MaxPool2d, BackwardRoutesEachGradientToItsArgmax) {
  // A 1x5 row, windows of 3 at stride 2: [0..2] and [2..4]; the max 9 at column 2 is in both,
  // so both gradients land there and add up; every other input gets 0.
  Tensor in = Tensor::from_doubles({1, 4, 9, 2, 3}, {1, 1, 1, 5}, DType::f64);
  const Pool2dArgs a{.kernel_h = 1, .kernel_w = 3, .stride_h = 1, .stride_w = 2};
  Tensor out = Tensor::empty({1, 1, 1, 2}, DType::f64), idx = Tensor::empty({1, 1, 1, 2}, DType::i32);
  kernels::maxpool2d_forward(out, idx, in, a);
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{9, 9}));
  EXPECT_EQ(idx.to_doubles(), (std::vector<double>{2, 2}));
  Tensor dout = Tensor::from_doubles({0.5, 0.25}, {1, 1, 1, 2}, DType::f64);
  Tensor din = Tensor::from_doubles({7, 7, 7, 7, 7}, {1, 1, 1, 5}, DType::f64);  // garbage
  kernels::maxpool2d_backward(din, dout, idx);
  EXPECT_EQ(din.to_doubles(), (std::vector<double>{0, 0, 0.75, 0, 0}));

  // On random inputs: din is zero except at argmaxes, where it is the sum of their gradients.
  for (const PoolCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const Shape os = out_shape(c);
    Tensor x = random_tensor({c.N, c.C, c.H, c.W}, DType::f32, 3);
    Tensor o = Tensor::empty(os, DType::f32), ix = Tensor::empty(os, DType::i32);
    kernels::maxpool2d_forward(o, ix, x, c.args);
    Tensor g = random_tensor(os, DType::f32, 4);
    Tensor dx = random_tensor(x.shape(), DType::f32, 5);
    kernels::maxpool2d_backward(dx, g, ix);
    std::vector<double> expected(static_cast<size_t>(x.numel()), 0.0);
    const std::vector<double> gi = g.to_doubles(), ii = ix.to_doubles();
    const int64_t PQ = os[2] * os[3], HW = c.H * c.W;
    for (int64_t e = 0; e < os.numel(); ++e) {
      expected[static_cast<size_t>((e / PQ) * HW + static_cast<int64_t>(ii[e]))] += gi[e];
    }
    expect_close(dx.to_doubles(), expected, 1e-6, 1e-6, "routed gradient");
  }
}

TEST(MaxPool2d, BackwardMatchesFiniteDifferences) {
  for (const PoolCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const Shape os = out_shape(c);
    // Distinct values (a shuffled ramp, 0.01 apart) so that a step of 1e-6 changes no argmax.
    const int64_t n = c.N * c.C * c.H * c.W;
    const std::vector<double> keys = random_tensor({n}, DType::f64, 7).to_doubles();
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
    std::vector<double> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[order[i]] = static_cast<double>(i - n / 2) * 0.01;
    Tensor in = Tensor::from_doubles(values, {c.N, c.C, c.H, c.W}, DType::f64);
    Tensor out = Tensor::empty(os, DType::f64), idx = Tensor::empty(os, DType::i32);
    const std::vector<double> w = random_weights(os.numel(), 8);
    auto loss = [&] {
      kernels::maxpool2d_forward(out, idx, in, c.args);
      return weighted_sum(out, w);
    };
    const std::vector<double> fd = finite_difference(in, loss);
    kernels::maxpool2d_forward(out, idx, in, c.args);
    Tensor dout = Tensor::from_doubles(w, os, DType::f64);
    Tensor din = Tensor::empty(in.shape(), DType::f64);
    kernels::maxpool2d_backward(din, dout, idx);
    expect_close(din.to_doubles(), fd, 1e-8, 1e-6, "pool din");
  }
}

TEST(MaxPool2d, ImpossibleGeometryIsAStatus) {
  auto e = kernels::maxpool2d_out_shape({1, 1, 4, 4}, {.kernel_h = 3, .kernel_w = 3, .stride_h = 1,
                                                       .stride_w = 1, .pad_h = 2, .pad_w = 0});
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("at most half"), std::string::npos) << e.status().message();
  e = kernels::maxpool2d_out_shape({1, 1, 2, 2}, {.kernel_h = 3, .kernel_w = 3, .stride_h = 1,
                                                  .stride_w = 1});
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("[1, 1, 2, 2]"), std::string::npos) << e.status().message();
  e = kernels::maxpool2d_out_shape({1, 1, 4, 4}, {.kernel_h = 2, .kernel_w = 2, .stride_h = 0,
                                                  .stride_w = 1});
  EXPECT_FALSE(e.is_ok());
  // torchvision AlexNet's pool: 55 -> 27 with k3 s2.
  EXPECT_EQ(*kernels::maxpool2d_out_shape({1, 64, 55, 55}, {.kernel_h = 3, .kernel_w = 3,
                                                            .stride_h = 2, .stride_w = 2}),
            Shape({1, 64, 27, 27}));
}

}  // namespace
}  // namespace zt
