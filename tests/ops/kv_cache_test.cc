// Tests of the CPU KV-cache ops (kernels/cpu/kv_cache.cc): kv_cache_update + attention_cached over
// a prompt, in one call, in chunks and one token at a time, against a causal grouped-query
// attention with rotary written out in long double here; the caches hold the rotated k and the v
// of the written positions and nothing else is touched (the rest is NaN and must stay out of the
// results); and the generation path equals the training path (qkv_expand_forward followed by
// attention_forward) on the same input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/rotary_util.h"
#include "common/test_util.h"
#include "zt/kernels/ops.h"

namespace zt {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::rotary_tables;
using testing::rotate_naive;

constexpr int64_t B = 2, T = 6, NH = 4, HS = 8, kMaxT = T + 3;

enum class Rotary : unsigned char { kOff, kOn };

struct Naive {
  std::vector<double> out;  // (B,T,NH*HS)
  std::vector<double> k;    // (B,KV,T,HS) rotated
  std::vector<double> v;    // (B,KV,T,HS)
};

// Causal grouped-query attention of the whole prompt, positions 0..T-1, straight from the
// definitions: q and k rotated at their positions, out-head h reads kv head h / (NH/KV).
Naive attention_naive(const Tensor& qkv, int64_t KV, const testing::RotaryTables* rt) {
  const int64_t W = (NH + 2 * KV) * HS;
  const std::vector<double> x = qkv.to_doubles();
  const std::vector<double> cs = rt ? rt->cos.to_doubles() : std::vector<double>{};
  const std::vector<double> sn = rt ? rt->sin.to_doubles() : std::vector<double>{};
  auto head = [&](int64_t b, int64_t t, int64_t hd, bool rotate) {
    std::vector<long double> h(HS);
    for (int64_t i = 0; i < HS; ++i) h[i] = x[(b * T + t) * W + hd * HS + i];
    return rotate && rt ? rotate_naive(h, cs, sn, t) : h;
  };
  Naive r;
  r.out.assign(B * T * NH * HS, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < KV; ++j) {
      for (int64_t u = 0; u < T; ++u) {
        for (long double v : head(b, u, NH + j, true)) r.k.push_back(static_cast<double>(v));
      }
    }
    for (int64_t j = 0; j < KV; ++j) {
      for (int64_t u = 0; u < T; ++u) {
        for (long double v : head(b, u, NH + KV + j, false)) r.v.push_back(static_cast<double>(v));
      }
    }
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t j = h / (NH / KV);
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<long double> q = head(b, t, h, true);
        std::vector<long double> p(t + 1);
        long double total = 0;
        for (int64_t u = 0; u <= t; ++u) {
          const std::vector<long double> k = head(b, u, NH + j, true);
          long double dot = 0;
          for (int64_t i = 0; i < HS; ++i) dot += q[i] * k[i];
          p[u] = std::exp(dot / std::sqrt(static_cast<long double>(HS)));
          total += p[u];
        }
        for (int64_t i = 0; i < HS; ++i) {
          long double o = 0;
          for (int64_t u = 0; u <= t; ++u) o += p[u] / total * head(b, u, NH + KV + j, false)[i];
          r.out[((b * T + t) * NH + h) * HS + i] = static_cast<double>(o);
        }
      }
    }
  }
  return r;
}

// Tokens [t0, t1) of a (B,T,W) tensor, as a (B, t1 - t0, W) tensor.
Tensor tokens(const Tensor& x, int64_t t0, int64_t t1) {
  const int64_t W = x.size(2);
  const std::vector<double> v = x.to_doubles();
  std::vector<double> r;
  for (int64_t b = 0; b < B; ++b) {
    r.insert(r.end(), v.begin() + (b * T + t0) * W, v.begin() + (b * T + t1) * W);
  }
  return Tensor::from_doubles(r, {B, t1 - t0, W}, x.dtype());
}

// Rows [t0, t1) of the (B,T,NH*HS) result written from a chunk's (B, t1 - t0, NH*HS) output.
void put_tokens(std::vector<double>& all, const Tensor& chunk, int64_t t0, int64_t t1) {
  const int64_t C = NH * HS;
  const std::vector<double> v = chunk.to_doubles();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        all[(b * T + t) * C + c] = v[(b * (t1 - t0) + t - t0) * C + c];
      }
    }
  }
}

// Feeds the prompt through the cache in chunks of the given lengths; returns the attention
// output of every token, and the caches.
struct CachedRun {
  std::vector<double> out;
  Tensor k_cache, v_cache;
};
CachedRun run_cached(const Tensor& qkv, int64_t KV, const testing::RotaryTables* rt,
                     const std::vector<int64_t>& chunks) {
  const DType dt = qkv.dtype();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // NaN everywhere: a position read before it is written poisons the output.
  CachedRun r{
      std::vector<double>(B * T * NH * HS, nan),
      Tensor::from_doubles(std::vector<double>(B * KV * kMaxT * HS, nan), {B, KV, kMaxT, HS}, dt),
      Tensor::from_doubles(std::vector<double>(B * KV * kMaxT * HS, nan), {B, KV, kMaxT, HS}, dt)};
  int64_t past = 0;
  for (int64_t len : chunks) {
    Tensor chunk = tokens(qkv, past, past + len);
    Tensor q = random_tensor({B, len, NH * HS}, dt, 99);  // garbage: written
    kernels::kv_cache_update(q, r.k_cache, r.v_cache, chunk, NH, static_cast<int>(KV),
                             rt ? &rt->cos : nullptr, rt ? &rt->sin : nullptr, past);
    Tensor out = random_tensor({B, len, NH * HS}, dt, 98);  // garbage: written
    kernels::attention_cached(out, q, r.k_cache, r.v_cache, NH, static_cast<int>(KV), past);
    put_tokens(r.out, out, past, past + len);
    past += len;
  }
  EXPECT_EQ(past, T);
  return r;
}

// The first T positions of each (b, kv head) of a cache, and whether the rest is still NaN.
std::vector<double> cache_prefix(const Tensor& cache, int64_t KV, bool* rest_untouched) {
  const std::vector<double> v = cache.to_doubles();
  std::vector<double> r;
  *rest_untouched = true;
  for (int64_t bj = 0; bj < B * KV; ++bj) {
    for (int64_t u = 0; u < kMaxT; ++u) {
      for (int64_t i = 0; i < HS; ++i) {
        const double x = v[(bj * kMaxT + u) * HS + i];
        if (u < T) {
          r.push_back(x);
        } else if (!std::isnan(x)) {
          *rest_untouched = false;
        }
      }
    }
  }
  return r;
}

struct CacheCase {
  int64_t KV;
  Rotary rotary;
  DType dtype;
};

std::vector<CacheCase> cache_cases() {
  std::vector<CacheCase> cases;
  for (DType dt : {DType::f64, DType::f32}) {
    for (int64_t kv : {2, 1, 4}) cases.push_back({kv, Rotary::kOn, dt});
    cases.push_back({2, Rotary::kOff, dt});
  }
  return cases;
}

TEST(KvCache, PromptInOneCallChunksOrTokensMatchesNaiveAttention) {
  for (const CacheCase& c : cache_cases()) {
    SCOPED_TRACE(::testing::Message() << "KV " << c.KV << " rotary " << (c.rotary == Rotary::kOn)
                                      << " " << dtype_name(c.dtype));
    const testing::RotaryTables rt = rotary_tables(kMaxT, HS);
    const testing::RotaryTables* rtp = c.rotary == Rotary::kOn ? &rt : nullptr;
    // Values up to 2: the softmax is far from uniform, so a wrong key or position shows.
    Tensor qkv = random_tensor({B, T, (NH + 2 * c.KV) * HS}, c.dtype, 1, -2.0, 2.0);
    const Naive ref = attention_naive(qkv, c.KV, rtp);
    const double tol = c.dtype == DType::f64 ? 1e-12 : 2e-5;

    const CachedRun whole = run_cached(qkv, c.KV, rtp, {T});
    expect_close(whole.out, ref.out, tol, tol, "out, prompt in one call");
    bool k_rest = false, v_rest = false;
    expect_close(cache_prefix(whole.k_cache, c.KV, &k_rest), ref.k, tol, tol, "k cache");
    expect_close(cache_prefix(whole.v_cache, c.KV, &v_rest), ref.v, 1e-300, 0, "v cache (a copy)");
    EXPECT_TRUE(k_rest && v_rest) << "cache positions >= past_len + T were written";

    const CachedRun chunked = run_cached(qkv, c.KV, rtp, {2, 3, 1});
    expect_close(chunked.out, ref.out, tol, tol, "out, prompt in chunks 2, 3, 1");

    const CachedRun stepped = run_cached(qkv, c.KV, rtp, std::vector<int64_t>(T, 1));
    expect_close(stepped.out, ref.out, tol, tol, "out, one token at a time");
    expect_close(stepped.out, whole.out, tol, tol, "one token at a time vs one call");
  }
}

TEST(KvCache, GenerationPathMatchesTrainingPath) {
  for (const CacheCase& c : cache_cases()) {
    SCOPED_TRACE(::testing::Message() << "KV " << c.KV << " rotary " << (c.rotary == Rotary::kOn)
                                      << " " << dtype_name(c.dtype));
    const testing::RotaryTables rt = rotary_tables(kMaxT, HS);
    const Tensor* cos = c.rotary == Rotary::kOn ? &rt.cos : nullptr;
    const Tensor* sin = c.rotary == Rotary::kOn ? &rt.sin : nullptr;
    Tensor qkv = random_tensor({B, T, (NH + 2 * c.KV) * HS}, c.dtype, 2, -2.0, 2.0);
    const int kv = static_cast<int>(c.KV);

    // Training: expand to [q | k | v] with NH heads each, then full causal attention.
    Tensor expanded = Tensor::empty({B, T, 3 * NH * HS}, c.dtype);
    kernels::qkv_expand_forward(expanded, qkv, NH, kv, cos, sin, 0);
    Tensor out_train = Tensor::empty({B, T, NH * HS}, c.dtype);
    Tensor qkvr = Tensor::empty({3, B, NH, T, HS}, c.dtype);
    Tensor att = Tensor::empty({B, NH, T, T}, c.dtype);
    kernels::attention_forward(out_train, qkvr, att, expanded, NH, kernels::AttnKind::kCausal,
                               nullptr);

    // Generation: the prompt through the cache.
    Tensor k_cache = Tensor::zeros({B, c.KV, kMaxT, HS}, c.dtype);
    Tensor v_cache = Tensor::zeros({B, c.KV, kMaxT, HS}, c.dtype);
    Tensor q = Tensor::empty({B, T, NH * HS}, c.dtype);
    kernels::kv_cache_update(q, k_cache, v_cache, qkv, NH, kv, cos, sin, 0);
    Tensor out_gen = Tensor::empty({B, T, NH * HS}, c.dtype);
    kernels::attention_cached(out_gen, q, k_cache, v_cache, NH, kv, 0);

    const double tol = c.dtype == DType::f64 ? 1e-12 : 2e-5;
    expect_close(out_gen.to_doubles(), out_train.to_doubles(), tol, tol, "generation vs training");
  }
}

}  // namespace
}  // namespace zt
