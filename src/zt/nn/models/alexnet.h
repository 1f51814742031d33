// AlexNet for 32x32 images (CIFAR-10): the network of DeepSpeed's pipeline-parallelism tutorial,
// the first job its pipeline engine runs, and here the model that shows the pipeline engine is
// not tied to transformers. Layers, as the tutorial writes them in PyTorch:
//
//   Conv2d(3, 64, 11, stride 4, padding 5)   ReLU   MaxPool2d(2)      32x32 ->  8x8 -> 4x4
//   Conv2d(64, 192, 5, padding 2)            ReLU   MaxPool2d(2)       4x4  ->  2x2
//   Conv2d(192, 384, 3, padding 1)           ReLU                      2x2
//   Conv2d(384, 256, 3, padding 1)           ReLU                      2x2
//   Conv2d(256, 256, 3, padding 1)           ReLU   MaxPool2d(2)       2x2  ->  1x1
//   flatten, Linear(256, num_classes), softmax cross-entropy (mean over the images)
//
// Units (ZeRO's and the pipeline's granules): conv1 .. conv5, each its convolution, ReLU and
// pooling, and the classifier with the loss. The input is images (N, 3, 32, 32) f32 (data/cifar.h
// makes them) cast to the compute dtype by conv1; the targets are labels (N) i32 in
// [0, num_classes). Parameter names are the tutorial module's (features.0.weight, ...,
// classifier.weight).
//
// Initialisation: normal with PyTorch's default variance for these layers (its uniform
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) has variance 1/(3 fan_in)); biases zero.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "zt/core/status.h"
#include "zt/nn/model.h"

namespace zt::nn {

struct AlexNetConfig {
  int num_classes = 10;
  int64_t image_size = 32;  // square images
  int64_t channels = 3;
};

class AlexNet : public Model {
 public:
  explicit AlexNet(const AlexNetConfig& c);
  std::string name() const override { return "alexnet"; }
  nlohmann::json config_json() const override;
  Result<int64_t> check_batch(const Tensor& input, const Tensor& targets) const override;
  const AlexNetConfig& config() const { return config_; }

 private:
  AlexNetConfig config_;
};

// Whether `name` names a vision model (`--model alexnet`), and its configuration.
bool is_vision_model(const std::string& name);
Result<std::unique_ptr<AlexNet>> vision_model_named(const std::string& name);

}  // namespace zt::nn
