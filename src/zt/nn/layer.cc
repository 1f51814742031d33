#include "zt/nn/layer.h"

#include <algorithm>

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

void Unit::bind_grads(const Tensor& flat_grad, bool unwritten, const Stream& s) {
  int64_t covered = 0;  // params_ are in offset order
  for (auto& p : params_) {
    p->grad = flat_grad.defined() ? flat_grad.view(p->offset, p->shape) : Tensor();
    p->grad_unwritten = unwritten && flat_grad.defined();
    if (p->grad_unwritten && p->offset > covered) {
      flat_grad.view(covered, {p->offset - covered}).zero(s);  // an alignment gap
    }
    covered = std::max(covered, p->offset + p->numel());
  }
  if (unwritten && flat_grad.defined() && flat_grad.numel() > covered) {
    flat_grad.view(covered, {flat_grad.numel() - covered}).zero(s);  // the padding after
  }
}

void Unit::clear_unwritten_grads(const Stream& s) {
  for (auto& p : params_) {
    if (p->grad_unwritten) (void)grad_for_add(*p, s);
  }
}

}  // namespace zt::nn
