#include "zt/runtime/inference.h"

#include <chrono>

#include "zt/core/log.h"
#include "zt/kernels/ops.h"
#include "zt/zero/zero_state.h"

namespace zt {

Result<InferenceWeights> InferenceWeights::bind(nn::Model& model, Device device, DType dtype,
                                                uint64_t seed) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16 && dtype != DType::f64) {
    return invalid_argument("weights dtype must be f32, bf16 or f16, not {}", dtype_name(dtype));
  }
  InferenceWeights w;
  w.device_ = device;
  w.dtype_ = dtype;
  int64_t total = 0;
  for (const auto& unit : model.units()) total += unit->flat_numel() * dtype_size(dtype);
  if (device.is_cuda()) {
    const int64_t have = cuda_device_total_memory(device.index);
    if (have > 0 && total > have) {
      return invalid_argument(
          "the model's weights need {:.2f} GiB in {} on {}, which has {:.2f} GiB: use a smaller "
          "dtype (--dtype bf16) or a larger GPU",
          total / 1073741824.0, dtype_name(dtype), device.str(), have / 1073741824.0);
    }
  }
  const Stream s;
  // A large model's weights take a while to read and convert: say how far it got.
  const auto start = std::chrono::steady_clock::now();
  auto reported = start;
  size_t done = 0;
  for (const auto& unit : model.units()) {
    const int64_t n = unit->flat_numel();
    Tensor host = Tensor::empty({n}, DType::f32);
    zero::init_unit_params(*unit, host.data<float>(), seed);
    Tensor staged = device.is_cpu() ? host : host.to(device, s);
    Tensor flat = Tensor::empty({n}, dtype, device, s);
    kernels::cast(flat, staged, s);
    unit->bind_values(flat);
    w.flats_.push_back(flat);
    ++done;
    const auto now = std::chrono::steady_clock::now();
    if (now - reported > std::chrono::seconds(5) && done < model.units().size()) {
      reported = now;
      ZT_LOG_INFO("weights: {} of {} units on {}", done, model.units().size(), device.str());
    }
  }
  s.synchronize();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (secs > 5) {
    ZT_LOG_INFO("weights: {:.2f} GiB in {} on {} in {:.1f} s", total / 1073741824.0,
                dtype_name(dtype), device.str(), secs);
  }
  w.bytes_ = total;
  return w;
}

nn::Context InferenceWeights::context() const {
  nn::Context ctx;
  ctx.device = device_;
  ctx.compute_dtype = dtype_;
  ctx.mode = nn::Mode::kEval;
  return ctx;
}

}  // namespace zt
