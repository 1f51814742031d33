// CUDA rotary + grouped-query expansion, forward and backward, against the CPU reference in f32,
// bf16 and f16: grouped (NH 8, KV 2), multi-query (KV 1) and multi-head (KV = NH) heads, Llama's
// head sizes with rotary at a position offset, and an odd head size without rotary (then the
// forward is a pure copy and must be exact). Outputs written over garbage. Head sizes whose lanes
// split into 16-byte chunks take the vectorized kernels (a thread per chunk of an input head, the
// forward storing it to each out-head of the group), the others (HS 6 with rotary, HS 5) the plain
// ones; one case has thousands of rows (rotary positions past the tables' first block).
#include <gtest/gtest.h>

#include "common/rotary_util.h"
#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

enum class Rotary : unsigned char { kOff, kOn };

void check_qkv_expand(int64_t B, int64_t T, int NH, int KV, int64_t HS, Rotary rotary,
                      int64_t pos_offset, uint64_t seed) {
  const int64_t W = (NH + 2 * KV) * HS, C3 = 3 * NH * HS;
  const RotaryTables rt = rotary_tables(pos_offset + T, rotary == Rotary::kOn ? HS : 2);
  const Tensor* cos = rotary == Rotary::kOn ? &rt.cos : nullptr;
  const Tensor* sin = rotary == Rotary::kOn ? &rt.sin : nullptr;
  Tensor in = exact_tensor({B, T, W}, seed);
  Tensor dout = exact_tensor({B, T, C3}, seed + 1);
  Tensor out_ref = Tensor::empty({B, T, C3}, DType::f32);
  Tensor din_ref = Tensor::empty({B, T, W}, DType::f32);
  kernels::qkv_expand_forward(out_ref, in, NH, KV, cos, sin, pos_offset);
  kernels::qkv_expand_backward(din_ref, dout, NH, KV, cos, sin, pos_offset);

  const Tensor cos_d = rt.cos.to(Device::cuda(0));
  const Tensor sin_d = rt.sin.to(Device::cuda(0));
  const Tensor* cos_dp = rotary == Rotary::kOn ? &cos_d : nullptr;
  const Tensor* sin_dp = rotary == Rotary::kOn ? &sin_d : nullptr;
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor in_d = to_cuda(in, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor out_d = to_cuda(random_tensor({B, T, C3}, DType::f32, seed + 2), d.dtype);
    Tensor din_d = to_cuda(random_tensor({B, T, W}, DType::f32, seed + 3), d.dtype);
    kernels::qkv_expand_forward(out_d, in_d, NH, KV, cos_dp, sin_dp, pos_offset);
    kernels::qkv_expand_backward(din_d, dout_d, NH, KV, cos_dp, sin_dp, pos_offset);
    if (rotary == Rotary::kOff) {
      expect_close(values(out_d), values(out_ref), 1e-30, 0, "out (a copy: exact)");
    } else {
      // A rotation of values <= 1 (|y| <= sqrt 2) rounded once.
      expect_close(values(out_d), values(out_ref), 2 * d.rtol, d.rtol, "out");
    }
    // Sums of NH/KV gradients (|.| <= 8), rotated back, rounded once.
    expect_close(values(din_d), values(din_ref), 4 * d.rtol, d.rtol, "din");
  }
}

TEST(QkvExpandCuda, GroupedQueryHeadsWithRotaryMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_qkv_expand(2, 7, 8, 2, 64, Rotary::kOn, 11, 101);
  check_qkv_expand(1, 5, 8, 2, 128, Rotary::kOn, 0, 111);
}

TEST(QkvExpandCuda, MultiQueryAndMultiHeadMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_qkv_expand(2, 7, 8, 1, 64, Rotary::kOn, 3, 201);
  check_qkv_expand(2, 7, 4, 4, 6, Rotary::kOn, 3, 211);
}

TEST(QkvExpandCuda, WithoutRotaryOddHeadSizeMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_qkv_expand(2, 7, 6, 3, 5, Rotary::kOff, 0, 301);
  check_qkv_expand(2, 7, 8, 2, 64, Rotary::kOff, 0, 311);
}

TEST(QkvExpandCuda, ManyRowsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_qkv_expand(2, 2200, 4, 2, 64, Rotary::kOn, 5, 401);
}

}  // namespace
}  // namespace zt::testing
