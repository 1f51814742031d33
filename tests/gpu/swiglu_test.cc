// CUDA SwiGLU forward and backward against the CPU reference in f32, bf16 and f16, on inputs
// exact in every dtype (gate and up in [-4, 4]); dgate_up written over garbage and in place over
// gate_up.
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

// F = 301 takes the one-element path; F = 256 the 16-byte vector path (F a multiple of 8 bf16 or
// 4 f32 values).
void check_swiglu(int64_t rows, int64_t F) {
  Tensor gate_up = exact_tensor({rows, 2 * F}, 21, 4.0);
  Tensor dout = exact_tensor({rows, F}, 22);
  Tensor out_ref = Tensor::empty({rows, F}, DType::f32);
  Tensor dgu_ref = Tensor::empty({rows, 2 * F}, DType::f32);
  kernels::swiglu_forward(out_ref, gate_up);
  kernels::swiglu_backward(dgu_ref, dout, gate_up);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor gu_d = to_cuda(gate_up, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor out_d = to_cuda(random_tensor({rows, F}, DType::f32, 23), d.dtype);
    Tensor dgu_d = to_cuda(random_tensor({rows, 2 * F}, DType::f32, 24), d.dtype);
    kernels::swiglu_forward(out_d, gu_d);
    kernels::swiglu_backward(dgu_d, dout_d, gu_d);
    // |out| up to 16 and |dgate| up to ~4.4: one rounding each, relative.
    expect_close(values(out_d), values(out_ref), 2 * d.rtol, d.rtol, "out");
    expect_close(values(dgu_d), values(dgu_ref), 2 * d.rtol, d.rtol, "dgate_up");
    // In place over the saved gate_up, as the backward may be run.
    kernels::swiglu_backward(gu_d, dout_d, gu_d);
    expect_close(values(gu_d), values(dgu_ref), 2 * d.rtol, d.rtol, "dgate_up aliasing gate_up");
  }
}

TEST(SwigluCuda, ForwardBackwardMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_swiglu(37, 301);
}

TEST(SwigluCuda, VectorPathMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_swiglu(37, 256);
}

}  // namespace
}  // namespace zt::testing
