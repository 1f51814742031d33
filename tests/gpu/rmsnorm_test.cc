// CUDA RMSNorm forward/backward against the CPU reference, in f32, bf16 and f16: out and din in
// the compute dtype; rstd and dweight in f32, dweight accumulated (+=) onto non-zero values and
// the same bits when the backward runs again; the
// fused dresidual add, also with din aliasing dresidual; rows wide enough for the large
// shared-memory path of the backward; the row-in-registers path at Llama widths (2048 and 4096
// in 16-bit types, dweight's sums in shared memory over several blocks) and the loop path (4096
// in f32, 14000).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

constexpr float kEps = 1e-6f;

enum class Residual : unsigned char { kNone, kSeparate, kAliasesDin };

void check_rmsnorm(int64_t rows, int64_t C, Residual residual, uint64_t seed) {
  Tensor in = exact_tensor({rows, C}, seed, 2.0);
  Tensor weight = exact_tensor({C}, seed + 1);
  Tensor dout = exact_tensor({rows, C}, seed + 3);
  Tensor dres = exact_tensor({rows, C}, seed + 4);
  Tensor dweight0 = random_tensor({C}, DType::f32, seed + 5);
  const Tensor* dres_ref = residual == Residual::kNone ? nullptr : &dres;

  Tensor out_ref = Tensor::empty({rows, C}, DType::f32);
  Tensor rstd_ref = Tensor::empty({rows}, DType::f32);
  kernels::rmsnorm_forward(out_ref, rstd_ref, in, weight, kEps);
  Tensor din_ref = Tensor::empty({rows, C}, DType::f32);
  Tensor dweight_ref = dweight0.clone();
  kernels::rmsnorm_backward(din_ref, dweight_ref, dout, in, weight, rstd_ref, dres_ref);

  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    const Device dev = Device::cuda(0);
    Tensor in_d = to_cuda(in, d.dtype);
    Tensor w_d = to_cuda(weight, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor out_d = Tensor::empty({rows, C}, d.dtype, dev);
    Tensor rstd_d = Tensor::empty({rows}, DType::f32, dev);
    Tensor dweight_d = to_cuda(dweight0, DType::f32);
    kernels::rmsnorm_forward(out_d, rstd_d, in_d, w_d, kEps);

    Tensor dres_d = to_cuda(dres, d.dtype);
    Tensor din_d = residual == Residual::kAliasesDin
                       ? dres_d
                       : to_cuda(random_tensor({rows, C}, DType::f32, seed + 6), d.dtype);
    kernels::rmsnorm_backward(din_d, dweight_d, dout_d, in_d, w_d, rstd_d,
                              residual == Residual::kNone ? nullptr : &dres_d);
    // dweight again from the same start: no atomics, the same bits.
    if (residual != Residual::kAliasesDin) {
      Tensor dw2 = to_cuda(dweight0, DType::f32);
      Tensor din2 = Tensor::empty({rows, C}, d.dtype, dev);
      kernels::rmsnorm_backward(din2, dw2, dout_d, in_d, w_d, rstd_d,
                                residual == Residual::kNone ? nullptr : &dres_d);
      EXPECT_EQ(values(dw2), values(dweight_d)) << "dweight is not reproducible";
      EXPECT_EQ(values(din2), values(din_d)) << "din is not reproducible";
    }

    // rstd comes from identical inputs in f32: only the summation order of the C squares
    // differs, and the CPU's sequential f32 sum drifts like sqrt(C) roundings; out and din carry
    // that relative error too.
    const double sum_err = 1e-5 * std::max(1.0, std::sqrt(double(C) / 100.0));
    expect_close(values(rstd_d), values(rstd_ref), 1e-6, sum_err, "rstd");
    // out = w * round(x rstd), |x rstd| up to ~3: two roundings to the compute dtype (the
    // normalised value, as transformers, then the product).
    expect_close(values(out_d), values(out_ref), 4 * d.rtol + sum_err, 2 * d.rtol + sum_err, "out");
    expect_close(values(din_d), values(din_ref), 4 * d.rtol + sum_err, 2 * d.rtol + sum_err, "din");
    // The parameter gradient: f32 sums over rows of f32 products from exact inputs.
    const double atol = 1e-5 * std::sqrt(double(rows));
    expect_close(values(dweight_d), values(dweight_ref), atol, 1e-4, "dweight");
  }
}

TEST(RmsnormCuda, OddWidthMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_rmsnorm(10, 77, Residual::kNone, 401);
}

TEST(RmsnormCuda, LlamaWidthWithResidualMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_rmsnorm(133, 2048, Residual::kSeparate, 501);
}

TEST(RmsnormCuda, DinAliasingDresidualMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_rmsnorm(37, 100, Residual::kAliasesDin, 601);
}

TEST(RmsnormCuda, WideRowsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // Many column blocks of the dweight sums, one row split.
  check_rmsnorm(9, 14000, Residual::kSeparate, 701);
}

TEST(RmsnormCuda, VectorPathAliasingAndManyRowSplitsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // 16-byte loads (C a multiple of 8) with din over dresidual, and 5000 rows: dweight summed
  // over dozens of row splits, then added in order.
  check_rmsnorm(37, 256, Residual::kAliasesDin, 801);
  check_rmsnorm(5000, 512, Residual::kSeparate, 901);
}

TEST(RmsnormCuda, RowsInRegistersAtLlamaWidthsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_rmsnorm(3000, 2048, Residual::kAliasesDin, 1101);
  check_rmsnorm(700, 4096, Residual::kSeparate, 1201);
}

}  // namespace
}  // namespace zt::testing
