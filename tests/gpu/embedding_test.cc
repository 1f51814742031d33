// CUDA embedding forward/backward against the CPU reference, in f32, bf16 and f16: out in the
// compute dtype; dwte/dwpe accumulated (+=) in f32 onto non-zero gradients, with repeated tokens
// (several atomics on one row) and wpe longer than T.
#include <gtest/gtest.h>

#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

void check_embedding(int64_t B, int64_t T, int64_t V, int64_t max_t, int64_t C, uint64_t seed) {
  Tensor tokens = random_ints({B, T}, static_cast<int32_t>(V), seed);
  Tensor wte = exact_tensor({V, C}, seed + 1);
  Tensor wpe = exact_tensor({max_t, C}, seed + 2);
  Tensor dout = exact_tensor({B, T, C}, seed + 3);
  Tensor dwte0 = random_tensor({V, C}, DType::f32, seed + 4);
  Tensor dwpe0 = random_tensor({max_t, C}, DType::f32, seed + 5);

  Tensor out_ref = Tensor::empty({B, T, C}, DType::f32);
  kernels::embedding_forward(out_ref, tokens, wte, wpe);
  Tensor dwte_ref = dwte0.clone();
  Tensor dwpe_ref = dwpe0.clone();
  kernels::embedding_backward(dwte_ref, dwpe_ref, dout, tokens);

  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    const Device dev = Device::cuda(0);
    Tensor tokens_d = tokens.to(dev);
    Tensor wte_d = to_cuda(wte, d.dtype);
    Tensor wpe_d = to_cuda(wpe, d.dtype);
    Tensor dout_d = to_cuda(dout, d.dtype);
    Tensor out_d = Tensor::empty({B, T, C}, d.dtype, dev);
    Tensor dwte_d = to_cuda(dwte0, DType::f32);
    Tensor dwpe_d = to_cuda(dwpe0, DType::f32);
    kernels::embedding_forward(out_d, tokens_d, wte_d, wpe_d);
    kernels::embedding_backward(dwte_d, dwpe_d, dout_d, tokens_d);

    // A sum of two values k/64 is (k1 + k2)/64 with |k1 + k2| <= 128: 8 significant bits, exact
    // in every compute dtype, so the output must match exactly.
    expect_close(values(out_d), values(out_ref), 1e-30, 0, "out");
    expect_close(values(dwte_d), values(dwte_ref), 1e-6, 1e-6, "dwte");
    expect_close(values(dwpe_d), values(dwpe_ref), 1e-6, 1e-6, "dwpe");
  }
}

TEST(EmbeddingCuda, RepeatedTokensMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // 2 x 13 tokens from a vocabulary of 7: most rows of dwte receive several updates.
  check_embedding(2, 13, 7, 20, 37, 1201);
}

TEST(EmbeddingCuda, Gpt2WidthMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_embedding(4, 64, 1000, 128, 768, 1301);
}

TEST(EmbeddingCuda, LookupWriteAddAndBackwardMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  const int64_t B = 3, T = 17, rows = 9, C = 40;
  Tensor ids = random_ints({B, T}, static_cast<int32_t>(rows), 1401);
  Tensor table = exact_tensor({rows, C}, 1402);
  Tensor base = exact_tensor({B, T, C}, 1403);
  Tensor dout = exact_tensor({B, T, C}, 1404);
  Tensor dtable0 = random_tensor({rows, C}, DType::f32, 1405);
  Tensor out_ref = Tensor::empty({B, T, C}, DType::f32);
  kernels::embedding_lookup_forward(out_ref, ids, table, kernels::Accumulate::kWrite);
  Tensor acc_ref = base.clone();
  kernels::embedding_lookup_forward(acc_ref, ids, table, kernels::Accumulate::kAdd);
  Tensor dtable_ref = dtable0.clone();
  kernels::embedding_lookup_backward(dtable_ref, dout, ids);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    const Device dev = Device::cuda(0);
    Tensor ids_d = ids.to(dev);
    Tensor table_d = to_cuda(table, d.dtype);
    Tensor out_d = to_cuda(random_tensor({B, T, C}, DType::f32, 1406), d.dtype);
    kernels::embedding_lookup_forward(out_d, ids_d, table_d, kernels::Accumulate::kWrite);
    Tensor acc_d = to_cuda(base, d.dtype);
    kernels::embedding_lookup_forward(acc_d, ids_d, table_d, kernels::Accumulate::kAdd);
    Tensor dtable_d = to_cuda(dtable0, DType::f32);
    Tensor dout_d = to_cuda(dout, d.dtype);
    kernels::embedding_lookup_backward(dtable_d, dout_d, ids_d);
    // Values k/64 and sums of two of them are exact in every compute dtype.
    expect_close(values(out_d), values(out_ref), 1e-30, 0, "lookup");
    expect_close(values(acc_d), values(acc_ref), 1e-30, 0, "lookup accumulated");
    expect_close(values(dtable_d), values(dtable_ref), 1e-6, 1e-6, "dtable");
  }
}

}  // namespace
}  // namespace zt::testing
