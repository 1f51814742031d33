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

void Unit::bind(const Tensor& flat_value, const Tensor& flat_grad) {
  for (auto& p : params_) {
    if (flat_value.defined()) p->value = flat_value.view(p->offset, p->shape);
    if (flat_grad.defined()) p->grad = flat_grad.view(p->offset, p->shape);
  }
}

}  // namespace zt::nn
