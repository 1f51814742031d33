// AlexNet (nn/models/alexnet.h) against PyTorch: tests/fixtures/vision/alexnet holds 12 CIFAR-10
// records and what torch computed from them in float64 with the tutorial network
// (make_alexnet_fixture.py): the mean cross-entropy, the logits, and each parameter's gradient at
// 256 sampled elements with its sum and sum of squares. The weights are a formula both sides
// compute (weight_value below). Here the records go through data/cifar.h (torchvision's ToTensor
// + Normalize with ImageNet's statistics) and the network through the CPU kernels in f32; the
// loss, logits and gradients must agree to f32 rounding. Also: the batch checks name what is
// wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "zt/checkpoint/safetensors.h"
#include "zt/data/cifar.h"
#include "zt/nn/models/alexnet.h"

namespace zt::nn {
namespace {

const std::string kDir = ZT_SOURCE_DIR "/tests/fixtures/vision/alexnet/";

std::vector<float> read_all(const ckpt::SafetensorsFile& f, const std::string& name) {
  auto e = f.find(name);
  EXPECT_TRUE(e.is_ok()) << name;
  if (!e.is_ok()) return {};
  std::vector<float> v(static_cast<size_t>((*e)->numel));
  EXPECT_TRUE(f.read(name, 0, (*e)->numel, v.data()).is_ok());
  return v;
}

// Element i of a parameter of fan-in `fan_in`: the fixture's formula (make_alexnet_fixture.py).
float weight_value(int64_t i, int64_t fan_in, int64_t salt) {
  const int64_t r = (i * 2654435761LL + salt) % 4096;
  return static_cast<float>((static_cast<double>(r) / 2048.0 - 1.0) /
                            std::sqrt(static_cast<double>(fan_in)));
}

// Relative to the tensor's largest magnitude: the worst element difference.
double worst_diff(const std::vector<double>& got, const std::vector<float>& want) {
  double scale = 1e-30, worst = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - static_cast<double>(want[i])) / scale);
  }
  return worst;
}

TEST(AlexNet, MatchesPyTorch) {
  auto expected = ckpt::SafetensorsFile::open(kDir + "expected.safetensors");
  ASSERT_TRUE(expected.is_ok()) << expected.status().message();
  auto data = CifarDataset::open(kDir + "images.bin");
  ASSERT_TRUE(data.is_ok()) << data.status().message();
  const int64_t n = data->size();
  ASSERT_EQ(n, 12);

  AlexNet model{AlexNetConfig{}};
  // Every unit's flat buffers: values from the fixture's formula, gradients zero. A bias's
  // fan-in is its layer weight's (the unit's parameters come in weight, bias order).
  std::vector<Tensor> values, grads;
  for (auto& u : model.units()) {
    Tensor v = Tensor::zeros({u->flat_numel()}, DType::f32);
    int64_t fan_in = 0;
    for (Param* p : u->params()) {
      const bool bias = p->shape.ndim() == 1;
      if (!bias) fan_in = p->numel() / p->shape[0];
      for (int64_t i = 0; i < p->numel(); ++i) {
        v.data<float>()[p->offset + i] = weight_value(i, fan_in, bias ? 1 : 0);
      }
    }
    Tensor g = Tensor::zeros({u->flat_numel()}, DType::f32);
    u->bind(v, g);
    values.push_back(v);
    grads.push_back(g);
  }
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  CifarBatch b = data->batch(idx, kCifarNormalizeImagenet);
  auto counted = model.check_batch(b.images, b.labels);
  ASSERT_TRUE(counted.is_ok()) << counted.status().message();
  EXPECT_EQ(*counted, n);

  // Logits (no targets), then the loss and its gradient (targets, dloss = 1/n: the mean).
  Context eval;
  eval.mode = Mode::kEval;
  std::vector<double> logits = model.forward(eval, b.images).to_doubles();
  EXPECT_LT(worst_diff(logits, read_all(*expected, "logits")), 2e-5);

  Context ctx;
  ctx.targets = &b.labels;
  ctx.dloss = 1.0f / static_cast<float>(n);
  std::vector<double> losses = model.forward(ctx, b.images).to_doubles();
  double loss = 0;
  for (double l : losses) loss += l;
  loss /= static_cast<double>(n);
  const float want_loss = read_all(*expected, "loss")[0];
  EXPECT_NEAR(loss, want_loss, 2e-5 * std::fabs(want_loss)) << "loss";
  model.backward(ctx);
  for (auto& u : model.units()) {
    for (Param* p : u->params()) {
      const std::vector<double> g = p->grad.to_doubles();
      std::vector<double> sampled;
      for (int64_t j = 0; j < 256; ++j) sampled.push_back(g[static_cast<size_t>((j * 7919) % p->numel())]);
      EXPECT_LT(worst_diff(sampled, read_all(*expected, "grad." + p->name)), 1e-4) << p->name;
      double sum = 0, sq = 0;
      for (double x : g) {
        sum += x;
        sq += x * x;
      }
      const std::vector<float> want = read_all(*expected, "gsum." + p->name);
      ASSERT_EQ(want.size(), 2u);
      EXPECT_NEAR(std::sqrt(sq), std::sqrt(want[1]), 1e-4 * std::sqrt(want[1])) << p->name;
      // The sum cancels: compared at the scale of the tensor's norm.
      EXPECT_NEAR(sum, want[0], 1e-5 * std::sqrt(want[1] * static_cast<double>(g.size())))
          << p->name;
    }
  }
}

TEST(AlexNet, BatchChecksNameTheProblem) {
  AlexNet model{AlexNetConfig{}};
  Tensor images = Tensor::zeros({2, 3, 32, 32}, DType::f32);
  Tensor labels = Tensor::from_doubles({1, 10}, {2}, DType::i32);
  auto r = model.check_batch(images, labels);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("label 10 of image 1"), std::string::npos)
      << r.status().message();
  auto tokens = model.check_batch(Tensor::zeros({2, 32}, DType::i32), labels);
  ASSERT_FALSE(tokens.is_ok());
  EXPECT_NE(tokens.status().message().find("images (N, 3, 32, 32) f32"), std::string::npos)
      << tokens.status().message();
  auto count = model.check_batch(images, Tensor::zeros({3}, DType::i32));
  ASSERT_FALSE(count.is_ok());
  EXPECT_NE(count.status().message().find("one i32 label per image (2)"), std::string::npos)
      << count.status().message();
}

}  // namespace
}  // namespace zt::nn
