// CUDA layernorm forward/backward against the CPU reference, in f32, bf16 and f16: out and din in
// the compute dtype; mean, rstd, dweight and dbias in f32, the parameter gradients accumulated
// (+=) onto non-zero values and the same bits when the backward runs again; the fused dresidual
// add, also with din aliasing dresidual (the residual-stream gradient updated in place). Widths
// cover the row-in-registers path (768, 2048, 4096 in 16-bit types: up to 16 chunks a lane,
// some lanes without a last chunk, shared-memory sums over several blocks, more than 48 KiB of
// them at 4096), the 16-byte loop path (7000, and 4096 in f32) and the one-element path (77, 100).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

enum class Residual : unsigned char { kNone, kSeparate, kAliasesDin };

void check_layernorm(int64_t rows, int64_t C, Residual residual, uint64_t seed) {
  // Inputs k/64 * 2 plus a shift of 2: a non-zero mean, still exact in every dtype.
  Tensor in = exact_tensor({rows, C}, seed, 2.0);
  {
    std::vector<double> v = in.to_doubles();
    for (double& x : v) x += 2.0;
    in = Tensor::from_doubles(v, {rows, C}, DType::f32);
  }
  Tensor weight = exact_tensor({C}, seed + 1);
  Tensor bias = exact_tensor({C}, seed + 2);
  Tensor dout = exact_tensor({rows, C}, seed + 3);
  Tensor dres = exact_tensor({rows, C}, seed + 4);
  Tensor dweight0 = random_tensor({C}, DType::f32, seed + 5);
  Tensor dbias0 = random_tensor({C}, DType::f32, seed + 6);

  Tensor out_ref = Tensor::empty({rows, C}, DType::f32);
  Tensor mean_ref = Tensor::empty({rows}, DType::f32);
  Tensor rstd_ref = Tensor::empty({rows}, DType::f32);
  kernels::layernorm_forward(out_ref, mean_ref, rstd_ref, in, weight, bias, 1e-5f);
  Tensor din_ref = Tensor::empty({rows, C}, DType::f32);
  Tensor dweight_ref = dweight0.clone();
  Tensor dbias_ref = dbias0.clone();
  kernels::layernorm_backward(din_ref, dweight_ref, dbias_ref, dout, in, weight, mean_ref, rstd_ref,
                              residual == Residual::kNone ? nullptr : &dres);

  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    const Device dev = Device::cuda(0);
    Tensor in_d = to_cuda(in, d.dtype);
    Tensor w_d = to_cuda(weight, d.dtype);
    Tensor b_d = to_cuda(bias, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor out_d = Tensor::empty({rows, C}, d.dtype, dev);
    Tensor mean_d = Tensor::empty({rows}, DType::f32, dev);
    Tensor rstd_d = Tensor::empty({rows}, DType::f32, dev);
    Tensor dweight_d = to_cuda(dweight0, DType::f32);
    Tensor dbias_d = to_cuda(dbias0, DType::f32);
    kernels::layernorm_forward(out_d, mean_d, rstd_d, in_d, w_d, b_d, 1e-5f);

    Tensor dres_d = to_cuda(dres, d.dtype);
    Tensor din_d =
        residual == Residual::kAliasesDin ? dres_d : Tensor::empty({rows, C}, d.dtype, dev);
    // The parameter gradients again from the same start: no atomics, the same bits.
    {
      Tensor dw2 = to_cuda(dweight0, DType::f32);
      Tensor db2 = to_cuda(dbias0, DType::f32);
      Tensor din2 = Tensor::empty({rows, C}, d.dtype, dev);
      Tensor dres2 = to_cuda(dres, d.dtype);
      kernels::layernorm_backward(din2, dw2, db2, dout_d, in_d, w_d, mean_d, rstd_d,
                                  residual == Residual::kNone ? nullptr : &dres2);
      kernels::layernorm_backward(din_d, dweight_d, dbias_d, dout_d, in_d, w_d, mean_d, rstd_d,
                                  residual == Residual::kNone ? nullptr : &dres_d);
      EXPECT_EQ(values(dw2), values(dweight_d)) << "dweight is not reproducible";
      EXPECT_EQ(values(db2), values(dbias_d)) << "dbias is not reproducible";
      EXPECT_EQ(values(din2), values(din_d)) << "din is not reproducible";
    }

    // Statistics come from identical inputs in f32: only summation order differs, and the CPU's
    // sequential f32 sum drifts like sqrt(C) roundings.
    const double sum_err = 1e-5 * std::max(1.0, std::sqrt(double(C) / 1000.0));
    expect_close(values(mean_d), values(mean_ref), 1e-6, sum_err, "mean");
    expect_close(values(rstd_d), values(rstd_ref), 1e-6, sum_err, "rstd");
    // out = norm * w + b with |norm| up to ~2: one rounding of a value of size ~2.
    expect_close(values(out_d), values(out_ref), 2 * d.rtol, d.rtol, "out");
    expect_close(values(din_d), values(din_ref), 4 * d.rtol, 2 * d.rtol, "din");
    // Parameter gradients: f32 sums over rows of f32 products from exact inputs.
    const double atol = 1e-5 * std::sqrt(double(rows));
    expect_close(values(dweight_d), values(dweight_ref), atol, 1e-4, "dweight");
    expect_close(values(dbias_d), values(dbias_ref), atol, 1e-5, "dbias");
  }
}

TEST(LayernormCuda, OddWidthMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_layernorm(10, 77, Residual::kNone, 401);
}

TEST(LayernormCuda, Gpt2WidthWithResidualMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_layernorm(133, 768, Residual::kSeparate, 501);
}

TEST(LayernormCuda, DinAliasingDresidualMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_layernorm(37, 100, Residual::kAliasesDin, 601);
}

TEST(LayernormCuda, WideRowsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_layernorm(9, 7000, Residual::kSeparate, 701);
}

TEST(LayernormCuda, ManyRowsSplitTheParameterSumsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // Enough rows for several row splits of the parameter gradients' column sums.
  check_layernorm(2000, 768, Residual::kSeparate, 801);
}

TEST(LayernormCuda, RowsInRegistersAtGptAndLlamaWidthsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_layernorm(3000, 2048, Residual::kSeparate, 901);
  check_layernorm(700, 4096, Residual::kAliasesDin, 1001);
}

}  // namespace
}  // namespace zt::testing
