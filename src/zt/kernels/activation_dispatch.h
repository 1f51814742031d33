// Calls f(ActTag<A>{}) with the activation A as a compile-time constant, so that the backends'
// elementwise loops (kernels/cpu/activation.cc, kernels/cuda/activation.cu) carry no per-element
// switch. Generated from the one list of activations (ZT_ACTIVATIONS in kernels/ops.h).
#pragma once

#include "zt/core/assert.h"
#include "zt/kernels/ops.h"

namespace zt::kernels {

template <Activation A>
struct ActTag {
  static constexpr Activation value = A;
};

template <typename F>
void dispatch_activation(Activation act, const char* op, F&& f) {
  switch (act) {
#define ZT_ACTIVATION_CASE(name)   \
  case Activation::name:           \
    f(ActTag<Activation::name>{}); \
    return;
    ZT_ACTIVATIONS(ZT_ACTIVATION_CASE)
#undef ZT_ACTIVATION_CASE
  }
  ZT_ASSERT(false, "{}: unknown activation {}", op, static_cast<int>(act));
}

}  // namespace zt::kernels
