#include "zt/nn/model.h"

namespace zt::nn {

int64_t Model::num_params() const {
  int64_t n = 0;
  for (const auto& u : units_) {
    for (Param* p : const_cast<Unit&>(*u).params()) n += p->numel();
  }
  return n;
}

Tensor Model::forward(Context& ctx, const Tensor& input, UnitHooks* hooks) {
  Tensor x = input;
  for (size_t i = 0; i < units_.size(); ++i) {
    if (hooks != nullptr) hooks->before_forward(static_cast<int>(i));
    x = units_[i]->forward(ctx, x);
    if (hooks != nullptr) hooks->after_forward(static_cast<int>(i));
  }
  return x;
}

void Model::backward(Context& ctx, UnitHooks* hooks) {
  Tensor d;  // the last unit starts from its own saved loss gradient
  for (size_t k = units_.size(); k-- > 0;) {
    if (hooks != nullptr) hooks->before_backward(static_cast<int>(k));
    d = units_[k]->backward(ctx, d);
    if (hooks != nullptr) hooks->after_backward(static_cast<int>(k));
  }
}

}  // namespace zt::nn
