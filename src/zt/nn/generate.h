// Text generation from a language model: greedy or top-k sampling, one token at a time (a full
// forward over the last max_seq tokens each time; no KV cache yet).
#pragma once

#include <cstdint>
#include <vector>

#include "zt/nn/model.h"

namespace zt::nn {

enum class Sampling : unsigned char { kGreedy, kTopK };

struct GenerateOptions {
  int max_new_tokens = 200;
  Sampling sampling = Sampling::kTopK;
  int top_k = 40;
  float temperature = 1.0f;
  uint64_t seed = 42;
  int vocab_size = 0;   // real vocabulary (logits past it are padding)
  int max_seq_len = 0;  // the model's context
};

// `ctx` gives the device, stream and compute dtype; its mode and targets are overridden.
// `hooks` are the engine's (ZeRO-3 gathers parameters through them); every rank of a sharded
// model must call generate together.
std::vector<int32_t> generate(Model& model, Context ctx, std::vector<int32_t> prompt,
                              const GenerateOptions& options, UnitHooks* hooks = nullptr);

// Picks the next token from one row of logits (host values): argmax, or a draw from the top-k
// softmax at `temperature` using `uniform01` in [0,1).
int32_t sample_logits(const std::vector<float>& logits, const GenerateOptions& options,
                      double uniform01);

}  // namespace zt::nn
