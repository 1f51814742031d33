#include "zt/nn/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "zt/kernels/ops.h"
#include "zt/nn/kv_cache.h"

namespace zt::nn {

int32_t sample_logits(const std::vector<float>& logits, const GenerateOptions& options,
                      double uniform01) {
  const int V = options.vocab_size > 0 ? std::min<int>(options.vocab_size, logits.size())
                                       : static_cast<int>(logits.size());
  if (options.sampling == Sampling::kGreedy || options.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) -
                                logits.begin());
  }
  const int k = options.top_k > 0 ? std::min(options.top_k, V) : V;
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double t = static_cast<double>(options.temperature);
  std::vector<double> p(k);
  const double maxl = logits[idx[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[idx[i]] - maxl) / t);
  // Nucleus: keep the most probable tokens until their mass reaches top_p (the token that
  // crosses it stays, as in transformers' TopPLogitsWarper).
  int keep = k;
  if (options.top_p < 1.0f) {
    double mass = 0;
    for (int i = 0; i < k; ++i) {
      mass += p[i] / sum;
      if (mass >= options.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (int i = 0; i < keep; ++i) kept += p[i];
  double r = uniform01 * kept;
  for (int i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return idx[i];
  }
  return idx[keep - 1];
}

std::vector<std::vector<int32_t>> generate_batch(Model& model, Context ctx,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateOptions& options,
                                                 UnitHooks* hooks, GenerateStats* stats) {
  ZT_ASSERT(!prompts.empty() && !prompts[0].empty(), "generate needs at least one prompt token");
  ZT_ASSERT(options.max_seq_len > 0, "generate needs max_seq_len");
  const int64_t B = static_cast<int64_t>(prompts.size());
  int64_t lo = static_cast<int64_t>(prompts[0].size()), hi = lo;
  for (const auto& p : prompts) {
    ZT_ASSERT(!p.empty(), "generate needs at least one token in every prompt");
    lo = std::min<int64_t>(lo, static_cast<int64_t>(p.size()));
    hi = std::max<int64_t>(hi, static_cast<int64_t>(p.size()));
  }
  if (options.group_min_prompt > 0) {
    ZT_ASSERT(options.everyone_done != nullptr,
              "the group's prompt lengths are for ranks that stop together (everyone_done)");
    ZT_ASSERT(options.group_min_prompt <= lo && options.group_max_prompt >= hi,
              "the group's prompt lengths [{}, {}] do not span this batch's [{}, {}]",
              options.group_min_prompt, options.group_max_prompt, lo, hi);
    lo = options.group_min_prompt;
    hi = options.group_max_prompt;
  }
  ZT_ASSERT(hi <= options.max_seq_len, "prompt of {} tokens is longer than the context {}", hi,
            options.max_seq_len);
  const int64_t P = lo;  // the first forward's length
  const int64_t total = std::min<int64_t>(hi + options.max_new_tokens, options.max_seq_len);
  ctx.mode = Mode::kEval;
  ctx.targets = nullptr;
  ctx.attention_mask = nullptr;
  ctx.token_types = nullptr;
  const bool cached = options.cache == KvCacheUse::kOn;
  ZT_ASSERT(!cached || options.num_layers > 0, "a KV cache needs the model's layer count");
  KvCache cache(B, total, cached ? options.num_layers : 0);
  ctx.kv_cache = cached ? &cache : nullptr;

  const bool greedy = options.sampling == Sampling::kGreedy || options.temperature <= 0.0f;
  const int64_t vocab = options.vocab_size;
  ZT_ASSERT(vocab > 0, "generate needs the vocabulary size");
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(B)), out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) seqs[b].assign(prompts[b].begin(), prompts[b].begin() + P);
  std::vector<bool> done(static_cast<size_t>(B), false);
  GenerateStats local;
  GenerateStats& st = stats != nullptr ? *stats : local;
  st = GenerateStats{};
  for (int64_t len = P; len < total; ++len) {
    const auto t0 = std::chrono::steady_clock::now();
    // With the cache: the prompt once, then the one new token of every row.
    const int64_t from = cached ? cache.past_len : 0, T = len - from;
    std::vector<int32_t> host(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b) {
      std::copy(seqs[b].begin() + from, seqs[b].begin() + len, host.begin() + b * T);
    }
    Tensor tokens = Tensor::from_blob(host.data(), {B, T}, DType::i32, Device::cpu());
    Tensor dev_tokens = ctx.device.is_cpu() ? tokens.clone() : tokens.to(ctx.device, ctx.stream);
    Tensor logits = model.forward(ctx, dev_tokens, hooks);
    if (cached) cache.past_len = len;
    const int64_t rows_t = logits.size(1), Vp = logits.size(2);
    std::vector<int32_t> next_ids(static_cast<size_t>(B), 0);
    if (greedy) {
      // Argmax on the device: one id per row comes to the host, not (B, V) logits.
      Tensor ids = Tensor::empty({B * rows_t}, DType::i32, ctx.device, ctx.stream);
      kernels::argmax_rows(ids, logits.reshape({B * rows_t, Vp}), vocab, ctx.stream);
      const std::vector<double> got = ids.to_doubles();
      for (int64_t b = 0; b < B; ++b) next_ids[b] = static_cast<int32_t>(got[b * rows_t + rows_t - 1]);
    } else {
      const std::vector<float> all = logits.to_floats();
      for (int64_t b = 0; b < B; ++b) {
        const auto first = all.begin() + (b * rows_t + rows_t - 1) * Vp;
        next_ids[b] = sample_logits(std::vector<float>(first, first + Vp), options, uni(rng));
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (len == P) {
      st.prefill_s = secs;
    } else {
      st.decode_s += secs;
      ++st.decode_steps;
    }
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      const auto& prompt = prompts[b];
      if (len < static_cast<int64_t>(prompt.size())) {
        // Still inside this row's prompt: its own next token, not the prediction.
        seqs[b].push_back(prompt[static_cast<size_t>(len)]);
        all_done = false;
        continue;
      }
      const int32_t next = next_ids[b];
      seqs[b].push_back(next);
      if (!done[b] && static_cast<int64_t>(out[b].size()) < options.max_new_tokens) {
        out[b].push_back(next);
      }
      if (std::find(options.eos_token_ids.begin(), options.eos_token_ids.end(), next) !=
              options.eos_token_ids.end() ||
          static_cast<int64_t>(out[b].size()) >= options.max_new_tokens) {
        done[b] = true;
      }
      all_done = all_done && done[b];
    }
    if (options.everyone_done ? options.everyone_done(all_done) : all_done) break;
  }
  return out;
}

std::vector<int32_t> generate(Model& model, Context ctx, std::vector<int32_t> prompt,
                              const GenerateOptions& options, UnitHooks* hooks) {
  return generate_batch(model, ctx, {std::move(prompt)}, options, hooks)[0];
}

}  // namespace zt::nn
