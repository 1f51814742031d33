// CUDA KV-cache ops against the CPU reference in f32, bf16 and f16: kv_cache_update +
// attention_cached over a prompt and then decode steps of one token (every q_out, the caches and
// every attention output compared), for head sizes from 16 to 256 (odd multiples of the warp
// width included) and grouped, multi-query and multi-head layouts; and attention_cached alone on
// long caches (up to 9000 positions), where a decode step reads the most and the keys are split
// into chunks merged afterwards, with NaN after the last valid position (never to be read).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/rotary_util.h"
#include "gpu/gpu_test_util.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

// Prompt of T tokens in one call, then `steps` single-token calls, on the CPU (f32) and the GPU.
void check_generation(int64_t B, int64_t T, int64_t steps, int NH, int KV, int64_t HS,
                      uint64_t seed) {
  const int64_t maxT = T + steps + 3, W = (NH + 2 * KV) * HS, C = NH * HS;
  const RotaryTables rt = rotary_tables(maxT, HS);
  const Tensor cos_d = rt.cos.to(Device::cuda(0));
  const Tensor sin_d = rt.sin.to(Device::cuda(0));
  // The prompt and then each decoded token's projection.
  std::vector<Tensor> inputs = {exact_tensor({B, T, W}, seed)};
  for (int64_t s = 0; s < steps; ++s) inputs.push_back(exact_tensor({B, 1, W}, seed + 1 + s));

  Tensor k_ref = Tensor::zeros({B, KV, maxT, HS}, DType::f32);
  Tensor v_ref = Tensor::zeros({B, KV, maxT, HS}, DType::f32);
  std::vector<Tensor> q_ref, out_ref;
  int64_t past = 0;
  for (const Tensor& x : inputs) {
    const int64_t len = x.size(1);
    q_ref.push_back(Tensor::empty({B, len, C}, DType::f32));
    out_ref.push_back(Tensor::empty({B, len, C}, DType::f32));
    kernels::kv_cache_update(q_ref.back(), k_ref, v_ref, x, NH, KV, &rt.cos, &rt.sin, past);
    kernels::attention_cached(out_ref.back(), q_ref.back(), k_ref, v_ref, NH, KV, past);
    past += len;
  }

  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    const Device dev = Device::cuda(0);
    Tensor k_d = Tensor::zeros({B, KV, maxT, HS}, d.dtype, dev);
    Tensor v_d = Tensor::zeros({B, KV, maxT, HS}, d.dtype, dev);
    past = 0;
    for (size_t call = 0; call < inputs.size(); ++call) {
      SCOPED_TRACE(::testing::Message() << "call " << call << " past_len " << past);
      const int64_t len = inputs[call].size(1);
      Tensor x_d = to_cuda(inputs[call], d.dtype);
      Tensor q_d = to_cuda(random_tensor({B, len, C}, DType::f32, 7), d.dtype);
      Tensor out_d = to_cuda(random_tensor({B, len, C}, DType::f32, 8), d.dtype);
      kernels::kv_cache_update(q_d, k_d, v_d, x_d, NH, KV, &cos_d, &sin_d, past);
      kernels::attention_cached(out_d, q_d, k_d, v_d, NH, KV, past);
      expect_close(values(q_d), values(q_ref[call]), 2 * d.rtol, d.rtol, "q_out");
      // q and k are rounded to the compute dtype after rotation; the scores and the softmax
      // carry those roundings (as the attention test's tolerance for out).
      expect_close(values(out_d), values(out_ref[call]), 6 * d.rtol, 4 * d.rtol, "out");
      past += len;
    }
    expect_close(values(k_d), values(k_ref), 2 * d.rtol, d.rtol, "k_cache");
    expect_close(values(v_d), values(v_ref), 1e-30, 0, "v_cache (a copy: exact)");
  }
}

TEST(KvCacheCuda, PromptThenDecodeStepsMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_generation(2, 37, 4, 8, 2, 64, 1001);   // grouped query
  check_generation(1, 19, 3, 4, 1, 128, 1101);  // multi-query
  check_generation(2, 9, 2, 4, 4, 16, 1201);    // multi-head, HS under a warp's width
}

TEST(KvCacheCuda, HeadSizesUpTo256MatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_generation(1, 13, 2, 4, 2, 80, 1301);  // 80: lanes own 4 dims, only 20 lanes busy
  check_generation(1, 13, 2, 4, 2, 256, 1401);
  check_generation(1, 13, 2, 4, 2, 40, 1501);
  check_generation(1, 13, 2, 4, 2, 66, 1601);  // HS not a multiple of a lane's 4: scalar loads
}

// attention_cached alone on caches of exact values; positions >= past_len + T hold NaN.
void check_long_cache(int64_t B, int64_t T, int NH, int KV, int64_t past_len, int64_t HS,
                      uint64_t seed) {
  const int64_t maxT = past_len + T + 64;
  // q scaled by 4: peaked softmax rows, not near-uniform ones.
  Tensor q = exact_tensor({B, T, NH * HS}, seed, 4.0);
  std::vector<double> k = exact_tensor({B, KV, maxT, HS}, seed + 1).to_doubles();
  std::vector<double> v = exact_tensor({B, KV, maxT, HS}, seed + 2).to_doubles();
  for (int64_t r = 0; r < B * KV * maxT; ++r) {
    if (r % maxT < past_len + T) continue;
    for (int64_t i = 0; i < HS; ++i) {
      k[r * HS + i] = std::numeric_limits<double>::quiet_NaN();
      v[r * HS + i] = std::numeric_limits<double>::quiet_NaN();
    }
  }
  Tensor k_cache = Tensor::from_doubles(k, {B, KV, maxT, HS}, DType::f32);
  Tensor v_cache = Tensor::from_doubles(v, {B, KV, maxT, HS}, DType::f32);
  Tensor out_ref = Tensor::empty({B, T, NH * HS}, DType::f32);
  kernels::attention_cached(out_ref, q, k_cache, v_cache, NH, KV, past_len);
  for (const DtypeCase& d : kComputeDtypes) {
    SCOPED_TRACE(d.name);
    Tensor out_d = Tensor::empty({B, T, NH * HS}, d.dtype, Device::cuda(0));
    kernels::attention_cached(out_d, to_cuda(q, d.dtype), to_cuda(k_cache, d.dtype),
                              to_cuda(v_cache, d.dtype), NH, KV, past_len);
    // Identical (exact) inputs: f32 arithmetic in another order, and one rounding of out.
    expect_close(values(out_d), values(out_ref), 2 * d.rtol, 2 * d.rtol, "out");
  }
}

TEST(KvCacheCuda, LongCacheDecodeStepMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_long_cache(2, 1, 8, 2, 2000, 128, 2001);
  check_long_cache(2, 1, 8, 2, 2047, 64, 2101);
  check_long_cache(1, 1, 4, 4, 9000, 256, 2151);
}

TEST(KvCacheCuda, LongCacheShortChunkMatchesCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  check_long_cache(2, 5, 8, 2, 1500, 256, 2201);
  // Few rows of very different lengths: on a GPU of ~100 SMs the keys are split into chunks of
  // about 300, and the first rows end before the last chunk starts (a chunk with no key).
  check_long_cache(1, 260, 1, 1, 520, 64, 2301);
}

}  // namespace
}  // namespace zt::testing
