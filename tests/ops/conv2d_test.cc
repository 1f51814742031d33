// Tests of the CPU 2-D convolution (kernels/cpu/conv2d.cc): forward against a direct 7-deep
// loop written here on odd geometries (strides 1-4, padding 0-5, non-square kernels and
// strides), backward against central finite differences of L = sum(w * out) in f64, the write
// (din) / accumulate (dweight, dbias) contract, skipped gradients, f32 against f64, a batch
// large enough to take several column groups, and the Status of impossible geometries.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using kernels::Conv2dArgs;
using testing::expect_close;
using testing::finite_difference;
using testing::random_tensor;
using testing::random_weights;
using testing::weighted_sum;

struct ConvCase {
  int64_t N, C, H, W, K, R, S;
  Conv2dArgs args;
  const char* name;
};

const ConvCase kCases[] = {
    {2, 3, 7, 6, 5, 3, 3, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, "s2 p1"},
    {2, 3, 8, 5, 5, 2, 3, {.stride_h = 2, .stride_w = 1, .pad_h = 2, .pad_w = 1}, "2x3 s(2,1) p(2,1)"},
    {1, 3, 5, 9, 5, 5, 1, {.stride_h = 1, .stride_w = 3, .pad_h = 2, .pad_w = 0}, "5x1 s(1,3) p(2,0)"},
    {2, 2, 6, 6, 3, 1, 1, {}, "1x1"},
    {2, 3, 13, 11, 4, 11, 11, {.stride_h = 4, .stride_w = 4, .pad_h = 5, .pad_w = 5}, "k11 s4 p5"},
};

Shape out_shape(const ConvCase& c) {
  auto s = kernels::conv2d_out_shape({c.N, c.C, c.H, c.W}, {c.K, c.C, c.R, c.S}, c.args);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return *s;
}

// out[n,k,p,q] = b[k] + sum_{c,r,s} in[n,c,p*sh-ph+r,q*sw-pw+s] w[k,c,r,s], zero outside.
std::vector<double> conv_naive(const ConvCase& c, const std::vector<double>& x,
                               const std::vector<double>& w, const std::vector<double>* b,
                               int64_t P, int64_t Q) {
  const Conv2dArgs& a = c.args;
  std::vector<double> out(static_cast<size_t>(c.N * c.K * P * Q));
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t k = 0; k < c.K; ++k) {
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t q = 0; q < Q; ++q) {
          long double sum = b ? (*b)[static_cast<size_t>(k)] : 0.0;
          for (int64_t ch = 0; ch < c.C; ++ch) {
            for (int64_t r = 0; r < c.R; ++r) {
              for (int64_t s = 0; s < c.S; ++s) {
                const int64_t h = p * a.stride_h - a.pad_h + r, wi = q * a.stride_w - a.pad_w + s;
                if (h < 0 || h >= c.H || wi < 0 || wi >= c.W) continue;
                sum += static_cast<long double>(x[((n * c.C + ch) * c.H + h) * c.W + wi]) *
                       w[((k * c.C + ch) * c.R + r) * c.S + s];
              }
            }
          }
          out[((n * c.K + k) * P + p) * Q + q] = static_cast<double>(sum);
        }
      }
    }
  }
  return out;
}

TEST(Conv2d, OutShapeIsTorchFormula) {
  // floor((32 + 10 - 11) / 4) + 1 = 8 (AlexNet-CIFAR's first layer); 224 with k11 s4 p2 is 55.
  EXPECT_EQ(*kernels::conv2d_out_shape({2, 3, 32, 32}, {64, 3, 11, 11},
                                       {.stride_h = 4, .stride_w = 4, .pad_h = 5, .pad_w = 5}),
            Shape({2, 64, 8, 8}));
  EXPECT_EQ(*kernels::conv2d_out_shape({1, 3, 224, 224}, {64, 3, 11, 11},
                                       {.stride_h = 4, .stride_w = 4, .pad_h = 2, .pad_w = 2}),
            Shape({1, 64, 55, 55}));
  EXPECT_EQ(*kernels::conv2d_out_shape({1, 3, 7, 6}, {5, 3, 3, 3},
                                       {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}),
            Shape({1, 5, 4, 3}));
}

TEST(Conv2d, ImpossibleGeometryIsAStatusNamingTheShapes) {
  auto e = kernels::conv2d_out_shape({1, 3, 4, 4}, {8, 3, 7, 7}, {});
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("[1, 3, 4, 4]"), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find("7x7"), std::string::npos);
  e = kernels::conv2d_out_shape({1, 4, 8, 8}, {8, 3, 3, 3}, {});
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("4 channels"), std::string::npos) << e.status().message();
  e = kernels::conv2d_out_shape({1, 3, 8, 8}, {8, 3, 3, 3}, {.stride_h = 0});
  EXPECT_FALSE(e.is_ok());
  e = kernels::conv2d_out_shape({1, 3, 8}, {8, 3, 3, 3}, {});
  EXPECT_FALSE(e.is_ok());
}

TEST(Conv2d, ForwardMatchesDirectLoop) {
  for (const ConvCase& c : kCases) {
    for (DType dt : {DType::f64, DType::f32}) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(dt)
                                          << (with_bias ? " bias" : " no bias"));
        const Shape os = out_shape(c);
        Tensor in = random_tensor({c.N, c.C, c.H, c.W}, dt, 1);
        Tensor weight = random_tensor({c.K, c.C, c.R, c.S}, dt, 2);
        Tensor bias = random_tensor({c.K}, dt, 3);
        Tensor out = random_tensor(os, dt, 4);  // garbage: out is written
        kernels::conv2d_forward(out, in, weight, with_bias ? &bias : nullptr, c.args);
        const std::vector<double> b = bias.to_doubles();
        const std::vector<double> expected = conv_naive(c, in.to_doubles(), weight.to_doubles(),
                                                        with_bias ? &b : nullptr, os[2], os[3]);
        const double tol = dt == DType::f64 ? 1e-13 : 2e-5;
        expect_close(out.to_doubles(), expected, tol, tol, "conv2d out");
      }
    }
  }
}

TEST(Conv2d, ForwardHandExample) {
  // One 3x3 channel, 2x2 kernel of ones, stride 1, padding 0: sums of 2x2 blocks, plus bias 10.
  Tensor in = Tensor::from_doubles({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, DType::f64);
  Tensor weight = Tensor::from_doubles({1, 1, 1, 1}, {1, 1, 2, 2}, DType::f64);
  Tensor bias = Tensor::from_doubles({10}, {1}, DType::f64);
  Tensor out = Tensor::empty({1, 1, 2, 2}, DType::f64);
  kernels::conv2d_forward(out, in, weight, &bias, {});
  EXPECT_EQ(out.to_doubles(), (std::vector<double>{22, 26, 34, 38}));
  // Padding 1, stride 2: windows at (-1,-1), (-1,1), (1,-1), (1,1) see 1; 2+3; 4+7; 5+6+8+9.
  Tensor out2 = Tensor::empty({1, 1, 2, 2}, DType::f64);
  kernels::conv2d_forward(out2, in, weight, nullptr,
                               {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1});
  EXPECT_EQ(out2.to_doubles(), (std::vector<double>{1, 5, 11, 28}));
}

enum class InputGrad { kSkip, kCompute };
enum class WeightGrad { kSkip, kCompute };

void conv_check_backward(const ConvCase& c, InputGrad input_grad, WeightGrad weight_grad) {
  SCOPED_TRACE(c.name);
  const Shape os = out_shape(c);
  Tensor in = random_tensor({c.N, c.C, c.H, c.W}, DType::f64, 5);
  Tensor weight = random_tensor({c.K, c.C, c.R, c.S}, DType::f64, 6);
  Tensor bias = random_tensor({c.K}, DType::f64, 7);
  Tensor out = Tensor::empty(os, DType::f64);
  const std::vector<double> w = random_weights(os.numel(), 8);
  auto loss = [&] {
    kernels::conv2d_forward(out, in, weight, &bias, c.args);
    return weighted_sum(out, w);
  };
  const std::vector<double> fd_in = finite_difference(in, loss);
  const std::vector<double> fd_w = finite_difference(weight, loss);
  const std::vector<double> fd_b = finite_difference(bias, loss);

  Tensor dout = Tensor::from_doubles(w, os, DType::f64);
  Tensor din = random_tensor(in.shape(), DType::f64, 9);  // garbage: din is written
  const std::vector<double> din_before = din.to_doubles();
  Tensor dweight = weight_grad == WeightGrad::kCompute ? Tensor::zeros(weight.shape(), DType::f64)
                                                       : Tensor();
  Tensor dbias = Tensor::zeros({c.K}, DType::f64);
  Tensor* din_ptr = input_grad == InputGrad::kCompute ? &din : nullptr;
  for (int call = 1; call <= 2; ++call) {
    kernels::conv2d_backward(din_ptr, dweight, &dbias, dout, in, weight, c.args);
    std::vector<double> w_expected = fd_w, b_expected = fd_b;
    for (double& x : w_expected) x *= call;  // parameter gradients accumulate over calls
    for (double& x : b_expected) x *= call;
    if (weight_grad == WeightGrad::kCompute) {
      expect_close(dweight.to_doubles(), w_expected, 1e-8, 1e-6, "dweight");
    }
    expect_close(dbias.to_doubles(), b_expected, 1e-8, 1e-6, "dbias");
    if (input_grad == InputGrad::kCompute) {
      expect_close(din.to_doubles(), fd_in, 1e-8, 1e-6, "din (written, not accumulated)");
    } else {
      EXPECT_EQ(din.to_doubles(), din_before) << "din untouched when skipped";
    }
  }
}

TEST(Conv2d, BackwardMatchesFiniteDifferences) {
  for (const ConvCase& c : kCases) conv_check_backward(c, InputGrad::kCompute, WeightGrad::kCompute);
}

TEST(Conv2d, BackwardSkipsInputOrWeightGradient) {
  conv_check_backward(kCases[0], InputGrad::kSkip, WeightGrad::kCompute);
  conv_check_backward(kCases[1], InputGrad::kCompute, WeightGrad::kSkip);
}

TEST(Conv2d, Float32MatchesFloat64) {
  const ConvCase& c = kCases[1];
  const Shape os = out_shape(c);
  std::vector<double> results[2][3];
  const DType dts[2] = {DType::f64, DType::f32};
  for (int k = 0; k < 2; ++k) {
    Tensor in = random_tensor({c.N, c.C, c.H, c.W}, dts[k], 10);
    Tensor weight = random_tensor({c.K, c.C, c.R, c.S}, dts[k], 11);
    Tensor dout = random_tensor(os, dts[k], 12);
    Tensor din = Tensor::empty(in.shape(), dts[k]);
    Tensor dweight = Tensor::zeros(weight.shape(), dts[k]), dbias = Tensor::zeros({c.K}, dts[k]);
    kernels::conv2d_backward(&din, dweight, &dbias, dout, in, weight, c.args);
    results[k][0] = din.to_doubles();
    results[k][1] = dweight.to_doubles();
    results[k][2] = dbias.to_doubles();
  }
  expect_close(results[1][0], results[0][0], 1e-5, 1e-5, "din f32 vs f64");
  expect_close(results[1][1], results[0][1], 1e-5, 1e-5, "dweight f32 vs f64");
  expect_close(results[1][2], results[0][2], 1e-5, 1e-5, "dbias f32 vs f64");
}

// A batch whose column buffer (P*Q*C*R*S = 56*56*64*25 elements per image) exceeds the kernel's
// per-group budget, so each image is its own GEMM: the results must not depend on the grouping.
// Oracle: the direct loops, forward and the backward formulas
// dweight[k,c,r,s] = sum_{n,p,q} dout[n,k,p,q] in[n,c,h,w], din by the transposed sum.
TEST(Conv2d, SeveralColumnGroupsMatchDirectLoops) {
  const ConvCase c{3, 64, 56, 56, 2, 5, 5, {.stride_h = 1, .stride_w = 1, .pad_h = 2, .pad_w = 2},
                   "groups"};
  const Shape os = out_shape(c);
  Tensor in = random_tensor({c.N, c.C, c.H, c.W}, DType::f64, 13);
  Tensor weight = random_tensor({c.K, c.C, c.R, c.S}, DType::f64, 14);
  Tensor out = Tensor::empty(os, DType::f64);
  kernels::conv2d_forward(out, in, weight, nullptr, c.args);
  const std::vector<double> x = in.to_doubles(), w = weight.to_doubles();
  expect_close(out.to_doubles(), conv_naive(c, x, w, nullptr, os[2], os[3]), 1e-12, 1e-12,
               "grouped forward");

  Tensor dout = random_tensor(os, DType::f64, 15);
  Tensor din = Tensor::empty(in.shape(), DType::f64);
  Tensor dweight = Tensor::zeros(weight.shape(), DType::f64);
  kernels::conv2d_backward(&din, dweight, nullptr, dout, in, weight, c.args);
  const std::vector<double> g = dout.to_doubles();
  std::vector<double> dw(w.size(), 0.0), dx(x.size(), 0.0);
  const int64_t P = os[2], Q = os[3];
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t k = 0; k < c.K; ++k) {
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t q = 0; q < Q; ++q) {
          const double gv = g[((n * c.K + k) * P + p) * Q + q];
          for (int64_t ch = 0; ch < c.C; ++ch) {
            for (int64_t r = 0; r < c.R; ++r) {
              for (int64_t s = 0; s < c.S; ++s) {
                const int64_t h = p - 2 + r, wi = q - 2 + s;
                if (h < 0 || h >= c.H || wi < 0 || wi >= c.W) continue;
                const size_t xi = ((n * c.C + ch) * c.H + h) * c.W + wi;
                const size_t wj = ((k * c.C + ch) * c.R + r) * c.S + s;
                dw[wj] += gv * x[xi];
                dx[xi] += gv * w[wj];
              }
            }
          }
        }
      }
    }
  }
  expect_close(dweight.to_doubles(), dw, 1e-10, 1e-10, "grouped dweight");
  expect_close(din.to_doubles(), dx, 1e-10, 1e-10, "grouped din");
}

TEST(Conv2dDeathTest, ShapeMismatchAbortsNamingTheShapes) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";  // OpenMP/BLAS threads may exist
  Tensor in = random_tensor({1, 3, 8, 8}, DType::f64, 16);
  Tensor weight = random_tensor({4, 3, 3, 3}, DType::f64, 17);
  Tensor out = Tensor::empty({1, 4, 8, 8}, DType::f64);  // should be (1, 4, 6, 6)
  EXPECT_DEATH(kernels::conv2d_forward(out, in, weight, nullptr, {}),
               "conv2d_forward: out \\[1, 4, 8, 8\\] is not \\[1, 4, 6, 6\\]");
}

}  // namespace
}  // namespace zt
