// CPU reference kernels: the specification of every op (contracts in kernels/ops.h). Compute in
// the tensors' dtype, f32 or f64; matmuls go through OpenBLAS; loops are OpenMP-parallel.
#pragma once

#include "zt/kernels/ops.h"

namespace zt::kernels::cpu {
#include "zt/kernels/op_decls.inc"
}  // namespace zt::kernels::cpu
