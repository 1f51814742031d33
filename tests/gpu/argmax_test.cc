// CUDA argmax_rows against the CPU reference in f32, bf16 and f16: inputs exact in every dtype
// with many ties (the lowest index must win whatever the thread that saw it), a padded vocabulary
// whose padding holds the largest values, NaN, and a Llama-sized vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

void check_argmax(int64_t rows, int64_t vocab, int64_t vp, uint64_t seed) {
  Tensor logits = exact_tensor({rows, vp}, seed, 4.0);
  std::vector<double> v = logits.to_doubles();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = vocab; j < vp; ++j) v[i * vp + j] = 8.0;
  }
  v[0] = std::numeric_limits<double>::quiet_NaN();
  logits = Tensor::from_doubles(v, {rows, vp}, DType::f32);
  Tensor ref = Tensor::empty({rows}, DType::i32);
  kernels::argmax_rows(ref, logits, vocab);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor out = Tensor::empty({rows}, DType::i32, Device::cuda(0));
    kernels::argmax_rows(out, to_cuda(logits, d.dtype), vocab);
    const std::vector<double> got = out.to_doubles(), want = ref.to_doubles();
    EXPECT_EQ(got, want);
  }
}

TEST(ArgmaxRowsCuda, TiesPaddingAndNanMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_argmax(9, 250, 256, 1);
  check_argmax(3, 5, 5, 2);
}

TEST(ArgmaxRowsCuda, LlamaVocabularyMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_argmax(32, 128256, 128256, 3);
}

}  // namespace
}  // namespace zt::testing
