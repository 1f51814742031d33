// CUDA kernels behind LoRA adapters and frozen weights against the CPU reference: the column-block
// GEMMs (matmul_cols_forward/backward); dropout_apply bit-exact in f32, bf16 and f16 (the CPU runs
// the same dtype; the dropout masks are identical, also past one grid-stride pass and for a seed
// with its high bits set); and the backward of matmul, layernorm and rmsnorm with undefined (frozen) parameter
// gradients: din bit-exact as with them and close to the CPU's, the gradients still given as on
// the CPU, and a layernorm row wider than the default shared memory (which the frozen kernel does
// not use).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

// Element-by-element equality (no NaN in these inputs).
void expect_equal(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << b[i];
      return;
    }
  }
}

// `t` converted to `dtype` on the CPU.
Tensor to_cpu_dtype(const Tensor& t, DType dtype) {
  Tensor r = Tensor::empty(t.shape(), dtype);
  r.copy_from(t);
  return r;
}

TEST(LoraOpsCuda, DropoutMatchesCpuBitExact) {
  ZT_SKIP_WITHOUT_CUDA();
  // More elements than one pass of the largest grid (4096 blocks of 256 threads).
  const int64_t n = (int64_t{1} << 20) + 4099;
  Tensor in0 = random_tensor({n}, DType::f32, 2201);
  for (uint64_t seed : {uint64_t{5}, uint64_t{0xDEADBEEFCAFEF00Dull}}) {
    for (const DtypeCase& d : kComputeDtypes) {
      SCOPED_TRACE(std::string(d.name) + " seed " + std::to_string(seed));
      Tensor in = to_cpu_dtype(in0, d.dtype);
      Tensor out = Tensor::empty({n}, d.dtype);
      kernels::dropout_apply(out, in, 0.3f, seed);
      Tensor io_d = to_cuda(in, d.dtype);  // in place on the GPU
      kernels::dropout_apply(io_d, io_d, 0.3f, seed);
      expect_equal(values(io_d), values(out), "dropout");
    }
  }
}

// (rows x width) values outside columns [c0, c0 + n) equal `before`'s, bit for bit.
void expect_untouched_outside(const std::vector<double>& got, const std::vector<double>& before,
                              int64_t rows, int64_t width, int64_t c0, int64_t n,
                              const char* what) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < width; ++j) {
      if (j >= c0 && j < c0 + n) continue;
      ASSERT_EQ(got[i * width + j], before[i * width + j])
          << what << " row " << i << " column " << j;
    }
  }
}

// The column-block GEMMs (a strided C, A read with a row stride) against the CPU's; `in` (and
// din) either (N, K) or a wider (N, W) used at columns [in_col0, in_col0+K) (adapters' u side by
// side), din's other columns untouched.
TEST(LoraOpsCuda, MatmulColsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  const int64_t N = 37, K = 48, M = 80, Y = 208, col0 = 64;
  const float alpha = 0.5f;
  for (const auto& [W, c0] : {std::pair<int64_t, int64_t>{K, 0}, {K + 32, 16}, {K + 32, 32}}) {
    SCOPED_TRACE("in (N, " + std::to_string(W) + ") from column " + std::to_string(c0));
    Tensor x = exact_tensor({N, W}, 2401);
    Tensor w = exact_tensor({M, K}, 2402, 0.5);
    Tensor wide = exact_tensor({N, Y}, 2403);
    Tensor out_ref = wide.clone();
    kernels::matmul_cols_forward(out_ref, x, w, col0, alpha, c0);
    Tensor din0 = exact_tensor({N, W}, 2404);
    Tensor din_ref = din0.clone();
    Tensor dw_ref = Tensor::zeros({M, K}, DType::f32);
    kernels::matmul_cols_backward(&din_ref, dw_ref, wide, col0, alpha, x, w, true,
                                  kernels::Accumulate::kAdd, c0);
    for (const DtypeCase& d : kComputeDtypes) {
      SCOPED_TRACE(d.name);
      Tensor out_d = to_cuda(wide, d.dtype);
      kernels::matmul_cols_forward(out_d, to_cuda(x, d.dtype), to_cuda(w, d.dtype), col0, alpha,
                                   c0);
      expect_close(values(out_d), values(out_ref), 2 * d.rtol * std::sqrt(double(K)), 2 * d.rtol,
                   "out");
      expect_untouched_outside(values(out_d), values(to_cuda(wide, d.dtype)), N, Y, col0, M,
                               "out");
      Tensor din_d = to_cuda(din0, d.dtype);
      Tensor dw_d = Tensor::zeros({M, K}, DType::f32, Device::cuda(0));
      kernels::matmul_cols_backward(&din_d, dw_d, to_cuda(wide, d.dtype), col0, alpha,
                                    to_cuda(x, d.dtype), to_cuda(w, d.dtype), true,
                                    kernels::Accumulate::kAdd, c0);
      expect_close(values(din_d), values(din_ref), 4 * d.rtol * std::sqrt(double(M)), 2 * d.rtol,
                   "din");
      expect_close(values(dw_d), values(dw_ref), 1e-2 * std::sqrt(double(N)), 1e-4, "dweight");
      // kWrite: the old values (here not zero) are not read.
      Tensor dw_w = to_cuda(exact_tensor({M, K}, 2405), DType::f32);
      kernels::matmul_cols_backward(nullptr, dw_w, to_cuda(wide, d.dtype), col0, alpha,
                                    to_cuda(x, d.dtype), to_cuda(w, d.dtype), false,
                                    kernels::Accumulate::kWrite, c0);
      expect_close(values(dw_w), values(dw_ref), 1e-2 * std::sqrt(double(N)), 1e-4,
                   "dweight written");
      expect_untouched_outside(values(din_d), values(to_cuda(din0, d.dtype)), N, W, c0, K, "din");
    }
  }
}

TEST(LoraOpsCuda, MatmulBackwardWithoutDweight) {
  ZT_SKIP_WITHOUT_CUDA();
  const int64_t N = 37, K = 48, M = 80;
  Tensor in = exact_tensor({N, K}, 2301);
  Tensor weight = exact_tensor({M, K}, 2302, 0.5);
  Tensor dout = exact_tensor({N, M}, 2303);
  Tensor din_ref = Tensor::empty({N, K}, DType::f32);
  Tensor dweight_ref = Tensor::zeros({M, K}, DType::f32);
  Tensor dbias_ref = Tensor::zeros({M}, DType::f32);
  kernels::matmul_backward(&din_ref, dweight_ref, &dbias_ref, dout, in, weight);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    const Device dev = Device::cuda(0);
    Tensor in_d = to_cuda(in, d.dtype);
    Tensor w_d = to_cuda(weight, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor din_full = Tensor::empty({N, K}, d.dtype, dev);
    Tensor dweight_d = Tensor::zeros({M, K}, DType::f32, dev);
    Tensor dbias_full = Tensor::zeros({M}, DType::f32, dev);
    kernels::matmul_backward(&din_full, dweight_d, &dbias_full, dout_d, in_d, w_d);
    Tensor din_d = Tensor::empty({N, K}, d.dtype, dev);
    Tensor dbias_d = Tensor::zeros({M}, DType::f32, dev);
    Tensor frozen;
    kernels::matmul_backward(&din_d, frozen, &dbias_d, dout_d, in_d, w_d);
    expect_equal(values(din_d), values(din_full), "din as with dweight");
    expect_close(values(din_d), values(din_ref), d.rtol * std::sqrt(double(M)), d.rtol, "din");
    expect_close(values(dbias_d), values(dbias_ref), 1e-5 * std::sqrt(double(N)), 1e-5, "dbias");
  }
}

enum class Frozen : unsigned char { kWeight, kBias, kBoth };

// The reference runs in f64 (the CPU's precision for finite-difference checks): a sequential f32
// sum over a row of 16384 values drifts further than the GPU's reduction tree.
void check_layernorm_frozen(int64_t rows, int64_t C, uint64_t seed) {
  Tensor in = exact_tensor({rows, C}, seed, 2.0);
  Tensor weight = exact_tensor({C}, seed + 1);
  Tensor bias = exact_tensor({C}, seed + 2);
  Tensor dout = exact_tensor({rows, C}, seed + 3);
  Tensor in64 = to_cpu_dtype(in, DType::f64);
  Tensor w64 = to_cpu_dtype(weight, DType::f64);
  Tensor dout64 = to_cpu_dtype(dout, DType::f64);
  Tensor out_ref = Tensor::empty({rows, C}, DType::f64);
  Tensor mean_ref = Tensor::empty({rows}, DType::f64);
  Tensor rstd_ref = Tensor::empty({rows}, DType::f64);
  kernels::layernorm_forward(out_ref, mean_ref, rstd_ref, in64, w64, to_cpu_dtype(bias, DType::f64),
                             1e-5f);
  Tensor din_ref = Tensor::empty({rows, C}, DType::f64);
  Tensor dweight_ref = Tensor::zeros({C}, DType::f64);
  Tensor dbias_ref = Tensor::zeros({C}, DType::f64);
  kernels::layernorm_backward(din_ref, dweight_ref, dbias_ref, dout64, in64, w64, mean_ref,
                              rstd_ref, nullptr);
  for (const DtypeCase& d : kComputeDtypes) {
    const Device dev = Device::cuda(0);
    Tensor in_d = to_cuda(in, d.dtype);
    Tensor w_d = to_cuda(weight, d.dtype);
    Tensor b_d = to_cuda(bias, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor out_d = Tensor::empty({rows, C}, d.dtype, dev);
    Tensor mean_d = Tensor::empty({rows}, DType::f32, dev);
    Tensor rstd_d = Tensor::empty({rows}, DType::f32, dev);
    kernels::layernorm_forward(out_d, mean_d, rstd_d, in_d, w_d, b_d, 1e-5f);
    Tensor din_full = Tensor::empty({rows, C}, d.dtype, dev);
    Tensor dweight_full = Tensor::zeros({C}, DType::f32, dev);
    Tensor dbias_full = Tensor::zeros({C}, DType::f32, dev);
    kernels::layernorm_backward(din_full, dweight_full, dbias_full, dout_d, in_d, w_d, mean_d,
                                rstd_d, nullptr);
    for (Frozen f : {Frozen::kWeight, Frozen::kBias, Frozen::kBoth}) {
      SCOPED_TRACE(std::string(d.name) + " frozen " + std::to_string(static_cast<int>(f)));
      const bool weight_frozen = f == Frozen::kWeight || f == Frozen::kBoth;
      const bool bias_frozen = f == Frozen::kBias || f == Frozen::kBoth;
      Tensor dweight_d = weight_frozen ? Tensor() : Tensor::zeros({C}, DType::f32, dev);
      Tensor dbias_d = bias_frozen ? Tensor() : Tensor::zeros({C}, DType::f32, dev);
      Tensor din_d = Tensor::empty({rows, C}, d.dtype, dev);
      kernels::layernorm_backward(din_d, dweight_d, dbias_d, dout_d, in_d, w_d, mean_d, rstd_d,
                                  nullptr);
      expect_equal(values(din_d), values(din_full), "din as with the gradients");
      expect_close(values(din_d), values(din_ref), 4 * d.rtol, 2 * d.rtol, "din");
      const double atol = 1e-5 * std::sqrt(double(rows));
      if (!weight_frozen) {
        expect_close(values(dweight_d), values(dweight_ref), atol, 1e-4, "dweight");
      }
      if (!bias_frozen) expect_close(values(dbias_d), values(dbias_ref), atol, 1e-5, "dbias");
    }
  }
}

TEST(LoraOpsCuda, LayernormBackwardWithoutParameterGradients) {
  ZT_SKIP_WITHOUT_CUDA();
  check_layernorm_frozen(50, 77, 2401);
}

TEST(LoraOpsCuda, LayernormBackwardFrozenRowsInRegisters) {
  ZT_SKIP_WITHOUT_CUDA();
  // 16-byte chunks: the row-in-registers kernel with no shared-memory sums.
  check_layernorm_frozen(300, 2048, 2451);
}

TEST(LoraOpsCuda, LayernormBackwardFrozenWideRow) {
  ZT_SKIP_WITHOUT_CUDA();
  // 2 C floats = 128 KB of gradient partial sums: more than the default 48 KB of shared memory.
  check_layernorm_frozen(5, 16384, 2501);
}

TEST(LoraOpsCuda, RmsnormBackwardWithoutDweight) {
  ZT_SKIP_WITHOUT_CUDA();
  const int64_t rows = 50, C = 96;
  Tensor in = exact_tensor({rows, C}, 2601, 2.0);
  Tensor weight = exact_tensor({C}, 2602);
  Tensor dout = exact_tensor({rows, C}, 2603);
  Tensor dres = exact_tensor({rows, C}, 2604);
  Tensor out_ref = Tensor::empty({rows, C}, DType::f32);
  Tensor rstd_ref = Tensor::empty({rows}, DType::f32);
  kernels::rmsnorm_forward(out_ref, rstd_ref, in, weight, 1e-6f);
  Tensor din_ref = Tensor::empty({rows, C}, DType::f32);
  Tensor dweight_ref = Tensor::zeros({C}, DType::f32);
  kernels::rmsnorm_backward(din_ref, dweight_ref, dout, in, weight, rstd_ref, &dres);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    const Device dev = Device::cuda(0);
    Tensor in_d = to_cuda(in, d.dtype);
    Tensor w_d = to_cuda(weight, d.dtype);
    Tensor out_d = Tensor::empty({rows, C}, d.dtype, dev);
    Tensor rstd_d = Tensor::empty({rows}, DType::f32, dev);
    kernels::rmsnorm_forward(out_d, rstd_d, in_d, w_d, 1e-6f);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor din_d = to_cuda(dres, d.dtype);  // din aliasing dresidual
    Tensor frozen;
    kernels::rmsnorm_backward(din_d, frozen, dout_d, in_d, w_d, rstd_d, &din_d);
    const double sum_err = 1e-5 * std::max(1.0, std::sqrt(double(C) / 100.0));
    expect_close(values(din_d), values(din_ref), 4 * d.rtol + sum_err, 2 * d.rtol + sum_err, "din");
  }
}

}  // namespace
}  // namespace zt::testing
