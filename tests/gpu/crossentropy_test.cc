// CUDA softmax cross-entropy against the CPU reference, in f32, bf16 and f16: losses (f32), the
// fused dlogits written over the logits, zeros in the padding columns, and the loss-only form
// leaving the logits untouched, up to Llama 3's 128K vocabulary. Also a closed form: equal logits
// give log(vocab).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

void check_crossentropy(int64_t rows, int64_t vocab, int64_t padded, float dloss, uint64_t seed) {
  // Logits k/64 * 8 in [-8, 8]: a wide softmax, still exact in every dtype.
  Tensor logits = exact_tensor({rows, padded}, seed, 8.0);
  Tensor targets = random_ints({rows}, static_cast<int32_t>(vocab), seed + 1);
  // Every third row is not counted (transformers' -100): loss 0, no gradient.
  for (int64_t i = 2; i < rows; i += 3) targets.data<int32_t>()[i] = -100;

  Tensor losses_ref = Tensor::empty({rows}, DType::f32);
  kernels::crossentropy_forward(losses_ref, logits, targets, vocab);
  Tensor dlogits_ref = logits.clone();
  Tensor fused_losses_ref = Tensor::empty({rows}, DType::f32);
  kernels::crossentropy_fused(fused_losses_ref, dlogits_ref, targets, vocab, dloss);
  // The reference's padding columns are zero, as the contract says.
  const std::vector<double> dref = dlogits_ref.to_doubles();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = vocab; j < padded; ++j) ASSERT_EQ(dref[i * padded + j], 0.0);
  }

  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    const Device dev = Device::cuda(0);
    Tensor logits_d = to_cuda(logits, d.dtype);
    Tensor targets_d = targets.to(dev);
    Tensor losses_d = Tensor::empty({rows}, DType::f32, dev);
    kernels::crossentropy_forward(losses_d, logits_d, targets_d, vocab);
    // Losses are f32 sums over identical (exact) logits: tight in every dtype, up to the f32
    // rounding of a sum of `vocab` terms in another order (~sqrt(vocab) ulps).
    const double ltol = std::max(1e-5, 1e-7 * std::sqrt(double(vocab)));
    expect_close(values(losses_d), values(losses_ref), ltol, ltol, "losses");
    expect_close(values(logits_d), values(logits), 1e-30, 0, "logits untouched by forward");

    Tensor fused_losses_d = Tensor::empty({rows}, DType::f32, dev);
    kernels::crossentropy_fused(fused_losses_d, logits_d, targets_d, vocab, dloss);
    expect_close(values(fused_losses_d), values(fused_losses_ref), ltol, ltol, "fused losses");
    // dlogits: |dloss (p - onehot)| <= |dloss|, one rounding; in f32 the sum of exps over the
    // vocabulary (summed in another order on the CPU) bounds the agreement. The padding must be
    // exactly 0 (the absolute margin is far below the padding's former values, up to 8).
    const double rtol = std::max(d.rtol, 1e-4);
    expect_close(values(logits_d), dref, 1e-3 * rtol * std::abs(dloss) + 1e-9, rtol, "dlogits");
  }
}

TEST(CrossentropyCuda, PaddedVocabularyMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_crossentropy(7, 91, 128, 1.0f / 7.0f, 801);
}

TEST(CrossentropyCuda, Gpt2VocabularyMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // GPT-2's 50257 tokens padded to 50304.
  check_crossentropy(5, 50257, 50304, 0.25f, 901);
}

TEST(CrossentropyCuda, LargeVocabularyMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // Llama 3's 128256 tokens.
  check_crossentropy(3, 128256, 128256, 0.5f, 951);
}

TEST(CrossentropyCuda, UnpaddedSingleRowMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_crossentropy(1, 33, 33, 1.0f, 1001);
}

TEST(CrossentropyCuda, EqualLogitsGiveLogVocab) {
  ZT_SKIP_WITHOUT_CUDA();
  const int64_t rows = 3, vocab = 1000, padded = 1024;
  Tensor logits = Tensor::zeros({rows, padded}, DType::bf16, Device::cuda(0));
  Tensor targets = random_ints({rows}, vocab, 1101, Device::cuda(0));
  Tensor losses = Tensor::empty({rows}, DType::f32, Device::cuda(0));
  kernels::crossentropy_fused(losses, logits, targets, vocab, 1.0f);
  const std::vector<double> l = losses.to_doubles();
  for (double x : l) EXPECT_NEAR(x, std::log(double(vocab)), 1e-5);
  // dlogits = 1/V everywhere but the target (1/V - 1), 0 in the padding.
  const std::vector<double> g = logits.to_doubles();
  const std::vector<double> t = targets.to_doubles();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < padded; ++j) {
      const double want = j >= vocab ? 0.0 : (1.0 / vocab - (j == int64_t(t[i]) ? 1.0 : 0.0));
      EXPECT_NEAR(g[i * padded + j], want, 4e-3 * std::abs(want) + 1e-9) << i << "," << j;
    }
  }
}

}  // namespace
}  // namespace zt::testing
