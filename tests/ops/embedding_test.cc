// Tests of the CPU embedding (kernels/cpu/embedding.cc): forward against a naive lookup, backward
// against central finite differences of L = sum(w * out) in f64, and the += contract of dwte/dwpe.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using testing::expect_close;
using testing::finite_difference;
using testing::random_tensor;
using testing::random_weights;
using testing::weighted_sum;

constexpr int64_t B = 2, T = 5, C = 8, V = 11, kMaxT = 7;

// Tokens with a repeated id (so dwte rows receive several contributions) and every row < V.
Tensor embedding_tokens() {
  std::vector<int32_t> ids = {3, 7, 3, 0, 10, 7, 7, 1, 3, 5};
  Tensor t = Tensor::empty({B, T}, DType::i32);
  for (int64_t i = 0; i < B * T; ++i) t.data<int32_t>()[i] = ids[static_cast<size_t>(i)];
  return t;
}

TEST(Embedding, ForwardMatchesNaiveLookup) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor tokens = embedding_tokens();
    Tensor wte = random_tensor({V, C}, dt, 1);
    Tensor wpe = random_tensor({kMaxT, C}, dt, 2);
    Tensor out = Tensor::empty({B, T, C}, dt);
    kernels::embedding_forward(out, tokens, wte, wpe);
    std::vector<double> te = wte.to_doubles(), pe = wpe.to_doubles(), expected;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const int32_t id = tokens.data<int32_t>()[b * T + t];
        for (int64_t c = 0; c < C; ++c) {
          // The sum of the two stored values in the compute dtype, as the kernel adds them.
          const double a = te[id * C + c], p = pe[t * C + c];
          expected.push_back(
              dt == DType::f32 ? static_cast<double>(static_cast<float>(a) + static_cast<float>(p))
                               : a + p);
        }
      }
    }
    EXPECT_EQ(out.to_doubles(), expected) << "embedding out";
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  Tensor tokens = embedding_tokens();
  Tensor wte = random_tensor({V, C}, DType::f64, 3);
  Tensor wpe = random_tensor({kMaxT, C}, DType::f64, 4);
  Tensor out = Tensor::empty({B, T, C}, DType::f64);
  const std::vector<double> w = random_weights(B * T * C, 5);
  auto loss = [&] {
    kernels::embedding_forward(out, tokens, wte, wpe);
    return weighted_sum(out, w);
  };
  const std::vector<double> fd_wte = finite_difference(wte, loss);
  const std::vector<double> fd_wpe = finite_difference(wpe, loss);

  Tensor dout = Tensor::from_doubles(w, {B, T, C}, DType::f64);
  Tensor dwte = Tensor::zeros({V, C}, DType::f64);
  Tensor dwpe = Tensor::zeros({kMaxT, C}, DType::f64);
  kernels::embedding_backward(dwte, dwpe, dout, tokens);
  expect_close(dwte.to_doubles(), fd_wte, 1e-8, 1e-6, "dwte");
  expect_close(dwpe.to_doubles(), fd_wpe, 1e-8, 1e-6, "dwpe");

  // A second backward adds the same gradient again (gradient accumulation).
  kernels::embedding_backward(dwte, dwpe, dout, tokens);
  std::vector<double> twice_wte = fd_wte, twice_wpe = fd_wpe;
  for (double& x : twice_wte) x *= 2;
  for (double& x : twice_wpe) x *= 2;
  expect_close(dwte.to_doubles(), twice_wte, 1e-8, 1e-6, "dwte after two backwards");
  expect_close(dwpe.to_doubles(), twice_wpe, 1e-8, 1e-6, "dwpe after two backwards");
}

TEST(Embedding, Float32BackwardMatchesFloat64) {
  Tensor tokens = embedding_tokens();
  Tensor dout64 = random_tensor({B, T, C}, DType::f64, 6);
  Tensor dout32 = random_tensor({B, T, C}, DType::f32, 6);
  Tensor dwte64 = Tensor::zeros({V, C}, DType::f64), dwpe64 = Tensor::zeros({kMaxT, C}, DType::f64);
  Tensor dwte32 = Tensor::zeros({V, C}, DType::f32), dwpe32 = Tensor::zeros({kMaxT, C}, DType::f32);
  kernels::embedding_backward(dwte64, dwpe64, dout64, tokens);
  kernels::embedding_backward(dwte32, dwpe32, dout32, tokens);
  expect_close(dwte32.to_doubles(), dwte64.to_doubles(), 1e-6, 1e-5, "dwte f32 vs f64");
  expect_close(dwpe32.to_doubles(), dwpe64.to_doubles(), 1e-6, 1e-5, "dwpe f32 vs f64");
}

// The generic lookup (Llama/OPT/BERT token, position and token-type tables): out = table[ids] or
// out += table[ids]; dtable accumulates the rows of repeated ids.
TEST(EmbeddingLookup, ForwardAccumulateAndBackward) {
  constexpr int64_t kRows = 7, kC = 6;
  Tensor table = random_tensor({kRows, kC}, DType::f64, 41);
  Tensor ids = testing::random_ints({B, T}, static_cast<int32_t>(kRows), 42);
  ids.data<int32_t>()[1] = ids.data<int32_t>()[0];  // a repeated id
  Tensor base = random_tensor({B, T, kC}, DType::f64, 43);
  const std::vector<double> tv = table.to_doubles(), bv = base.to_doubles();
  Tensor out = random_tensor({B, T, kC}, DType::f64, 44);  // garbage: kWrite overwrites it
  kernels::embedding_lookup_forward(out, ids, table, kernels::Accumulate::kWrite);
  Tensor acc = base.to(Device::cpu());
  kernels::embedding_lookup_forward(acc, ids, table, kernels::Accumulate::kAdd);
  std::vector<double> want_out, want_acc;
  for (int64_t i = 0; i < B * T; ++i) {
    for (int64_t c = 0; c < kC; ++c) {
      const double v = tv[ids.data<int32_t>()[i] * kC + c];
      want_out.push_back(v);
      want_acc.push_back(bv[i * kC + c] + v);
    }
  }
  expect_close(out.to_doubles(), want_out, 1e-300, 0, "lookup");
  expect_close(acc.to_doubles(), want_acc, 1e-15, 1e-15, "lookup accumulated");

  const std::vector<double> w = testing::random_weights(B * T * kC, 45);
  auto loss = [&] {
    kernels::embedding_lookup_forward(out, ids, table, kernels::Accumulate::kWrite);
    return testing::weighted_sum(out, w);
  };
  const std::vector<double> fd = finite_difference(table, loss);
  Tensor dtable =
      Tensor::from_doubles(std::vector<double>(kRows * kC, 1.0), {kRows, kC}, DType::f64);
  Tensor dout = Tensor::from_doubles(w, {B, T, kC}, DType::f64);
  kernels::embedding_lookup_backward(dtable, dout, ids);
  std::vector<double> want_grad = fd;
  for (double& g : want_grad) g += 1.0;  // accumulated onto the 1s already there
  expect_close(dtable.to_doubles(), want_grad, 1e-9, 1e-7, "dtable");
}

}  // namespace
}  // namespace zt
