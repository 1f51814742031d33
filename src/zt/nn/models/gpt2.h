// GPT-2: token + position embedding, L pre-norm transformer blocks (causal self-attention and a
// 4x GELU MLP), a final layernorm and a language-model head tied to the token embedding, built as
// a Transformer (models/transformer.h). GPT-2's initialisation: N(0, 0.02) weights, positions
// N(0, 0.01), residual projections N(0, 0.02/sqrt(2L)), zero biases, unit layernorm gains.
#pragma once

#include <string>
#include <vector>

#include "zt/nn/models/transformer.h"

namespace zt::nn {

struct Gpt2Config {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int vocab_size = 50257;
  int padded_vocab_size = 50304;  // vocab rounded up to a multiple of 128 (GEMM-friendly)
  int max_seq_len = 1024;
};

// Named sizes: gpt2-tiny (tests and the CPU demo, byte-level vocabulary), gpt2 (124M),
// gpt2-medium (350M), gpt2-large (774M), gpt2-xl (1.5B), and GPT-3-shaped gpt-1.3b (24 layers,
// width 2048), gpt-2.7b (32 x 2560), gpt-6.7b (32 x 4096), gpt-13b (40 x 5120; context 2048),
// and, for largest-model probes, gpt-20b (44 x 6144), gpt-30b (48 x 7168), gpt-40b (48 x 8192),
// gpt-50b (60 x 8192) and gpt-65b (80 x 8192), head size 128.
Result<Gpt2Config> gpt2_config_named(std::string_view name);
std::vector<std::string> gpt2_config_names();
// The Transformer configuration of a GPT-2 shape.
TransformerConfig gpt2_transformer_config(const Gpt2Config& c);

class Gpt2 : public Transformer {
 public:
  explicit Gpt2(const Gpt2Config& config)
      : Transformer(gpt2_transformer_config(config)), config_(config) {}
  const Gpt2Config& config() const { return config_; }

 private:
  Gpt2Config config_;
};

}  // namespace zt::nn
