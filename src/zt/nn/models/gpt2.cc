#include "zt/nn/models/gpt2.h"

#include <cmath>
#include <string_view>

namespace zt::nn {

Result<Gpt2Config> gpt2_config_named(std::string_view name) {
  auto make = [](int l, int h, int c, int vocab, int ctx) {
    return Gpt2Config{.n_layer = l,
                      .n_head = h,
                      .n_embd = c,
                      .vocab_size = vocab,
                      .padded_vocab_size = padded_vocab(vocab),
                      .max_seq_len = ctx};
  };
  if (name == "gpt2-tiny") return make(4, 4, 128, 257, 256);
  if (name == "gpt2") return make(12, 12, 768, 50257, 1024);
  if (name == "gpt2-medium") return make(24, 16, 1024, 50257, 1024);
  if (name == "gpt2-large") return make(36, 20, 1280, 50257, 1024);
  if (name == "gpt2-xl") return make(48, 25, 1600, 50257, 1024);
  if (name == "gpt-1.3b") return make(24, 16, 2048, 50257, 1024);
  if (name == "gpt-2.7b") return make(32, 32, 2560, 50257, 2048);
  if (name == "gpt-6.7b") return make(32, 32, 4096, 50257, 2048);
  if (name == "gpt-13b") return make(40, 40, 5120, 50257, 2048);
  // Between the paper's 13B and 175B, same shape rules (head size 128): for "largest model" probes.
  if (name == "gpt-20b") return make(44, 48, 6144, 50257, 2048);
  if (name == "gpt-30b") return make(48, 56, 7168, 50257, 2048);
  if (name == "gpt-40b") return make(48, 64, 8192, 50257, 2048);
  if (name == "gpt-50b") return make(60, 64, 8192, 50257, 2048);
  if (name == "gpt-65b") return make(80, 64, 8192, 50257, 2048);
  std::string names;
  for (const auto& n : gpt2_config_names()) names += (names.empty() ? "" : ", ") + n;
  return not_found("unknown model '{}'; known models: {}", name, names);
}

std::vector<std::string> gpt2_config_names() {
  return {"gpt2-tiny", "gpt2",    "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt-1.3b", "gpt-2.7b",
          "gpt-6.7b",  "gpt-13b", "gpt-20b",     "gpt-30b",    "gpt-40b", "gpt-50b",  "gpt-65b"};
}

TransformerConfig gpt2_transformer_config(const Gpt2Config& c) {
  ZT_ASSERT(c.n_embd % c.n_head == 0, "n_embd {} not divisible by n_head {}", c.n_embd, c.n_head);
  TransformerConfig t;
  t.model_type = "gpt2";
  t.n_layer = c.n_layer;
  t.n_head = t.n_kv_head = c.n_head;
  t.hidden = t.embed_dim = c.n_embd;
  t.head_dim = c.n_embd / c.n_head;
  t.inner = 4 * int64_t{c.n_embd};
  t.vocab_size = c.vocab_size;
  t.padded_vocab_size = c.padded_vocab_size;
  t.max_positions = c.max_seq_len;
  t.norm = NormKind::kLayerNorm;
  t.norm_eps = 1e-5f;
  t.act = kernels::Activation::kGeluTanh;
  t.positions = Positions::kLearned;
  t.tied = Tied::kYes;
  t.init_std = 0.02f;
  t.position_init_std = 0.01f;
  t.residual_init_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  return t;
}

}  // namespace zt::nn
