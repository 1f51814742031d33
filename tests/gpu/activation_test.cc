// CUDA activations (tanh GELU, erf GELU, ReLU, SiLU), forward and backward, against the CPU
// reference in f32, bf16 and f16, on inputs exact in every dtype that reach into the tails
// (|x| up to 4) and include 0 (ReLU's kink); outputs and gradients written over garbage.
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

using kernels::Activation;

struct ActName {
  Activation act;
  const char* name;
};
constexpr ActName kActivations[] = {{Activation::kGeluTanh, "gelu_tanh"},
                                    {Activation::kGeluErf, "gelu_erf"},
                                    {Activation::kRelu, "relu"},
                                    {Activation::kSilu, "silu"},
                                    {Activation::kTanh, "tanh"}};

TEST(ActivationCuda, AllActivationsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // 3001: one element at a time, not a multiple of the block size; 4096: 16-byte chunks.
  for (const int64_t n : {int64_t{3001}, int64_t{4096}}) {
    SCOPED_TRACE(n);
    Tensor in = exact_tensor({n}, 11, 4.0);
    Tensor dout = exact_tensor({n}, 12);
    for (const ActName& a : kActivations) {
      SCOPED_TRACE(a.name);
      Tensor out_ref = Tensor::empty({n}, DType::f32), din_ref = Tensor::empty({n}, DType::f32);
      kernels::activation_forward(out_ref, in, a.act);
      kernels::activation_backward(din_ref, dout, in, a.act);
      for (const DtypeCase& d : kComputeDtypes) {
        SCOPED_TRACE(d.name);
        Tensor in_d = to_cuda(in, d.dtype);
        Tensor dout_d = to_cuda(dout, d.dtype);
        Tensor out_d = to_cuda(random_tensor({n}, DType::f32, 13), d.dtype);
        Tensor din_d = to_cuda(random_tensor({n}, DType::f32, 14), d.dtype);
        kernels::activation_forward(out_d, in_d, a.act);
        kernels::activation_backward(din_d, dout_d, in_d, a.act);
        // One rounding of the result, plus the f32 math library's own few-ulp differences.
        expect_close(values(out_d), values(out_ref), d.rtol, d.rtol, "out");
        expect_close(values(din_d), values(din_ref), d.rtol, d.rtol, "din");
      }
    }
  }
}
}  // namespace
}  // namespace zt::testing
