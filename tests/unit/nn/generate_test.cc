// Generation against transformers (tests/fixtures/hf): greedy decoding from each decoder
// fixture's prompts equals `generate(do_sample=False)` there, with the KV cache and without;
// prompts of different lengths in one batch give what each gives alone; and the cached path's
// logits equal a full forward's at every step (the cache is only a speed-up).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "zt/checkpoint/hf_weights.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/nn/generate.h"
#include "zt/nn/kv_cache.h"
#include "zt/runtime/inference.h"

namespace zt::nn {
namespace {
using ckpt::load_hf_model;
using ckpt::LoadedModel;

const std::string kFixtures = ZT_SOURCE_DIR "/tests/fixtures/hf/";

std::vector<int32_t> read_ids(const ckpt::SafetensorsFile& f, const std::string& name,
                              std::vector<int64_t>* shape) {
  auto e = f.find(name);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return {};
  std::vector<int32_t> v(static_cast<size_t>((*e)->numel));
  EXPECT_TRUE(f.read(name, 0, (*e)->numel, v.data()).is_ok());
  *shape = (*e)->shape;
  return v;
}

// A fixture's generation expectations: B prompts of P tokens, and transformers' greedy rows of
// `row` = P + N tokens.
struct Expected {
  bool ok = false;
  std::vector<int32_t> prompt, expected;
  int64_t B = 0, P = 0, N = 0, row = 0;
  // The B prompts of P tokens each.
  std::vector<std::vector<int32_t>> prompt_rows() const {
    std::vector<std::vector<int32_t>> rows;
    for (int64_t b = 0; b < B; ++b)
      rows.emplace_back(prompt.begin() + b * P, prompt.begin() + (b + 1) * P);
    return rows;
  }
};
Expected expected_of(const std::string& name) {
  Expected x;
  auto ex = ckpt::SafetensorsFile::open(kFixtures + name + "/expected.safetensors");
  EXPECT_TRUE(ex.is_ok()) << ex.status().message();
  if (!ex.is_ok()) return x;
  std::vector<int64_t> ps, gs;
  x.prompt = read_ids(*ex, "generate_prompt", &ps);
  x.expected = read_ids(*ex, "generated", &gs);
  EXPECT_EQ(ps.size(), 2u);
  if (ps.size() != 2 || gs.size() != 2) return x;
  x.B = ps[0];
  x.P = ps[1];
  x.row = gs[1];
  x.N = gs[1] - ps[1];
  x.ok = true;
  return x;
}

struct Loaded {
  LoadedModel m;
  std::unique_ptr<InferenceWeights> w;
};
Loaded load(const std::string& name) {
  Loaded l;
  auto m = load_hf_model(kFixtures + name);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  l.m = std::move(*m);
  auto w = InferenceWeights::bind(*l.m.model, Device::cpu(), DType::f32);
  EXPECT_TRUE(w.is_ok()) << w.status().message();
  l.w = std::make_unique<InferenceWeights>(std::move(*w));
  return l;
}

// Greedy decoding of up to n tokens from a fixture model.
GenerateOptions greedy(const TransformerConfig& c, int64_t n, KvCacheUse cache = KvCacheUse::kOn) {
  return {.max_new_tokens = static_cast<int>(n),
          .sampling = Sampling::kGreedy,
          .vocab_size = c.vocab_size,
          .max_seq_len = static_cast<int>(c.max_positions),
          .num_layers = c.n_layer,
          .cache = cache};
}

class GenerateFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(GenerateFixture, GreedyEqualsTransformersWithAndWithoutCache) {
  Loaded l = load(GetParam());
  const Expected x = expected_of(GetParam());
  ASSERT_TRUE(x.ok);
  const std::vector<int32_t>& expected = x.expected;
  const int64_t B = x.B, P = x.P, N = x.N;
  const std::vector<int64_t> gs = {B, x.row};  // (rows, prompt + new tokens)
  const std::vector<std::vector<int32_t>> prompts = x.prompt_rows();
  const TransformerConfig& c = l.m.model->transformer_config();
  for (KvCacheUse cache : {KvCacheUse::kOn, KvCacheUse::kOff}) {
    const GenerateOptions o = greedy(c, N, cache);
    auto out = generate_batch(*l.m.model, l.w->context(), prompts, o);
    ASSERT_EQ(static_cast<int64_t>(out.size()), B);
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int32_t> want(expected.begin() + b * gs[1] + P,
                                      expected.begin() + (b + 1) * gs[1]);
      EXPECT_EQ(out[b], want) << "row " << b
                              << (cache == KvCacheUse::kOn ? " cached" : " uncached");
    }
  }
}

TEST_P(GenerateFixture, RowsStopAfterTheirEosToken) {
  Loaded l = load(GetParam());
  const Expected x = expected_of(GetParam());
  ASSERT_TRUE(x.ok);
  const std::vector<int32_t>& expected = x.expected;
  const int64_t B = x.B, P = x.P, N = x.N;
  const std::vector<int64_t> gs = {B, x.row};  // (rows, prompt + new tokens)
  const std::vector<std::vector<int32_t>> prompts = x.prompt_rows();
  std::vector<std::vector<int32_t>> want(B);
  // The stop token: row 0's third new token. Each row keeps its tokens up to and including
  // its first occurrence (transformers' eos), and the others run to N.
  const int32_t eos = expected[P + 2];
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < N; ++t) {
      want[b].push_back(expected[b * gs[1] + P + t]);
      if (want[b].back() == eos) break;
    }
  }
  const TransformerConfig& c = l.m.model->transformer_config();
  GenerateOptions o = greedy(c, N);
  o.eos_token_ids = {eos};
  auto out = generate_batch(*l.m.model, l.w->context(), prompts, o);
  for (int64_t b = 0; b < B; ++b) EXPECT_EQ(out[b], want[b]) << "row " << b;
  EXPECT_LE(out[0].size(), 3u);
}

// Prompts of different lengths in one batch (no padding: the shorter rows start generating
// while the longer ones are still fed their prompts) give each row what it gives alone, and the
// full-length row what transformers gives.
TEST_P(GenerateFixture, RaggedPromptsEqualEachRowAlone) {
  Loaded l = load(GetParam());
  const Expected x = expected_of(GetParam());
  ASSERT_TRUE(x.ok);
  const std::vector<int32_t>& prompt = x.prompt;
  const std::vector<int32_t>& expected = x.expected;
  const int64_t B = x.B, P = x.P, N = x.N;
  const std::vector<int64_t> gs = {B, x.row};  // (rows, prompt + new tokens)
  ASSERT_GE(P, B + 1);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < B; ++b) {
    // Row b loses its last 2b tokens (b = 0 keeps them all).
    const int64_t len = std::max<int64_t>(1, P - 2 * b);
    prompts.emplace_back(prompt.begin() + b * P, prompt.begin() + b * P + len);
  }
  const TransformerConfig& c = l.m.model->transformer_config();
  for (KvCacheUse cache : {KvCacheUse::kOn, KvCacheUse::kOff}) {
    SCOPED_TRACE(cache == KvCacheUse::kOn ? "cached" : "uncached");
    const GenerateOptions o = greedy(c, N, cache);
    auto out = generate_batch(*l.m.model, l.w->context(), prompts, o);
    ASSERT_EQ(static_cast<int64_t>(out.size()), B);
    for (int64_t b = 0; b < B; ++b) {
      const auto alone = generate_batch(*l.m.model, l.w->context(), {prompts[b]}, o);
      EXPECT_EQ(out[b], alone[0]) << "row " << b;
      EXPECT_EQ(static_cast<int64_t>(out[b].size()), N) << "row " << b;
    }
    EXPECT_EQ(out[0], std::vector<int32_t>(expected.begin() + P, expected.begin() + gs[1]));
  }
}

TEST_P(GenerateFixture, CachedLogitsEqualFullForward) {
  Loaded l = load(GetParam());
  const TransformerConfig& c = l.m.model->transformer_config();
  const int64_t B = 2, T = 9;
  std::vector<int32_t> ids(B * T);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int32_t>((i * 37 + 11) % c.vocab_size);
  Context ctx = l.w->context();
  KvCache cache(B, T, c.n_layer);
  // Prefill 4 positions, then one token at a time; each step's logits against the full forward
  // over the same prefix.
  for (int64_t len = 4; len <= T; ++len) {
    const int64_t from = cache.past_len, n = len - from;
    std::vector<int32_t> step(B * n), prefix(B * len);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < n; ++t) step[b * n + t] = ids[b * T + from + t];
      for (int64_t t = 0; t < len; ++t) prefix[b * len + t] = ids[b * T + t];
    }
    Context cc = ctx;
    cc.kv_cache = &cache;
    const std::vector<double> got =
        l.m.model->forward(cc, Tensor::from_blob(step.data(), {B, n}, DType::i32, Device::cpu()))
            .to_doubles();
    cache.past_len = len;
    Tensor full = l.m.model->forward(
        ctx, Tensor::from_blob(prefix.data(), {B, len}, DType::i32, Device::cpu()));
    const int64_t Vp = full.size(2);
    const std::vector<double> all = full.to_doubles();
    std::vector<double> want;
    for (int64_t b = 0; b < B; ++b) {
      want.insert(want.end(), all.begin() + (b * len + len - 1) * Vp,
                  all.begin() + (b * len + len) * Vp);
    }
    ASSERT_EQ(got.size(), want.size()) << "the cached head returns each row's last position";
    testing::expect_close(got, want, 1e-5, 1e-5, fmt::format("logits at length {}", len).c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Decoders, GenerateFixture,
                         ::testing::Values("gpt2", "llama", "llama_tied_mqa", "qwen2", "opt",
                                           "opt_postln"),
                         [](const auto& info) { return std::string(info.param); });

TEST(Sampling, TopPKeepsTheSmallestSetReachingTheMassAndTopKTheLargest) {
  // Probabilities at temperature 1: softmax of log(p) is p.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  GenerateOptions o{.sampling = Sampling::kSample, .top_k = 0, .top_p = 0.7f, .temperature = 1};
  // Mass 0.5, then 0.8 >= 0.7: tokens 0 and 1 only, in proportion 0.5 : 0.3.
  EXPECT_EQ(sample_logits(logits, o, 0.0), 0);
  EXPECT_EQ(sample_logits(logits, o, 0.62), 0);
  EXPECT_EQ(sample_logits(logits, o, 0.63), 1);
  EXPECT_EQ(sample_logits(logits, o, 0.999), 1);
  o.top_p = 1.0f;
  o.top_k = 3;  // token 3 never drawn
  EXPECT_EQ(sample_logits(logits, o, 0.999), 2);
  o.top_k = 0;
  EXPECT_EQ(sample_logits(logits, o, 0.999), 3);
  o.sampling = Sampling::kGreedy;
  EXPECT_EQ(sample_logits(logits, o, 0.999), 0);
}

}  // namespace
}  // namespace zt::nn
