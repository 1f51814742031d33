// Attention (causal or bidirectional) on cuDNN's fused flash-attention engines (kernels/cuda/cudnn_attention.cc),
// behind flash_attention_forward/backward: same layouts, same lse, so either backend's backward
// follows either's forward. Each returns false, having done nothing, when cuDNN is not used for
// the call (kernels::attention_backend() says kOwn, cuDNN is not installed, or it declines the
// shape); the caller then runs ZeroTrain's own kernels.
#pragma once

#include <cstdint>

#include "zt/core/tensor.h"
#include "zt/kernels/ops.h"

namespace zt::kernels::cuda {

// Whether libcudnn_graph.so.9 (cuDNN 9) was found and loaded.
bool cudnn_loaded();

// qkv and dqkv (B,T,(NH+2KV)*HS) as gqa_attention_* (KV = NH: flash_attention_*'s (B,T,3C)).
bool cudnn_attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t B, int64_t NH,
                             int64_t KV, int64_t T, int64_t HS, bool causal, const Stream& s);
bool cudnn_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int64_t B, int64_t NH,
                              int64_t KV, int64_t T, int64_t HS, bool causal, const Stream& s);

}  // namespace zt::kernels::cuda
