#include "zt/zero/flat_params.h"

#include <functional>
#include <random>

#include "zt/kernels/ops.h"

namespace zt::zero {

void init_unit_params(nn::Unit& unit, float* out, uint64_t seed) {
  std::fill(out, out + unit.flat_numel(), 0.0f);
  for (nn::Param* p : unit.params()) {
    float* dst = out + p->offset;
    switch (p->init) {
      case nn::ParamInit::kZeros: std::fill(dst, dst + p->numel(), 0.0f); break;
      case nn::ParamInit::kOnes: std::fill(dst, dst + p->numel(), 1.0f); break;
      case nn::ParamInit::kNormal: {
        std::mt19937_64 rng(seed ^ std::hash<std::string>{}(p->name));
        std::normal_distribution<float> dist(0.0f, p->init_std);
        for (int64_t i = 0; i < p->numel(); ++i) dst[i] = dist(rng);
        break;
      }
    }
  }
}

FlatParams::FlatParams(nn::Model& model, const FlatParamsOptions& options, uint64_t seed)
    : options_(options) {
  const Device dev = options.device;
  const int64_t align = kShardAlignElems * options.world_size;
  const DType acc = kernels::accum_dtype(options.compute_dtype);
  for (auto& unit : model.units()) {
    UnitBuffers b;
    b.numel = unit->flat_numel();
    b.padded_numel = (b.numel + align - 1) / align * align;
    Tensor host = Tensor::zeros({b.padded_numel}, DType::f32, Device::cpu());
    init_unit_params(*unit, host.data<float>(), seed);
    if (options.master == MasterCopy::kShared) {
      ZT_ASSERT(options.compute_dtype == DType::f32, "a shared master needs an f32 compute copy");
      b.value = dev.is_cpu() ? host : host.to(dev);
      b.master = b.value;
    } else {
      b.master = dev.is_cpu() ? host : host.to(dev);
      b.value = Tensor::empty({b.padded_numel}, options.compute_dtype, dev);
      kernels::cast(b.value, b.master);
    }
    b.grad = Tensor::zeros({b.padded_numel}, acc, dev);
    for (int i = 0; i < options.optimizer_states; ++i) {
      b.state.push_back(Tensor::zeros({b.padded_numel}, DType::f32, dev));
    }
    unit->bind(b.value, b.grad);
    units_.push_back(std::move(b));
  }
  device_synchronize(dev);
}

ModelStateBytes FlatParams::state_bytes() const {
  ModelStateBytes s;
  for (const auto& b : units_) {
    s.params += static_cast<int64_t>(b.value.nbytes());
    s.grads += static_cast<int64_t>(b.grad.nbytes());
    if (options_.master == MasterCopy::kSeparate) s.master += static_cast<int64_t>(b.master.nbytes());
    for (const auto& t : b.state) s.optimizer += static_cast<int64_t>(t.nbytes());
  }
  return s;
}

void FlatParams::zero_grads(const Stream& s) {
  for (auto& b : units_) b.grad.zero(s);
}

void FlatParams::refresh_compute_copy(DType round_to, const Stream& s) {
  if (options_.master == MasterCopy::kShared) return;
  for (auto& b : units_) {
    if (round_to == b.value.dtype()) {
      kernels::cast(b.value, b.master, s);
    } else {
      // CPU emulation of 16-bit compute: round through the 16-bit type, keep f32 for the kernels.
      Tensor tmp = Tensor::empty({b.padded_numel}, round_to, options_.device, s);
      kernels::cast(tmp, b.master, s);
      kernels::cast(b.value, tmp, s);
    }
  }
}

}  // namespace zt::zero
