// Weights for evaluation and generation without training (`zt eval`, `zt generate`): each unit's
// parameters in one flat buffer on the device, in the compute dtype, filled from the model's
// weight files (or its family's initialisation); no gradients, master copy or optimizer state,
// so a model needs only its weights' memory. The buffers live as long as this object.
#pragma once

#include <vector>

#include "zt/core/status.h"
#include "zt/core/tensor.h"
#include "zt/nn/layer.h"
#include "zt/nn/model.h"

namespace zt {

class InferenceWeights {
 public:
  // Binds every unit of `model` to new buffers on `device` in `dtype` (f32, bf16 or f16; f64 on
  // the CPU too). Fails, naming the size, when the device cannot hold them.
  static Result<InferenceWeights> bind(nn::Model& model, Device device, DType dtype,
                                       uint64_t seed = 1234);
  // A forward-only context on the weights' device and dtype.
  nn::Context context() const;
  int64_t bytes() const { return bytes_; }

 private:
  std::vector<Tensor> flats_;
  Device device_ = Device::cpu();
  DType dtype_ = DType::f32;
  int64_t bytes_ = 0;
};

}  // namespace zt
