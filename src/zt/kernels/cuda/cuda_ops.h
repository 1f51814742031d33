// CUDA kernels (contracts in kernels/ops.h). Declared without CUDA headers so the dispatcher in
// kernels/ops.cc can call them; implemented in kernels/cuda/*.cu.
#pragma once

#include "zt/kernels/ops.h"

namespace zt::kernels::cuda {
#include "zt/kernels/op_decls.inc"
}  // namespace zt::kernels::cuda
