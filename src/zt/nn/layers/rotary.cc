#include "zt/nn/layers/rotary.h"

#include <cmath>
#include <numbers>

namespace zt::nn {

std::vector<float> rope_inv_freq(const RopeConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(c.theta), exponent);
  }
  if (c.type == "linear") {
    for (float& f : inv) f /= static_cast<float>(c.factor);
  } else if (c.type == "llama3") {
    // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, and the band between
    // the two wavelength bounds blended smoothly.
    const float factor = static_cast<float>(c.factor);
    const float low = static_cast<float>(c.low_freq_factor);
    const float high = static_cast<float>(c.high_freq_factor);
    const float old_ctx = static_cast<float>(c.original_max_positions);
    const float low_wavelen = old_ctx / low;
    const float high_wavelen = old_ctx / high;
    for (float& f : inv) {
      const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      float scaled = wavelen > low_wavelen ? f / factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (old_ctx / wavelen - low) / (high - low);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

Rotary::Rotary(const RopeConfig& config) : config_(config) {
  ZT_ASSERT(config.head_dim > 0 && config.head_dim % 2 == 0,
            "rotary embedding: head_dim {} must be even and positive", config.head_dim);
  const std::vector<float> inv = rope_inv_freq(config);
  const int64_t half = config.head_dim / 2, P = config.max_positions;
  host_.cos = Tensor::empty({P, half}, DType::f32);
  host_.sin = Tensor::empty({P, half}, DType::f32);
  float* c = host_.cos.data<float>();
  float* s = host_.sin.data<float>();
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv[i];  // f32, as transformers multiplies
      c[p * half + i] = std::cos(angle);
      s[p * half + i] = std::sin(angle);
    }
  }
}

Rotary::Tables& Rotary::tables(Device device, const Stream& s) {
  if (device.is_cpu()) return host_;
  auto it = on_device_.find(device.str());
  if (it == on_device_.end()) {
    Tables t{host_.cos.to(device, s), host_.sin.to(device, s)};
    it = on_device_.emplace(device.str(), std::move(t)).first;
  }
  return it->second;
}

}  // namespace zt::nn
