// CPU reference kernels: the specification of every op (contracts in kernels/ops.h). Compute in
// the tensors' dtype, f32 or f64; matmuls go through OpenBLAS; loops are OpenMP-parallel.
#pragma once

#include "zt/kernels/ops.h"

namespace zt::kernels::cpu {
#define ZT_OP(name, where, params, args) void name(ZT_OP_LIST params, const Stream& s);
#include "zt/kernels/op_table.inc"
#undef ZT_OP
}  // namespace zt::kernels::cpu
