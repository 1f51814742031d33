#include "zt/nn/models/alexnet.h"

#include <cmath>

#include "zt/core/assert.h"
#include "zt/kernels/ops.h"

namespace zt::nn {
namespace {

float default_std(int64_t fan_in) {
  return static_cast<float>(std::sqrt(1.0 / (3.0 * static_cast<double>(fan_in))));
}

// Convolution + ReLU (+ 2x2 max pooling), one unit. Keeps its input, the ReLU's output (the
// pooling's input, and what the ReLU backward reads) and the pooling's indices.
class ConvUnit : public Unit {
 public:
  ConvUnit(const std::string& name, const std::string& param, int64_t in_ch, int64_t out_ch,
           int64_t kernel, int64_t stride, int64_t pad, bool pool, bool first)
      : Unit(name), pool_(pool), first_(first) {
    args_ = {.stride_h = stride, .stride_w = stride, .pad_h = pad, .pad_w = pad};
    const float std = default_std(in_ch * kernel * kernel);
    weight_ = &add_param(param + ".weight", {out_ch, in_ch, kernel, kernel}, ParamInit::kNormal,
                         std);
    bias_ = &add_param(param + ".bias", {out_ch}, ParamInit::kZeros);
  }
  bool checkpointable() const override { return true; }
  void release_activations() override {
    in_ = Tensor();
    act_ = Tensor();
    indices_ = Tensor();
  }

  Tensor forward(Context& ctx, const Tensor& in) override {
    in_ = in;
    if (first_ && in.dtype() != ctx.compute_dtype) {
      // The images arrive in f32 (the data's dtype); the network computes in the compute dtype.
      in_ = Tensor::empty(in.shape(), ctx.compute_dtype, ctx.device, ctx.stream);
      kernels::cast(in_, in, ctx.stream);
    }
    auto shape = kernels::conv2d_out_shape(in_.shape(), weight_->shape, args_);
    ZT_ASSERT(shape.is_ok(), "{}: {}", name(), shape.status().message());
    act_ = Tensor::empty(*shape, ctx.compute_dtype, ctx.device, ctx.stream);
    kernels::conv2d_forward(act_, in_, weight_->value, &bias_->value, args_, ctx.stream);
    kernels::activation_forward(act_, act_, kernels::Activation::kRelu, ctx.stream);
    if (!pool_) return act_;
    auto pooled = kernels::maxpool2d_out_shape(act_.shape(), kPool);
    ZT_ASSERT(pooled.is_ok(), "{}: {}", name(), pooled.status().message());
    Tensor out = Tensor::empty(*pooled, ctx.compute_dtype, ctx.device, ctx.stream);
    indices_ = Tensor::empty(*pooled, DType::i32, ctx.device, ctx.stream);
    kernels::maxpool2d_forward(out, indices_, act_, kPool, ctx.stream);
    return out;
  }

  Tensor backward(Context& ctx, const Tensor& dout) override {
    const Stream& s = ctx.stream;
    Tensor dact = Tensor::empty(act_.shape(), ctx.compute_dtype, ctx.device, s);
    if (pool_) {
      kernels::maxpool2d_backward(dact, dout, indices_, s);
    } else {
      dact.copy_from(dout, s);
    }
    // ReLU in place: its output is positive exactly where its input was.
    kernels::activation_backward(dact, dact, act_, kernels::Activation::kRelu, s);
    Tensor din;
    if (!first_) din = Tensor::empty(in_.shape(), ctx.compute_dtype, ctx.device, s);
    Tensor no_grad;
    Tensor& dweight = weight_->grad.defined() ? grad_for_add(*weight_, s) : no_grad;
    Tensor* dbias = bias_->grad.defined() ? &grad_for_add(*bias_, s) : nullptr;
    kernels::conv2d_backward(first_ ? nullptr : &din, dweight, dbias, dact, in_, weight_->value,
                             args_, s);
    release_activations();
    return din;  // undefined for the first unit: the images need no gradient
  }

 private:
  static constexpr kernels::Pool2dArgs kPool{
      .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
  kernels::Conv2dArgs args_;
  bool pool_, first_;
  Param* weight_;
  Param* bias_;
  Tensor in_, act_, indices_;
};

// flatten -> Linear(features, classes) -> cross-entropy (with targets) or logits (without).
class ClassifierUnit : public Unit {
 public:
  ClassifierUnit(int64_t features, int classes) : Unit("classifier"), classes_(classes) {
    weight_ = &add_param("classifier.weight", {classes, features}, ParamInit::kNormal,
                         default_std(features));
    bias_ = &add_param("classifier.bias", {classes}, ParamInit::kZeros);
    features_ = features;
  }
  bool checkpointable() const override { return true; }
  void release_activations() override {
    x_ = Tensor();
    dlogits_ = Tensor();
  }

  Tensor forward(Context& ctx, const Tensor& in) override {
    ZT_ASSERT(in.numel() % features_ == 0, "classifier: input {} does not flatten to {} features",
              in.shape().str(), features_);
    in_shape_ = in.shape();
    x_ = in.reshape({in.numel() / features_, features_});
    const int64_t N = x_.size(0);
    Tensor logits = Tensor::empty({N, classes_}, ctx.compute_dtype, ctx.device, ctx.stream);
    kernels::matmul_forward(logits, x_, weight_->value, &bias_->value, ctx.stream);
    if (ctx.targets == nullptr) return logits;
    ZT_ASSERT(ctx.targets->numel() == N, "classifier: {} labels for {} images",
              ctx.targets->numel(), N);
    Tensor losses =
        Tensor::empty({N}, kernels::accum_dtype(ctx.compute_dtype), ctx.device, ctx.stream);
    if (ctx.mode == Mode::kTrain) {
      // The logits become their own gradient (of the scaled, averaged loss).
      kernels::crossentropy_fused(losses, logits, ctx.targets->reshape({N}), classes_, ctx.dloss,
                                  ctx.stream);
      dlogits_ = logits;
    } else {
      kernels::crossentropy_forward(losses, logits, ctx.targets->reshape({N}), classes_,
                                    ctx.stream);
    }
    return losses;
  }

  Tensor backward(Context& ctx, const Tensor& dout) override {
    const Stream& s = ctx.stream;
    const Tensor& dlogits = dout.defined() ? dout : dlogits_;
    Tensor din = Tensor::empty(x_.shape(), ctx.compute_dtype, ctx.device, s);
    Tensor no_grad;
    Tensor& dweight = weight_->grad.defined() ? grad_for_add(*weight_, s) : no_grad;
    Tensor* dbias = bias_->grad.defined() ? &grad_for_add(*bias_, s) : nullptr;
    kernels::matmul_backward(&din, dweight, dbias, dlogits, x_, weight_->value, s);
    release_activations();
    return din.reshape(in_shape_);  // the last pooling's (N, 256, 1, 1)
  }

 private:
  int classes_;
  int64_t features_;
  Param* weight_;
  Param* bias_;
  Shape in_shape_{};
  Tensor x_, dlogits_;
};

}  // namespace

AlexNet::AlexNet(const AlexNetConfig& c) : config_(c) {
  ZT_ASSERT(c.image_size == 32 && c.channels == 3,
            "AlexNet is built for 32x32 RGB images (CIFAR-10), got {}x{}x{}", c.channels,
            c.image_size, c.image_size);
  units_.push_back(std::make_unique<ConvUnit>("conv1", "features.0", 3, 64, 11, 4, 5, true, true));
  units_.push_back(std::make_unique<ConvUnit>("conv2", "features.3", 64, 192, 5, 1, 2, true, false));
  units_.push_back(std::make_unique<ConvUnit>("conv3", "features.6", 192, 384, 3, 1, 1, false, false));
  units_.push_back(std::make_unique<ConvUnit>("conv4", "features.8", 384, 256, 3, 1, 1, false, false));
  units_.push_back(std::make_unique<ConvUnit>("conv5", "features.10", 256, 256, 3, 1, 1, true, false));
  units_.push_back(std::make_unique<ClassifierUnit>(256, c.num_classes));
}

nlohmann::json AlexNet::config_json() const {
  return {{"model_type", "alexnet"},
          {"num_classes", config_.num_classes},
          {"image_size", config_.image_size},
          {"num_channels", config_.channels}};
}

Result<int64_t> AlexNet::check_batch(const Tensor& input, const Tensor& targets) const {
  const int64_t side = config_.image_size;
  if (input.ndim() != 4 || input.size(1) != config_.channels || input.size(2) != side ||
      input.size(3) != side || input.dtype() != DType::f32) {
    return invalid_argument("alexnet expects images (N, {}, {}, {}) f32, got {} {}",
                            config_.channels, side, side, input.shape().str(),
                            dtype_name(input.dtype()));
  }
  if (targets.ndim() != 1 || targets.size(0) != input.size(0) || targets.dtype() != DType::i32) {
    return invalid_argument("alexnet expects one i32 label per image ({}), got {} {}",
                            input.size(0), targets.shape().str(), dtype_name(targets.dtype()));
  }
  Tensor h = targets.device().is_cpu() ? targets : targets.to(Device::cpu());
  const int32_t* q = h.data<int32_t>();
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (q[i] < 0 || q[i] >= config_.num_classes) {
      return invalid_argument("label {} of image {} is outside the {} classes of alexnet", q[i], i,
                              config_.num_classes);
    }
  }
  return h.numel();
}

bool is_vision_model(const std::string& name) {
  return name == "alexnet";
}

Result<std::unique_ptr<AlexNet>> vision_model_named(const std::string& name) {
  if (name == "alexnet") return std::make_unique<AlexNet>(AlexNetConfig{});
  return not_found("unknown vision model '{}' (known: alexnet)", name);
}

}  // namespace zt::nn
