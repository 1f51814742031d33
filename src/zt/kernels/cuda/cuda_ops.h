// CUDA kernels (contracts in kernels/ops.h). Declared without CUDA headers so the dispatcher in
// kernels/ops.cc can call them; implemented in kernels/cuda/*.cu.
#pragma once

#include "zt/kernels/ops.h"

namespace zt::kernels::cuda {
#define ZT_OP(name, where, params, args) void name(ZT_OP_LIST params, const Stream& s);
#include "zt/kernels/op_table.inc"
#undef ZT_OP

// The convolution's bias, on ZeroTrain's kernels (cuda/pool.cu) beside cuDNN's convolution
// (cuda/cudnn_conv.cc): out (N,K,P,Q) += bias (K) per channel; dbias (K, f32) += the sum of
// dout (N,K,P,Q) over everything but the channel.
void conv_bias_add(Tensor& out, const Tensor& bias, const Stream& s);
void conv_bias_grad(Tensor& dbias, const Tensor& dout, const Stream& s);
}  // namespace zt::kernels::cuda
