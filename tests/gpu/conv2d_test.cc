// The CUDA image ops against the CPU reference (kernels/cpu/conv2d.cc, pool.cc): cuDNN's
// convolution forward, data and filter gradients and the bias kernels (kernels/cuda/
// cudnn_conv.cc, pool.cu), and the max pooling, on every layer shape of the CIFAR AlexNet plus
// odd ones (a stride that skips columns, padding, a non-square kernel), in f32, bf16 and f16.
// Inputs are exact in every dtype (gpu_test_util.h), so one f32 reference serves them all; the
// tolerances cover the GPU's own roundings, scaled by the length of each sum (C R S terms).
// The filter gradient accumulates (+=) onto what the buffer held; the pooling's indices must
// equal the CPU's exactly (the same first maximum).
#include <gtest/gtest.h>

#include <cmath>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

using kernels::Conv2dArgs;
using kernels::Pool2dArgs;

struct ConvCase {
  int64_t N, C, H, W, K, R, S;
  Conv2dArgs a;
  const char* name;
};

constexpr ConvCase kConvCases[] = {
    {2, 3, 32, 32, 64, 11, 11, {4, 4, 5, 5}, "alexnet conv1"},
    {2, 64, 4, 4, 192, 5, 5, {1, 1, 2, 2}, "alexnet conv2"},
    {2, 192, 2, 2, 384, 3, 3, {1, 1, 1, 1}, "alexnet conv3"},
    {3, 5, 9, 7, 6, 3, 2, {2, 1, 1, 0}, "odd: stride 2x1, kernel 3x2"},
};

Shape out_shape(const ConvCase& c) {
  return *kernels::conv2d_out_shape({c.N, c.C, c.H, c.W}, {c.K, c.C, c.R, c.S}, c.a);
}

TEST(Conv2dCuda, ForwardAndBackwardMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(c.name);
    const Shape in_s{c.N, c.C, c.H, c.W}, w_s{c.K, c.C, c.R, c.S}, o_s = out_shape(c);
    Tensor in = exact_tensor(in_s, 1);
    Tensor w = exact_tensor(w_s, 2, 0.25);
    Tensor bias = exact_tensor({c.K}, 3);
    Tensor dout = exact_tensor(o_s, 4);
    Tensor dw0 = exact_tensor(w_s, 5);  // what the gradient buffer held before
    Tensor db0 = exact_tensor({c.K}, 6);
    Tensor out_ref = Tensor::empty(o_s, DType::f32), din_ref = Tensor::empty(in_s, DType::f32);
    Tensor dw_ref = Tensor::empty(w_s, DType::f32), db_ref = Tensor::empty({c.K}, DType::f32);
    dw_ref.copy_from(dw0);
    db_ref.copy_from(db0);
    kernels::conv2d_forward(out_ref, in, w, &bias, c.a);
    kernels::conv2d_backward(&din_ref, dw_ref, &db_ref, dout, in, w, c.a);
    const double terms = static_cast<double>(c.C * c.R * c.S);
    for (const DtypeCase& d : kComputeDtypes) {
      SCOPED_TRACE(d.name);
      Tensor out = to_cuda(random_tensor(o_s, DType::f32, 7), d.dtype);
      Tensor din = to_cuda(random_tensor(in_s, DType::f32, 8), d.dtype);
      Tensor dw = to_cuda(dw0, DType::f32);
      Tensor db = to_cuda(db0, DType::f32);
      Tensor bias_d = to_cuda(bias, d.dtype);
      kernels::conv2d_forward(out, to_cuda(in, d.dtype), to_cuda(w, d.dtype), &bias_d, c.a);
      kernels::conv2d_backward(&din, dw, &db, to_cuda(dout, d.dtype), to_cuda(in, d.dtype),
                               to_cuda(w, d.dtype), c.a);
      // f32 sums in another order (1e-6 per term); 16-bit outputs one rounding.
      const double tol = d.dtype == DType::f32 ? 1e-6 * std::sqrt(terms) + 1e-6 : d.rtol;
      expect_close(values(out), values(out_ref), tol, tol, "out");
      expect_close(values(din), values(din_ref), tol, tol, "din");
      // The filter gradient and the bias gradient sum over N P Q products into f32.
      expect_close(values(dw), values(dw_ref), 1e-5, 1e-5, "dweight");
      expect_close(values(db), values(db_ref), 1e-5, 1e-5, "dbias");
    }
  }
}

TEST(Conv2dCuda, FrozenWeightAndNoInputGradient) {
  ZT_SKIP_WITHOUT_CUDA();
  const ConvCase& c = kConvCases[0];
  const Shape in_s{c.N, c.C, c.H, c.W}, w_s{c.K, c.C, c.R, c.S}, o_s = out_shape(c);
  Tensor in = exact_tensor(in_s, 1), w = exact_tensor(w_s, 2, 0.25), dout = exact_tensor(o_s, 4);
  Tensor dw_ref = Tensor::zeros(w_s, DType::f32);
  Tensor none;
  kernels::conv2d_backward(nullptr, dw_ref, nullptr, dout, in, w, c.a);
  Tensor dw = to_cuda(Tensor::zeros(w_s, DType::f32), DType::f32);
  kernels::conv2d_backward(nullptr, dw, nullptr, to_cuda(dout, DType::bf16),
                           to_cuda(in, DType::bf16), to_cuda(w, DType::bf16), c.a);
  expect_close(values(dw), values(dw_ref), 1e-5, 1e-5, "dweight without din");
  Tensor din = to_cuda(Tensor::zeros(in_s, DType::f32), DType::f32);
  kernels::conv2d_backward(&din, none, nullptr, to_cuda(dout, DType::f32),
                           to_cuda(in, DType::f32), to_cuda(w, DType::f32), c.a);
  Tensor din_ref = Tensor::empty(in_s, DType::f32);
  Tensor none_ref;
  kernels::conv2d_backward(&din_ref, none_ref, nullptr, dout, in, w, c.a);
  expect_close(values(din), values(din_ref), 1e-5, 1e-5, "din of a frozen weight");
}

struct PoolCase {
  int64_t N, C, H, W;
  Pool2dArgs a;
  const char* name;
};

TEST(MaxPool2dCuda, MatchesCpuIndicesExactly) {
  ZT_SKIP_WITHOUT_CUDA();
  const PoolCase cases[] = {
      {2, 64, 8, 8, {2, 2, 2, 2, 0, 0}, "alexnet 2x2"},
      {2, 3, 9, 11, {3, 3, 2, 2, 1, 1}, "3x3 stride 2 padded (overlapping windows)"},
  };
  for (const PoolCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Shape in_s{c.N, c.C, c.H, c.W};
    const Shape o_s = *kernels::maxpool2d_out_shape(in_s, c.a);
    // Coarse values: ties inside windows, so "the first maximum" matters.
    Tensor in = exact_tensor(in_s, 21, 0.0625);
    std::vector<double> v = in.to_doubles();
    for (double& x : v) x = std::round(x * 64.0) / 4.0;
    in = Tensor::from_doubles(v, in_s, DType::f32);
    Tensor dout = exact_tensor(o_s, 22);
    Tensor out_ref = Tensor::empty(o_s, DType::f32), idx_ref = Tensor::empty(o_s, DType::i32);
    Tensor din_ref = Tensor::empty(in_s, DType::f32);
    kernels::maxpool2d_forward(out_ref, idx_ref, in, c.a);
    kernels::maxpool2d_backward(din_ref, dout, idx_ref);
    for (const DtypeCase& d : kComputeDtypes) {
      SCOPED_TRACE(d.name);
      Tensor out = to_cuda(random_tensor(o_s, DType::f32, 7), d.dtype);
      Tensor idx = Tensor::empty(o_s, DType::i32, Device::cuda(0));
      Tensor din = to_cuda(random_tensor(in_s, DType::f32, 8), d.dtype);
      kernels::maxpool2d_forward(out, idx, to_cuda(in, d.dtype), c.a);
      kernels::maxpool2d_backward(din, to_cuda(dout, d.dtype), idx);
      EXPECT_EQ(idx.to(Device::cpu()).to_doubles(), idx_ref.to_doubles());
      EXPECT_EQ(values(out), values(out_ref));  // the maxima themselves: exact in every dtype
      expect_close(values(din), values(din_ref), d.rtol, d.rtol, "din");
    }
  }
}

}  // namespace
}  // namespace zt::testing
