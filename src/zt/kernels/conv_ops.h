// The image ops a convolutional network needs (AlexNet, VGG): 2-D convolution and 2-D max
// pooling over NCHW tensors, forward and backward, with the contracts of kernels/op_table.inc
// (activations and activation gradients written (=), parameter gradients accumulated (+=)).
// ReLU is not here: activation_forward/backward with Activation::kRelu (kernels/ops.h) is it,
// elementwise, so it runs in place (out == in; for the backward of an in-place ReLU pass its
// output as `in`: out > 0 exactly where in > 0).
//
// The ops themselves (conv2d_forward/backward, maxpool2d_forward/backward) are entries of
// kernels/op_table.inc; this header holds their argument types and shape rules. The CPU
// reference is kernels/cpu/conv2d.cc and pool.cc; on GPUs the convolution runs on cuDNN
// (kernels/cuda/cudnn_conv.cc), the pooling on ZeroTrain's own kernel (kernels/cuda/pool.cu).
//
// Semantics are PyTorch's (torch.nn.functional.conv2d and max_pool2d with dilation 1, groups 1,
// ceil_mode false): output size floor((in + 2 pad - kernel) / stride) + 1; convolution pads
// with zeros, pooling with -inf; a pooling window keeps the first maximum in row-major order
// (a NaN counts as a maximum).
#pragma once

#include <cstdint>

#include "zt/core/status.h"
#include "zt/core/tensor.h"

namespace zt::kernels {

// Stride and zero padding of a convolution, per spatial axis (h: rows, w: columns).
struct Conv2dArgs {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
};

// Window, stride and -inf padding of a pooling, per spatial axis. PyTorch's MaxPool2d(k) has
// stride k; write it out here. Padding may be at most half the window.
struct Pool2dArgs {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
};

// floor((in + 2 pad - kernel) / stride) + 1, or <= 0 when the padded input is smaller than the
// window.
constexpr int64_t window_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  const int64_t span = in + 2 * pad - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

// Output shapes, for builders that take the geometry from a user (a model config): an input
// too small for the window, a channel mismatch, a stride < 1 or padding out of range comes back
// as a Status naming the shapes. The kernels themselves assert these (a bug by then).
// in (N,C,H,W), weight (K,C,R,S) -> (N,K,P,Q).
Result<Shape> conv2d_out_shape(const Shape& in, const Shape& weight, const Conv2dArgs& args);
// in (N,C,H,W) -> (N,C,P,Q).
Result<Shape> maxpool2d_out_shape(const Shape& in, const Pool2dArgs& args);

}  // namespace zt::kernels
