// The parameter names of each family: the Hugging Face names without the model's prefix
// ("model.", "model.decoder.", "bert.", "transformer."), except where ZeroTrain fuses tensors
// (q/k/v into one projection, gate/up into one): checkpoints, exports and error messages speak
// the names users know.
#pragma once

#include <string>
#include <string_view>

namespace zt::nn {

struct FamilyNames {
  // (Default member initialisers: a family leaves out what it does not have.)
  std::string wte{}, wpe{}, types{}, embed_norm{}, project_in{};
  std::string block{};  // "h", "layers", "encoder.layer": block i is "<block>.<i>."
  std::string norm1{}, qkv{}, attn_out{}, norm2{}, up{}, down{};
  std::string final_norm{}, project_out{}, lm_head{}, transform{}, transform_norm{}, lm_bias{};
  std::string pooler{}, classifier{};  // sequence classification (BERT)
  std::string score{};                 // a decoder's reward (value) head: "score"
  // Prefix of the body's tensors in transformers' files; head tensors named lm_head.*, cls.*,
  // classifier.* or score.* carry none. GPT-2's files may have it or not (GPT2LMHeadModel vs
  // GPT2Model).
  std::string hf_prefix{};
};

// The names of a family (gpt2, llama, qwen2, opt, bert); an unknown family aborts (callers
// check the model type first).
const FamilyNames& family_names(std::string_view model_type);

// transformers' class-name prefix of a config.json model_type: "gpt2" -> "GPT2", "llama" ->
// "Llama", "mistral" -> "Mistral", "qwen2" -> "Qwen2", "opt" -> "OPT", "bert" -> "Bert"; empty
// when unknown. A reward model's architecture is "<prefix>ForSequenceClassification".
std::string_view hf_class_prefix(std::string_view model_type);

}  // namespace zt::nn
