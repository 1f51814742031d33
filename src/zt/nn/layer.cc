#include "zt/nn/layer.h"

namespace zt::nn {

std::vector<Param*> Unit::params() {
  std::vector<Param*> out;
  out.reserve(params_.size());
  for (auto& p : params_) out.push_back(p.get());
  return out;
}

Param& Unit::add_param(std::string name, Shape shape, ParamInit init, float std) {
  auto p = std::make_unique<Param>();
  p->name = std::move(name);
  p->shape = shape;
  p->init = init;
  p->init_std = std;
  p->offset = (flat_numel_ + kParamAlignElems - 1) / kParamAlignElems * kParamAlignElems;
  flat_numel_ = p->offset + shape.numel();
  params_.push_back(std::move(p));
  return *params_.back();
}

void Unit::bind_values(const Tensor& flat_value) {
  for (auto& p : params_) {
    p->value = flat_value.defined() ? flat_value.view(p->offset, p->shape) : Tensor();
  }
}

void Unit::bind_grads(const Tensor& flat_grad) {
  for (auto& p : params_) {
    p->grad = flat_grad.defined() ? flat_grad.view(p->offset, p->shape) : Tensor();
  }
}

}  // namespace zt::nn
