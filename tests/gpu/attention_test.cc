// CUDA attention forward/backward (causal, and bidirectional with padding keys) against the CPU
// reference, in f32, bf16 and f16: the
// permuted qkvr (an exact copy), the probabilities att (zero above the diagonal), the output and
// dqkv. GPT-2-like heads (T 64, NH 4, HS 16) and odd sizes (HS 10, T 29).
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

// `pad`: padding keys at the end of the last batch row (given as a key mask); with kBidirectional
// every other key is attended to.
void check_attention(int64_t B, int64_t T, int NH, int64_t HS, uint64_t seed,
                     kernels::AttnKind kind = kernels::AttnKind::kCausal, int64_t pad = 0) {
  const int64_t C = NH * HS;
  Tensor mask = Tensor::empty({B, T}, DType::i32);
  for (int64_t i = 0; i < B * T; ++i) mask.data<int32_t>()[i] = i >= B * T - pad ? 0 : 1;
  const Tensor* mask_ref = pad > 0 ? &mask : nullptr;
  Tensor qkv = exact_tensor({B, T, 3 * C}, seed);
  Tensor dout = exact_tensor({B, T, C}, seed + 1);

  Tensor out_ref = Tensor::empty({B, T, C}, DType::f32);
  Tensor qkvr_ref = Tensor::empty({3, B, NH, T, HS}, DType::f32);
  Tensor att_ref = Tensor::empty({B, NH, T, T}, DType::f32);
  Tensor dqkv_ref = Tensor::empty({B, T, 3 * C}, DType::f32);
  kernels::attention_forward(out_ref, qkvr_ref, att_ref, qkv, NH, kind, mask_ref);
  kernels::attention_backward(dqkv_ref, dout, qkvr_ref, att_ref, NH, kind);

  // The causal mask, checked directly on the reference too: nothing above the diagonal.
  const std::vector<double> att_cpu = att_ref.to_doubles();
  for (int64_t r = 0; r < B * NH * T && kind == kernels::AttnKind::kCausal; ++r) {
    for (int64_t u = r % T + 1; u < T; ++u) ASSERT_EQ(att_cpu[r * T + u], 0.0);
  }

  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    const Device dev = Device::cuda(0);
    Tensor qkv_d = to_cuda(qkv, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor out_d = Tensor::empty({B, T, C}, d.dtype, dev);
    Tensor qkvr_d = Tensor::empty({3, B, NH, T, HS}, d.dtype, dev);
    // Garbage in att: the kernel must write every element, zeros above the diagonal included.
    Tensor att_d = to_cuda(random_tensor({B, NH, T, T}, DType::f32, seed + 2), d.dtype);
    Tensor dqkv_d = to_cuda(random_tensor({B, T, 3 * C}, DType::f32, seed + 3), d.dtype);
    Tensor mask_d = mask.to(dev);
    kernels::attention_forward(out_d, qkvr_d, att_d, qkv_d, NH, kind, pad > 0 ? &mask_d : nullptr);
    kernels::attention_backward(dqkv_d, dout_d, qkvr_d, att_d, NH, kind);

    expect_close(values(qkvr_d), values(qkvr_ref), 1e-30, 0, "qkvr (a permutation: exact)");
    // Probabilities are <= 1 and rounded once to the compute dtype.
    expect_close(values(att_d), values(att_ref), 1e-2 * d.rtol + 1e-7, d.rtol, "att");
    // out sums probability-weighted values (|v| <= 1): each rounded probability adds its own
    // relative error, bounded by the sum of the probabilities, 1.
    expect_close(values(out_d), values(out_ref), 2 * d.rtol, 2 * d.rtol, "out");
    // dqkv chains several rounded intermediates (att, dpre) through sums over T.
    expect_close(values(dqkv_d), values(dqkv_ref), 6 * d.rtol, 4 * d.rtol, "dqkv");
  }
}

TEST(AttentionCuda, Gpt2LikeHeadsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_attention(2, 64, 4, 16, 101);
}

TEST(AttentionCuda, OddSizesMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_attention(3, 29, 3, 10, 201);
  check_attention(1, 1, 2, 8, 301);  // a single token attends only to itself
}

TEST(AttentionCuda, BidirectionalWithPaddingMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_attention(2, 29, 4, 16, 131, kernels::AttnKind::kBidirectional, 5);
  check_attention(2, 64, 4, 16, 137, kernels::AttnKind::kCausal, 7);
}

}  // namespace
}  // namespace zt::testing
