// AlexNet's convolutional stacks through the CPU conv2d, ReLU (activation_* with kRelu, in
// place) and max-pool ops, forward and backward, layer by layer as a model would chain them:
//   - the CIFAR AlexNet (conv 3->64 k11 s4 p5, pool 2; 64->192 k5 p2, pool 2; 192->384 k3 p1;
//     384->256; 256->256; pool 2) on 32x32 images, batch 2, in f32: every shape, finite
//     non-zero gradients; and in f64 the whole chain's gradient against central finite
//     differences along random directions (a wrong link anywhere in the chain shows);
//   - torchvision's AlexNet features (conv k11 s4 p2, pool k3 s2, ..., the model of DeepSpeed's
//     pipeline example) on 224x224 images, batch 2: every shape, finite gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using kernels::Conv2dArgs;
using kernels::Pool2dArgs;
using testing::random_tensor;
using testing::random_weights;
using testing::weighted_sum;

enum class Kind { kConv, kRelu, kPool };

struct LayerSpec {
  Kind kind;
  int64_t cin = 0, cout = 0, k = 0;  // conv
  Conv2dArgs conv{};
  Pool2dArgs pool{};
};

LayerSpec conv(int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t pad) {
  return {.kind = Kind::kConv, .cin = cin, .cout = cout, .k = k,
          .conv = {.stride_h = stride, .stride_w = stride, .pad_h = pad, .pad_w = pad}};
}
LayerSpec relu() { return {.kind = Kind::kRelu}; }
LayerSpec pool(int64_t k, int64_t stride) {
  return {.kind = Kind::kPool,
          .pool = {.kernel_h = k, .kernel_w = k, .stride_h = stride, .stride_w = stride}};
}

// The CIFAR AlexNet's features and torchvision's AlexNet features.
std::vector<LayerSpec> alexnet_cifar() {
  return {conv(3, 64, 11, 4, 5), relu(), pool(2, 2), conv(64, 192, 5, 1, 2), relu(), pool(2, 2),
          conv(192, 384, 3, 1, 1), relu(), conv(384, 256, 3, 1, 1), relu(),
          conv(256, 256, 3, 1, 1), relu(), pool(2, 2)};
}
std::vector<LayerSpec> alexnet_torchvision() {
  return {conv(3, 64, 11, 4, 2), relu(), pool(3, 2), conv(64, 192, 5, 1, 2), relu(), pool(3, 2),
          conv(192, 384, 3, 1, 1), relu(), conv(384, 256, 3, 1, 1), relu(),
          conv(256, 256, 3, 1, 1), relu(), pool(3, 2)};
}

// A chain of layers with its parameters, activations and gradients. ReLU runs in place on the
// conv output (nn.ReLU(inplace=True)); its backward reads that output.
struct Net {
  std::vector<LayerSpec> specs;
  std::vector<Tensor> weight, bias, dweight, dbias;  // per layer; undefined unless conv
  std::vector<Tensor> acts;                          // acts[i] = input of layer i; last = output
  std::vector<Tensor> indices;                       // pool argmaxes

  Net(std::vector<LayerSpec> s, DType dt, uint64_t seed) : specs(std::move(s)) {
    const size_t L = specs.size();
    weight.resize(L), bias.resize(L), dweight.resize(L), dbias.resize(L), indices.resize(L);
    for (size_t i = 0; i < L; ++i) {
      const LayerSpec& l = specs[i];
      if (l.kind != Kind::kConv) continue;
      // torch's default conv init bound, 1/sqrt(fan_in): activations stay O(1) through the stack.
      const double bound = 1.0 / std::sqrt(static_cast<double>(l.cin * l.k * l.k));
      weight[i] = random_tensor({l.cout, l.cin, l.k, l.k}, dt, seed + 2 * i, -bound, bound);
      bias[i] = random_tensor({l.cout}, dt, seed + 2 * i + 1, -bound, bound);
      dweight[i] = Tensor::zeros(weight[i].shape(), dt);
      dbias[i] = Tensor::zeros(bias[i].shape(), dt);
    }
  }

  const Tensor& forward(const Tensor& x) {
    acts.assign(1, x);
    for (size_t i = 0; i < specs.size(); ++i) {
      const LayerSpec& l = specs[i];
      const Tensor& in = acts.back();
      if (l.kind == Kind::kConv) {
        auto s = kernels::conv2d_out_shape(in.shape(), weight[i].shape(), l.conv);
        EXPECT_TRUE(s.is_ok()) << s.status().message();
        Tensor out = Tensor::empty(*s, in.dtype());
        kernels::conv2d_forward(out, in, weight[i], &bias[i], l.conv);
        acts.push_back(out);
      } else if (l.kind == Kind::kRelu) {
        Tensor y = acts.back();  // the same storage: in place
        kernels::activation_forward(y, y, kernels::Activation::kRelu);
        acts.push_back(y);
      } else {
        auto s = kernels::maxpool2d_out_shape(in.shape(), l.pool);
        EXPECT_TRUE(s.is_ok()) << s.status().message();
        Tensor out = Tensor::empty(*s, in.dtype());
        indices[i] = Tensor::empty(*s, DType::i32);
        kernels::maxpool2d_forward(out, indices[i], in, l.pool);
        acts.push_back(out);
      }
    }
    return acts.back();
  }

  // Gradient of the input from the output's; parameter gradients accumulate.
  Tensor backward(const Tensor& dout) {
    Tensor g = dout.clone();
    for (size_t i = specs.size(); i-- > 0;) {
      const LayerSpec& l = specs[i];
      if (l.kind == Kind::kConv) {
        Tensor din = Tensor::empty(acts[i].shape(), g.dtype());
        kernels::conv2d_backward(&din, dweight[i], &dbias[i], g, acts[i], weight[i], l.conv);
        g = din;
      } else if (l.kind == Kind::kRelu) {
        // In place: acts[i] was overwritten by the ReLU; its output is > 0 where its input was.
        kernels::activation_backward(g, g, acts[i + 1], kernels::Activation::kRelu);
      } else {
        Tensor din = Tensor::empty(acts[i].shape(), g.dtype());
        kernels::maxpool2d_backward(din, g, indices[i]);
        g = din;
      }
    }
    return g;
  }
};

bool all_finite(const Tensor& t) {
  for (double v : t.to_doubles()) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}
double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_doubles()) m = std::max(m, std::fabs(v));
  return m;
}

void run_and_check_shapes(std::vector<LayerSpec> specs, int64_t side,
                          const std::vector<Shape>& expected_shapes) {
  Net net(std::move(specs), DType::f32, 100);
  Tensor x = random_tensor({2, 3, side, side}, DType::f32, 1);
  const Tensor& y = net.forward(x);
  ASSERT_EQ(net.acts.size(), expected_shapes.size() + 1);
  for (size_t i = 0; i < expected_shapes.size(); ++i) {
    EXPECT_EQ(net.acts[i + 1].shape(), expected_shapes[i]) << "after layer " << i;
  }
  EXPECT_TRUE(all_finite(y));
  EXPECT_GT(max_abs(y), 0.0);
  Tensor dout = random_tensor(y.shape(), DType::f32, 2);
  Tensor dx = net.backward(dout);
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_TRUE(all_finite(dx));
  EXPECT_GT(max_abs(dx), 0.0);
  for (size_t i = 0; i < net.specs.size(); ++i) {
    if (net.specs[i].kind != Kind::kConv) continue;
    EXPECT_TRUE(all_finite(net.dweight[i]) && all_finite(net.dbias[i])) << "layer " << i;
    EXPECT_GT(max_abs(net.dweight[i]), 0.0) << "layer " << i;
  }
}

TEST(ConvNet, AlexNetCifarShapesForwardBackwardBatch2) {
  run_and_check_shapes(alexnet_cifar(), 32,
                       {{2, 64, 8, 8}, {2, 64, 8, 8}, {2, 64, 4, 4},        // conv1 relu pool
                        {2, 192, 4, 4}, {2, 192, 4, 4}, {2, 192, 2, 2},     // conv2 relu pool
                        {2, 384, 2, 2}, {2, 384, 2, 2},                     // conv3 relu
                        {2, 256, 2, 2}, {2, 256, 2, 2},                     // conv4 relu
                        {2, 256, 2, 2}, {2, 256, 2, 2}, {2, 256, 1, 1}});  // conv5 relu pool
}

TEST(ConvNet, AlexNetTorchvisionFeaturesShapesForwardBackwardBatch2) {
  run_and_check_shapes(alexnet_torchvision(), 224,
                       {{2, 64, 55, 55}, {2, 64, 55, 55}, {2, 64, 27, 27},
                        {2, 192, 27, 27}, {2, 192, 27, 27}, {2, 192, 13, 13},
                        {2, 384, 13, 13}, {2, 384, 13, 13},
                        {2, 256, 13, 13}, {2, 256, 13, 13},
                        {2, 256, 13, 13}, {2, 256, 13, 13}, {2, 256, 6, 6}});
}

// d/dh L(theta + h v) at 0, by central differences, against <grad, v>: for the input, the
// first conv's weight and the last conv's bias, through every layer of the CIFAR AlexNet in f64.
TEST(ConvNet, AlexNetCifarChainGradientMatchesFiniteDifferences) {
  Net net(alexnet_cifar(), DType::f64, 200);
  Tensor x = random_tensor({2, 3, 32, 32}, DType::f64, 3);
  const Shape out_shape = net.forward(x).shape();
  const std::vector<double> w = random_weights(out_shape.numel(), 4);
  auto loss = [&] { return weighted_sum(net.forward(x), w); };
  net.forward(x);
  Tensor dx = net.backward(Tensor::from_doubles(w, out_shape, DType::f64));

  const size_t first_conv = 0, last_conv = 10;
  struct Target {
    Tensor* t;
    const Tensor* grad;
    const char* name;
  } targets[] = {{&x, &dx, "input"},
                 {&net.weight[first_conv], &net.dweight[first_conv], "conv1 weight"},
                 {&net.bias[last_conv], &net.dbias[last_conv], "conv5 bias"},
                 {&net.weight[6], &net.dweight[6], "conv3 weight"}};
  for (const Target& tg : targets) {
    SCOPED_TRACE(tg.name);
    // A unit direction: each element moves by about h / sqrt(numel), so no ReLU input and no
    // pair of pooled values (spaced ~1e-3 at random) is crossed by the +-h steps, which would
    // put a kink between them and spoil the difference quotient.
    std::vector<double> v = random_weights(tg.t->numel(), 5);
    double norm = 0;
    for (double e : v) norm += e * e;
    for (double& e : v) e /= std::sqrt(norm);
    const std::vector<double> base = tg.t->to_doubles(), grad = tg.grad->to_doubles();
    double analytic = 0;
    for (size_t i = 0; i < v.size(); ++i) analytic += grad[i] * v[i];
    const double h = 1e-6;
    auto at = [&](double step) {
      std::vector<double> moved = base;
      for (size_t i = 0; i < v.size(); ++i) moved[i] += step * v[i];
      tg.t->copy_from(Tensor::from_doubles(moved, tg.t->shape(), DType::f64));
      const double l = loss();
      tg.t->copy_from(Tensor::from_doubles(base, tg.t->shape(), DType::f64));
      return l;
    };
    const double numeric = (at(h) - at(-h)) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 1e-6 * (1 + std::fabs(numeric)));
    EXPECT_GT(std::fabs(analytic), 1e-8);  // a zero gradient would pass the check vacuously
  }
}

TEST(ConvNet, InPlaceReluMatchesOutOfPlace) {
  Tensor x = random_tensor({2, 4, 5, 5}, DType::f32, 6);
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  kernels::activation_forward(out, x, kernels::Activation::kRelu);
  Tensor dout = random_tensor(x.shape(), DType::f32, 7);
  Tensor din = Tensor::empty(x.shape(), DType::f32);
  kernels::activation_backward(din, dout, x, kernels::Activation::kRelu);

  Tensor y = x.clone(), g = dout.clone();
  kernels::activation_forward(y, y, kernels::Activation::kRelu);
  kernels::activation_backward(g, g, y, kernels::Activation::kRelu);  // from the output
  EXPECT_EQ(y.to_floats(), out.to_floats());
  EXPECT_EQ(g.to_floats(), din.to_floats());
  // And by hand: max(x, 0), and the gradient passes where x > 0 only.
  const std::vector<float> xs = x.to_floats(), gs = g.to_floats(), ds = dout.to_floats();
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(gs[i], xs[i] > 0 ? ds[i] : 0.0f) << i;
  }
}

}  // namespace
}  // namespace zt
