#include "zt/nn/models/registry.h"

#include "zt/nn/hf/hf_config.h"
#include "zt/nn/models/gpt2.h"

namespace zt::nn {
namespace {

// Llama 3's shapes (head size 64 at 1B, 128 above; 8 KV heads; rope theta 500000), written as
// the config.json transformers would read, so they go through the family's one reader.
struct LlamaShape {
  const char* name;
  int layers, heads, kv_heads;
  int64_t hidden, inner;
  int vocab;
  int64_t positions;
  bool tied;
};
constexpr LlamaShape kLlamaShapes[] = {
    // Tests and the CPU demo: byte-level vocabulary, 2 KV heads (grouped-query attention).
    {"llama-tiny", 4, 4, 2, 128, 352, 257, 256, true},
    {"llama-1b", 16, 32, 8, 2048, 8192, 128256, 8192, true},
    {"llama-8b", 32, 32, 8, 4096, 14336, 128256, 8192, false},
    {"llama-70b", 80, 64, 8, 8192, 28672, 128256, 8192, false},
};

nlohmann::json llama_config_json(const LlamaShape& s) {
  return {{"model_type", "llama"},
          {"architectures", {"LlamaForCausalLM"}},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"hidden_size", s.hidden},
          {"intermediate_size", s.inner},
          {"vocab_size", s.vocab},
          {"max_position_embeddings", s.positions},
          {"rope_theta", 500000.0},
          {"rms_norm_eps", 1e-5},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", s.tied},
          {"initializer_range", 0.02}};
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names = gpt2_config_names();
  for (const LlamaShape& s : kLlamaShapes) names.emplace_back(s.name);
  return names;
}

Result<TransformerConfig> model_config_named(std::string_view name) {
  for (const LlamaShape& s : kLlamaShapes) {
    if (name == s.name) return transformer_config_from_hf(llama_config_json(s), s.name);
  }
  if (auto g = gpt2_config_named(name); g.is_ok()) return gpt2_transformer_config(*g);
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  return not_found(
      "unknown model '{}': give a model directory (config.json + *.safetensors) or one of: {}",
      name, known);
}

}  // namespace zt::nn
