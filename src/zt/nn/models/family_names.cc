#include "zt/nn/models/family_names.h"

#include <utility>

#include "zt/core/assert.h"

namespace zt::nn {

const FamilyNames& family_names(std::string_view model_type) {
  static const FamilyNames gpt2{.wte = "wte",
                                .wpe = "wpe",
                                .block = "h",
                                .norm1 = "ln_1",
                                .qkv = "attn.c_attn",
                                .attn_out = "attn.c_proj",
                                .norm2 = "ln_2",
                                .up = "mlp.c_fc",
                                .down = "mlp.c_proj",
                                .final_norm = "ln_f",
                                .lm_head = "lm_head",
                                .score = "score",
                                .hf_prefix = "transformer."};
  static const FamilyNames llama{.wte = "embed_tokens",
                                 .block = "layers",
                                 .norm1 = "input_layernorm",
                                 .qkv = "self_attn.qkv_proj",
                                 .attn_out = "self_attn.o_proj",
                                 .norm2 = "post_attention_layernorm",
                                 .up = "mlp.gate_up_proj",
                                 .down = "mlp.down_proj",
                                 .final_norm = "norm",
                                 .lm_head = "lm_head",
                                 .score = "score",
                                 .hf_prefix = "model."};
  static const FamilyNames opt{.wte = "embed_tokens",
                               .wpe = "embed_positions",
                               .project_in = "project_in",
                               .block = "layers",
                               .norm1 = "self_attn_layer_norm",
                               .qkv = "self_attn.qkv_proj",
                               .attn_out = "self_attn.out_proj",
                               .norm2 = "final_layer_norm",
                               .up = "fc1",
                               .down = "fc2",
                               .final_norm = "final_layer_norm",
                               .project_out = "project_out",
                               .lm_head = "lm_head",
                               .score = "score",
                               .hf_prefix = "model.decoder."};
  static const FamilyNames bert{.wte = "embeddings.word_embeddings",
                                .wpe = "embeddings.position_embeddings",
                                .types = "embeddings.token_type_embeddings",
                                .embed_norm = "embeddings.LayerNorm",
                                .block = "encoder.layer",
                                .norm1 = "attention.output.LayerNorm",
                                .qkv = "attention.self.qkv",
                                .attn_out = "attention.output.dense",
                                .norm2 = "output.LayerNorm",
                                .up = "intermediate.dense",
                                .down = "output.dense",
                                .lm_head = "cls.predictions.decoder",
                                .transform = "cls.predictions.transform.dense",
                                .transform_norm = "cls.predictions.transform.LayerNorm",
                                .lm_bias = "cls.predictions.bias",
                                .pooler = "pooler.dense",
                                .classifier = "classifier",
                                .hf_prefix = "bert."};
  if (model_type == "gpt2") return gpt2;
  if (model_type == "llama" || model_type == "qwen2") return llama;
  if (model_type == "opt") return opt;
  ZT_ASSERT(model_type == "bert", "no parameter names for model type '{}'", model_type);
  return bert;
}

std::string_view hf_class_prefix(std::string_view model_type) {
  static constexpr std::pair<std::string_view, std::string_view> kPrefixes[] = {
      {"gpt2", "GPT2"},   {"llama", "Llama"}, {"mistral", "Mistral"},
      {"qwen2", "Qwen2"}, {"opt", "OPT"},     {"bert", "Bert"}};
  for (const auto& [type, prefix] : kPrefixes) {
    if (type == model_type) return prefix;
  }
  return {};
}

}  // namespace zt::nn
