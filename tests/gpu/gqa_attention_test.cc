// CUDA in-place rotary of a fused q/k/v projection (rotary_qk_*) and grouped-query attention
// (gqa_attention_*: cuDNN reading the kv heads in place, or, on ZeroTrain's own kernels, the
// heads expanded), against the CPU references (tests/ops/gqa_attention_test.cc checks those
// against the formula, the unfused attention and finite differences).
//  - rotary_qk: f32, bf16 and f16, head sizes 64 and 128 (16-byte chunks) and 6 (one pair at a
//    time), grouped and multi-query heads, at a position offset; v must come back untouched.
//  - gqa_attention: bf16 and f16, NH 8 with KV 2 and 1, head sizes 64 and 128, causal and
//    bidirectional, T across the 64-row tiles; out, lse and dq / dk / dv (dk and dv summed over
//    each kv head's group), on cuDNN and on the own kernels; cuDNN's deterministic backward
//    gives the same bits twice.
//  - the deterministic backward past the workspace limit: over chunks of the batch it gives the
//    same bits as one call over the whole batch; past it for one sequence, the own kernels run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/rotary_util.h"
#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

void check_rotary_qk(int64_t B, int64_t T, int NH, int KV, int64_t HS, int64_t pos_offset,
                     uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "NH " << NH << " KV " << KV << " HS " << HS);
  const int64_t W = (NH + 2 * KV) * HS;
  const RotaryTables rt = rotary_tables(pos_offset + T, HS);
  const Tensor x = exact_tensor({B, T, W}, seed);
  Tensor fwd_ref = x.clone();
  kernels::rotary_qk_forward(fwd_ref, NH, KV, rt.cos, rt.sin, pos_offset);
  Tensor bwd_ref = x.clone();
  kernels::rotary_qk_backward(bwd_ref, NH, KV, rt.cos, rt.sin, pos_offset);
  const Tensor cos_d = rt.cos.to(Device::cuda(0));
  const Tensor sin_d = rt.sin.to(Device::cuda(0));
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor fwd = to_cuda(x, d.dtype);
    kernels::rotary_qk_forward(fwd, NH, KV, cos_d, sin_d, pos_offset);
    Tensor bwd = to_cuda(x, d.dtype);
    kernels::rotary_qk_backward(bwd, NH, KV, cos_d, sin_d, pos_offset);
    // A rotation of values <= 1 (|y| <= sqrt 2) rounded once; v is copied through exactly.
    expect_close(values(fwd), values(fwd_ref), 2 * d.rtol, d.rtol, "rotated forward");
    expect_close(values(bwd), values(bwd_ref), 2 * d.rtol, d.rtol, "rotated back");
    const std::vector<double> got = values(fwd), in = x.to_doubles();
    for (int64_t r = 0; r < B * T; ++r) {
      for (int64_t i = (NH + KV) * HS; i < W; ++i) {
        ASSERT_EQ(got[r * W + i], in[r * W + i]) << "v changed at row " << r << " value " << i;
      }
    }
  }
}

TEST(RotaryQkCuda, ChunkedAndPairwiseMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_rotary_qk(2, 7, 8, 2, 64, 11, 101);    // Llama 1B's head size: 16-byte chunks
  check_rotary_qk(1, 300, 8, 1, 128, 0, 102);  // Llama 8B's, multi-query, many rows
  check_rotary_qk(2, 5, 4, 2, 6, 3, 103);      // three pairs a head: one pair at a time
}

// Heads [first, first + count) of every token of a (B*T, W) tensor.
std::vector<double> heads(const std::vector<double>& x, int64_t rows, int64_t W, int64_t HS,
                          int64_t first, int64_t count) {
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = first * HS; i < (first + count) * HS; ++i) out.push_back(x[r * W + i]);
  }
  return out;
}

void check_gqa(int64_t B, int64_t T, int NH, int KV, int64_t HS, kernels::AttnKind kind,
               kernels::AttentionBackend backend, uint64_t seed) {
  const int64_t W = (NH + 2 * KV) * HS, C = NH * HS;
  Tensor qkv = exact_tensor({B, T, W}, seed, 0.5);
  Tensor dout = exact_tensor({B, T, C}, seed + 1);
  Tensor out_ref = Tensor::empty({B, T, C}, DType::f32);
  Tensor lse_ref = Tensor::empty({B, NH, T}, DType::f32);
  kernels::gqa_attention_forward(out_ref, lse_ref, qkv, NH, KV, kind);
  for (const DtypeCase& d : kComputeDtypes) {
    if (d.dtype == DType::f32) continue;
    SCOPED_TRACE(d.name);
    Tensor qkv_d = to_cuda(qkv, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    auto run = [&](Tensor& out_d, Tensor& lse_d, Tensor& dqkv_d) {
      kernels::set_attention_backend(backend);
      kernels::gqa_attention_forward(out_d, lse_d, qkv_d, NH, KV, kind);
      kernels::gqa_attention_backward(dqkv_d, dout_d, qkv_d, out_d, lse_d, NH, KV, kind);
      kernels::set_attention_backend(kernels::AttentionBackend::kAuto);
    };
    Tensor out_d = to_cuda(random_tensor({B, T, C}, DType::f32, seed + 2), d.dtype);
    Tensor lse_d = to_cuda(random_tensor({B, NH, T}, DType::f32, seed + 3), DType::f32);
    Tensor dqkv_d = to_cuda(random_tensor({B, T, W}, DType::f32, seed + 4), d.dtype);
    run(out_d, lse_d, dqkv_d);
    if (kernels::attention_deterministic()) {
      Tensor out2 = Tensor::empty({B, T, C}, d.dtype, Device::cuda(0));
      Tensor lse2 = Tensor::empty({B, NH, T}, DType::f32, Device::cuda(0));
      Tensor dqkv2 = Tensor::empty({B, T, W}, d.dtype, Device::cuda(0));
      run(out2, lse2, dqkv2);
      EXPECT_EQ(values(out2), values(out_d)) << "out is not reproducible";
      EXPECT_EQ(values(dqkv2), values(dqkv_d)) << "dqkv is not reproducible";
    }
    // The reference backward reads the GPU's rounded out, as the kernels do.
    Tensor out_back = Tensor::empty({B, T, C}, DType::f32);
    out_back.copy_from(out_d);
    Tensor dqkv_ref = Tensor::empty({B, T, W}, DType::f32);
    kernels::gqa_attention_backward(dqkv_ref, dout, qkv, out_back, lse_ref, NH, KV, kind);
    EXPECT_LE(relative_max_error(values(out_d), values(out_ref)), 2 * d.rtol) << "out";
    expect_close(values(lse_d), values(lse_ref), 1e-4, 1e-5, "lse");
    const std::vector<double> got = values(dqkv_d), want = values(dqkv_ref);
    const int64_t first[3] = {0, NH, NH + KV}, count[3] = {NH, KV, KV};
    for (int part = 0; part < 3; ++part) {
      // dk and dv add NH/KV heads' gradients, each rounded like dq's.
      const double tol = (part == 0 ? 4 : 4 + NH / KV) * d.rtol;
      EXPECT_LE(relative_max_error(heads(got, B * T, W, HS, first[part], count[part]),
                                   heads(want, B * T, W, HS, first[part], count[part])),
                tol)
          << "d"
          << "qkv"[part];
    }
  }
}

void check_gqa_backends(int64_t B, int64_t T, int NH, int KV, int64_t HS, kernels::AttnKind kind,
                        uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "B " << B << " T " << T << " NH " << NH << " KV " << KV << " HS " << HS << " "
               << (kind == kernels::AttnKind::kCausal ? "causal" : "bidirectional"));
  {
    SCOPED_TRACE("own kernels (heads expanded)");
    check_gqa(B, T, NH, KV, HS, kind, kernels::AttentionBackend::kOwn, seed);
  }
  if (!kernels::cudnn_available()) {
    std::printf("cuDNN is not installed here: only the expanded own kernels ran\n");
    return;
  }
  SCOPED_TRACE("cuDNN (kv heads read in place)");
  check_gqa(B, T, NH, KV, HS, kind, kernels::AttentionBackend::kCudnn, seed);
}

TEST(GqaAttentionCuda, GroupedHeadsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_gqa_backends(2, 200, 8, 2, 64, kernels::AttnKind::kCausal, 201);
  check_gqa_backends(1, 130, 8, 2, 128, kernels::AttnKind::kBidirectional, 211);
}

TEST(GqaAttentionCuda, MultiQueryHeadsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_gqa_backends(2, 64, 8, 1, 64, kernels::AttnKind::kBidirectional, 221);
  check_gqa_backends(1, 257, 8, 1, 128, kernels::AttnKind::kCausal, 231);
}

// The deterministic backward's dP workspace grows with the batch; past
// attention_workspace_limit() it runs over chunks of sequences. Every sequence is independent, so
// the chunks must give the bits of one call over the batch (any other result means a chunk read
// or wrote another's rows); past the limit for one sequence, the own kernels run it.
TEST(GqaAttentionCuda, BackwardOverBatchChunksGivesTheSameBits) {
  ZT_SKIP_WITHOUT_CUDA();
  if (!kernels::cudnn_available() || !kernels::attention_deterministic()) {
    GTEST_SKIP() << "needs cuDNN and the deterministic backward";
  }
  const int64_t B = 4, T = 256, HS = 64;
  const int NH = 8, KV = 2;
  const int64_t W = (NH + 2 * KV) * HS, C = NH * HS;
  const kernels::AttnKind kind = kernels::AttnKind::kCausal;
  const Tensor qkv = exact_tensor({B, T, W}, 301, 0.5);
  const Tensor dout = exact_tensor({B, T, C}, 302);
  const Tensor qkv_d = to_cuda(qkv, DType::bf16);
  const Tensor dout_d = to_cuda(dout, DType::bf16);
  Tensor out_d = Tensor::empty({B, T, C}, DType::bf16, Device::cuda(0));
  Tensor lse_d = Tensor::empty({B, NH, T}, DType::f32, Device::cuda(0));
  kernels::gqa_attention_forward(out_d, lse_d, qkv_d, NH, KV, kind);
  const int64_t limit = kernels::attention_workspace_limit();
  auto backward = [&](int64_t limit_bytes, kernels::AttentionBackend backend) {
    kernels::set_attention_workspace_limit(limit_bytes);
    kernels::set_attention_backend(backend);
    Tensor dqkv = to_cuda(random_tensor({B, T, W}, DType::f32, 303), DType::bf16);
    kernels::gqa_attention_backward(dqkv, dout_d, qkv_d, out_d, lse_d, NH, KV, kind);
    kernels::set_attention_backend(kernels::AttentionBackend::kAuto);
    kernels::set_attention_workspace_limit(limit);
    return values(dqkv);
  };
  // dP of one sequence: NH T^2 2-byte values (1 MiB here); the batch's 4 MiB.
  const int64_t per_seq = NH * T * T * 2;
  const std::vector<double> whole = backward(int64_t{1} << 30, kernels::AttentionBackend::kCudnn);
  EXPECT_EQ(backward(2 * per_seq + per_seq / 2, kernels::AttentionBackend::kAuto), whole)
      << "two chunks of two sequences";
  EXPECT_EQ(backward(per_seq + per_seq / 2, kernels::AttentionBackend::kAuto), whole)
      << "four chunks of one sequence";
  // Below one sequence's workspace: the own kernels (another summation order), against the CPU.
  const std::vector<double> own = backward(per_seq / 2, kernels::AttentionBackend::kAuto);
  Tensor out_back = Tensor::empty({B, T, C}, DType::f32);
  out_back.copy_from(out_d);
  Tensor lse_back = Tensor::empty({B, NH, T}, DType::f32);
  lse_back.copy_from(lse_d);
  Tensor dqkv_ref = Tensor::empty({B, T, W}, DType::f32);
  kernels::gqa_attention_backward(dqkv_ref, dout, qkv, out_back, lse_back, NH, KV, kind);
  const std::vector<double> want = values(dqkv_ref);
  EXPECT_LE(relative_max_error(own, want), 0.05) << "the own kernels past the limit";
  EXPECT_NE(own, whole) << "past the limit for one sequence, cuDNN still ran";
  EXPECT_LE(relative_max_error(whole, want), 0.05) << "cuDNN over the whole batch";
}

}  // namespace
}  // namespace zt::testing
