// CUDA matmul (cuBLASLt) forward/backward against the CPU reference, in f32, bf16 and f16: output
// and din in the compute dtype, dweight/dbias accumulated (+=) in f32 onto non-zero gradients.
// Odd shapes (not multiples of 32), a GPT-2 sized GEMM on a non-default stream, many rows, and the
// optional bias / din paths; the bias gradient gives the same bits when computed again.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

enum class WithBias : unsigned char { kNo, kYes };
enum class WithDin : unsigned char { kNo, kYes };
enum class OnStream : unsigned char { kDefault, kCreated };

struct MatmulCase {
  int64_t B, T, K, M;
  WithBias bias;
  WithDin din;
  OnStream stream;
  uint64_t seed;
};

void check_matmul(const MatmulCase& c) {
  const Shape in_shape{c.B, c.T, c.K};
  const Shape out_shape{c.B, c.T, c.M};
  const int64_t N = c.B * c.T;
  Tensor in = exact_tensor(in_shape, c.seed);
  Tensor weight = exact_tensor({c.M, c.K}, c.seed + 1, 0.5);
  Tensor bias = exact_tensor({c.M}, c.seed + 2);
  Tensor dout = exact_tensor(out_shape, c.seed + 3);
  Tensor dweight0 = random_tensor({c.M, c.K}, DType::f32, c.seed + 4);
  Tensor dbias0 = random_tensor({c.M}, DType::f32, c.seed + 5);
  const bool has_bias = c.bias == WithBias::kYes;

  // CPU reference (f32).
  Tensor out_ref = Tensor::empty(out_shape, DType::f32);
  kernels::matmul_forward(out_ref, in, weight, has_bias ? &bias : nullptr);
  Tensor din_ref = Tensor::empty(in_shape, DType::f32);
  Tensor dweight_ref = dweight0.clone();
  Tensor dbias_ref = dbias0.clone();
  kernels::matmul_backward(&din_ref, dweight_ref, has_bias ? &dbias_ref : nullptr, dout, in,
                           weight);

  const Stream st = c.stream == OnStream::kCreated ? Stream::create(Device::cuda(0)) : Stream{};
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor in_d = to_cuda(in, d.dtype);
    Tensor w_d = to_cuda(weight, d.dtype);
    Tensor b_d = to_cuda(bias, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor out_d = Tensor::empty(out_shape, d.dtype, Device::cuda(0), st);
    Tensor din_d = Tensor::empty(in_shape, d.dtype, Device::cuda(0), st);
    Tensor dweight_d = to_cuda(dweight0, DType::f32);
    Tensor dbias_d = to_cuda(dbias0, DType::f32);
    kernels::matmul_forward(out_d, in_d, w_d, has_bias ? &b_d : nullptr, st);
    kernels::matmul_backward(c.din == WithDin::kYes ? &din_d : nullptr, dweight_d,
                             has_bias ? &dbias_d : nullptr, dout_d, in_d, w_d, st);
    st.synchronize();

    // Sums of K (or M) terms of size <= 1: near-zero results get an absolute margin that grows
    // like the sum's typical size, sqrt(terms).
    expect_close(values(out_d), values(out_ref), d.rtol * std::sqrt(double(c.K)), d.rtol, "out");
    if (c.din == WithDin::kYes) {
      expect_close(values(din_d), values(din_ref), d.rtol * std::sqrt(double(c.M)), d.rtol, "din");
    }
    // Products of exact inputs are exact in f32: the gradients differ only by f32 summation order,
    // whatever the compute dtype.
    expect_close(values(dweight_d), values(dweight_ref), 1e-5 * std::sqrt(double(N)), 1e-5,
                 "dweight");
    if (has_bias) {
      expect_close(values(dbias_d), values(dbias_ref), 1e-5 * std::sqrt(double(N)), 1e-5, "dbias");
      // The bias gradient is a column sum without atomics: the same bits again.
      Tensor dw2 = to_cuda(dweight0, DType::f32);
      Tensor db2 = to_cuda(dbias0, DType::f32);
      kernels::matmul_backward(nullptr, dw2, &db2, dout_d, in_d, w_d, st);
      st.synchronize();
      EXPECT_EQ(values(db2), values(dbias_d)) << "dbias is not reproducible";
    } else {
      expect_close(values(dbias_d), values(dbias0), 1e-30, 0, "dbias untouched without bias");
    }
  }
}

TEST(MatmulCuda, OddShapesWithBiasMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_matmul({2, 37, 45, 33, WithBias::kYes, WithDin::kYes, OnStream::kDefault, 11});
}

TEST(MatmulCuda, NoBiasNoDinMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_matmul({3, 5, 19, 70, WithBias::kNo, WithDin::kNo, OnStream::kDefault, 21});
  check_matmul({1, 9, 64, 96, WithBias::kNo, WithDin::kYes, OnStream::kDefault, 31});
}

TEST(MatmulCuda, Gpt2SizedOnCreatedStreamMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // N = 512, K = 768, M = 2304: GPT-2 small's qkv projection.
  check_matmul({4, 128, 768, 2304, WithBias::kYes, WithDin::kYes, OnStream::kCreated, 41});
}

TEST(MatmulCuda, ManyRowsBiasGradientMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // N = 4096 rows: the bias gradient's column sum runs in several row splits.
  check_matmul({8, 512, 64, 96, WithBias::kYes, WithDin::kYes, OnStream::kDefault, 61});
}

// out = in @ weight^T + bias + residual, the residual added by the GEMM itself (C = residual,
// beta 1), against the CPU's matmul then add. One rounding on the GPU, of a sum whose parts are
// exact in f32.
void check_matmul_residual(int64_t N, int64_t K, int64_t M, bool with_bias, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K << " M " << M);
  Tensor in = exact_tensor({N, K}, seed);
  Tensor weight = exact_tensor({M, K}, seed + 1, 0.5);
  Tensor bias = exact_tensor({M}, seed + 2);
  Tensor residual = exact_tensor({N, M}, seed + 3, 4.0);
  Tensor want = Tensor::empty({N, M}, DType::f32);
  kernels::matmul_residual_forward(want, in, weight, with_bias ? &bias : nullptr, residual);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor in_d = to_cuda(in, d.dtype), w_d = to_cuda(weight, d.dtype);
    Tensor b_d = to_cuda(bias, d.dtype), r_d = to_cuda(residual, d.dtype);
    Tensor out_d = to_cuda(random_tensor({N, M}, DType::f32, seed + 4), d.dtype);
    kernels::matmul_residual_forward(out_d, in_d, w_d, with_bias ? &b_d : nullptr, r_d);
    expect_close(values(out_d), values(want), d.rtol * std::sqrt(double(K)), d.rtol, "out");
    expect_close(values(r_d), values(residual), 1e-30, 0, "residual untouched");
  }
}

TEST(MatmulCuda, ResidualAddedInTheGemmMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_matmul_residual(64, 96, 128, true, 71);
  check_matmul_residual(37, 45, 33, true, 72);  // odd sizes
  check_matmul_residual(16, 32, 48, false, 73);
}

TEST(MatmulCuda, BackwardAccumulatesAcrossCalls) {
  ZT_SKIP_WITHOUT_CUDA();
  const int64_t N = 23, K = 17, M = 29;
  Tensor in = exact_tensor({N, K}, 51);
  Tensor weight = exact_tensor({M, K}, 52);
  Tensor dout = exact_tensor({N, M}, 53);
  // Oracle written here: two backward calls add 2 dout^T in to a zero gradient.
  std::vector<double> expected(M * K, 0.0);
  const std::vector<double> g = dout.to_doubles();
  const std::vector<double> x = in.to_doubles();
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t n = 0; n < N; ++n) expected[m * K + k] += 2 * g[n * M + m] * x[n * K + k];
    }
  }
  Tensor in_d = to_cuda(in, DType::bf16);
  Tensor w_d = to_cuda(weight, DType::bf16);
  Tensor dout_d = to_cuda(dout, DType::bf16);
  Tensor dweight = Tensor::zeros({M, K}, DType::f32, Device::cuda(0));
  kernels::matmul_backward(nullptr, dweight, nullptr, dout_d, in_d, w_d);
  kernels::matmul_backward(nullptr, dweight, nullptr, dout_d, in_d, w_d);
  expect_close(values(dweight), expected, 1e-5, 1e-5, "dweight after two calls");
}

// matmul_weight_grad on the GPU: kWrite over NaN (beta 0 must not read the buffer), then kAdd,
// in f32, bf16 and f16 against the CPU's in f32; and no rows writes zeros.
TEST(MatmulCuda, WeightGradWritesThenAddsLikeCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  const int64_t N = 37, K = 24, M = 40;
  Tensor in = exact_tensor({N, K}, 61);
  Tensor dout = exact_tensor({N, M}, 62);
  Tensor ref = Tensor::zeros({M, K}, DType::f32);
  kernels::matmul_weight_grad(ref, dout, in, kernels::Accumulate::kWrite);
  kernels::matmul_weight_grad(ref, dout, in, kernels::Accumulate::kAdd);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor dw = Tensor::from_doubles(std::vector<double>(M * K, std::nan("")), {M, K}, DType::f32)
                    .to(Device::cuda(0));
    Tensor in_d = to_cuda(in, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    kernels::matmul_weight_grad(dw, dout_d, in_d, kernels::Accumulate::kWrite);
    kernels::matmul_weight_grad(dw, dout_d, in_d, kernels::Accumulate::kAdd);
    expect_close(values(dw), values(ref), 1e-5, 1e-5, "dweight");
  }
  Tensor dw =
      Tensor::from_doubles(std::vector<double>(M * K, 1.0), {M, K}, DType::f32).to(Device::cuda(0));
  kernels::matmul_weight_grad(dw, Tensor::empty({0, M}, DType::bf16, Device::cuda(0)),
                              Tensor::empty({0, K}, DType::bf16, Device::cuda(0)),
                              kernels::Accumulate::kWrite);
  EXPECT_EQ(dw.to_doubles(), std::vector<double>(M * K, 0.0));
}

// kernels::gemm_autotune: a problem's first call times several algorithms by running it again
// and again. Every form must still give the CPU's result once: the plain and bias GEMMs and the
// backward (din written, the weight and bias gradients added onto non-zero ones), the residual
// read from a separate input (repeatable), and a weight gradient written then added in place
// (C += A B must not be timed: each run would add again). Shapes no other test uses.
TEST(MatmulCuda, AutotunedMatchesCpuAndAddsOnce) {
  ZT_SKIP_WITHOUT_CUDA();
  kernels::set_gemm_autotune(true);
  check_matmul({2, 96, 136, 200, WithBias::kYes, WithDin::kYes, OnStream::kCreated, 81});
  check_matmul({1, 72, 88, 168, WithBias::kNo, WithDin::kYes, OnStream::kDefault, 82});
  check_matmul_residual(104, 56, 120, true, 83);
  const int64_t N = 120, K = 40, M = 56;
  Tensor in = exact_tensor({N, K}, 84);
  Tensor dout = exact_tensor({N, M}, 85);
  Tensor ref = Tensor::zeros({M, K}, DType::f32);
  kernels::matmul_weight_grad(ref, dout, in, kernels::Accumulate::kWrite);
  kernels::matmul_weight_grad(ref, dout, in, kernels::Accumulate::kAdd);
  kernels::matmul_weight_grad(ref, dout, in, kernels::Accumulate::kAdd);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor dw = Tensor::zeros({M, K}, DType::f32, Device::cuda(0));
    Tensor in_d = to_cuda(in, d.dtype), dout_d = to_cuda(dout, d.dtype);
    kernels::matmul_weight_grad(dw, dout_d, in_d, kernels::Accumulate::kWrite);
    kernels::matmul_weight_grad(dw, dout_d, in_d, kernels::Accumulate::kAdd);
    kernels::matmul_weight_grad(dw, dout_d, in_d, kernels::Accumulate::kAdd);
    expect_close(values(dw), values(ref), 1e-5 * std::sqrt(double(N)), 1e-5, "3 x dout^T in");
  }
  kernels::set_gemm_autotune(false);
}

}  // namespace
}  // namespace zt::testing
