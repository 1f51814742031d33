// Text generation from a causal language model: a batch of prompts (of any lengths), greedy or
// sampled (temperature, top-k, top-p as transformers applies them, in that order), with a KV cache
// (nn/kv_cache.h: the prompt once, then one token per step) or, as a check, a full forward over
// the whole sequence for every new token.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "zt/nn/model.h"

namespace zt::nn {

enum class Sampling : unsigned char { kGreedy, kSample };
enum class KvCacheUse : unsigned char { kOn, kOff };

struct GenerateOptions {
  int max_new_tokens = 200;
  Sampling sampling = Sampling::kSample;
  int top_k = 40;            // 0: no top-k filter
  float top_p = 1.0f;        // 1: no nucleus filter
  float temperature = 1.0f;  // 0 means greedy
  uint64_t seed = 42;
  int vocab_size = 0;     // real vocabulary (logits past it are padding)
  int max_seq_len = 0;    // the model's context: generation stops when a row reaches it
  int num_layers = 0;     // attention layers (the cache's size); 0: no cache possible
  std::vector<int32_t> eos_token_ids{};  // a row ends after emitting one of them (none: never)
  KvCacheUse cache = KvCacheUse::kOn;
  // A model sharded over ranks (ZeRO-3) makes every decode step collective: all ranks must run
  // as many as the slowest, though their rows finish at different steps (DeepSpeed's
  // synced_gpus). When set, it is called after each step with whether every row of this rank
  // has finished, and generation stops when it returns true (an all-reduce over the ranks);
  // unset, a rank stops as soon as its own rows have.
  std::function<bool(bool local_done)> everyone_done{};
  // Prompts of different lengths (see generate_batch): the shortest and longest prompt length
  // of all the ranks that generate together (everyone_done), so that every rank runs the same
  // forwards; 0: this batch's own.
  int64_t group_min_prompt = 0, group_max_prompt = 0;
};

// Where the time went (wall clock; every step ends with its logits on the host, so no device
// work is left out).
struct GenerateStats {
  double prefill_s = 0;  // the first forward: the whole prompt
  double decode_s = 0;   // every later forward, one token per row each
  int64_t decode_steps = 0;
};

// `prompts` are B rows; returns each row's new tokens (up to max_new_tokens; fewer when it
// emitted one of eos_token_ids, which is included, or reached max_seq_len). Rows of different
// lengths need no padding: the forward starts at the shortest prompt and each longer row is fed
// its own next prompt token (its prediction discarded) until its prompt is used up, so every row
// sees exactly its own tokens at their own positions (a few more decode steps than prompts of
// one length, as many as the lengths differ). `ctx` gives
// the device, stream and compute dtype; its mode, targets and cache are overridden. `hooks` are
// the engine's (ZeRO-3 gathers parameters through them); every rank of a sharded model must call
// generate together with the same options.
std::vector<std::vector<int32_t>> generate_batch(Model& model, Context ctx,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateOptions& options,
                                                 UnitHooks* hooks = nullptr,
                                                 GenerateStats* stats = nullptr);

// One prompt.
std::vector<int32_t> generate(Model& model, Context ctx, std::vector<int32_t> prompt,
                              const GenerateOptions& options, UnitHooks* hooks = nullptr);

// Picks the next token from one row of logits (host values): argmax, or a draw from the
// temperature-scaled softmax restricted to the top_k tokens and then to the smallest set whose
// probability reaches top_p (at least one token), using `uniform01` in [0,1).
int32_t sample_logits(const std::vector<float>& logits, const GenerateOptions& options,
                      double uniform01);

}  // namespace zt::nn
