// CUDA kernels (contracts in kernels/ops.h). Declared without CUDA headers so the dispatcher in
// kernels/ops.cc can call them; implemented in kernels/cuda/*.cu.
#pragma once

#include "zt/kernels/ops.h"

namespace zt::kernels::cuda {
#define ZT_OP(name, where, params, args) void name(ZT_OP_LIST params, const Stream& s);
#include "zt/kernels/op_table.inc"
#undef ZT_OP
}  // namespace zt::kernels::cuda
