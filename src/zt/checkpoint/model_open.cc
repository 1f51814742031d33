#include "zt/checkpoint/model_open.h"

#include <filesystem>

#include "zt/checkpoint/hf_weights.h"
#include "zt/nn/models/registry.h"

namespace zt::ckpt {

Result<ModelChoice> model_open(std::string_view name_or_dir, const ModelOverrides& overrides) {
  const std::string spec(name_or_dir);
  ModelChoice out;
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec)) {
    if (!is_model_dir(spec)) {
      return not_found("--model {}: a folder without config.json (a Hugging Face model directory "
                       "has config.json and model.safetensors)",
                       spec);
    }
    if (overrides.vocab_size > 0) {
      return invalid_argument("--vocab-size cannot change the model in {}: edit its config.json",
                              spec);
    }
    ZT_ASSIGN_OR_RETURN(LoadedModel loaded, load_hf_model(spec));
    out.model = std::move(loaded.model);
    out.has_weights = loaded.has_weights;
    out.source_dir = spec;
    return out;
  }
  ZT_ASSIGN_OR_RETURN(nn::TransformerConfig c, nn::model_config_named(spec));
  if (overrides.vocab_size > 0) {
    c.vocab_size = overrides.vocab_size;
    c.padded_vocab_size = nn::padded_vocab(c.vocab_size);
  }
  out.model = std::make_unique<nn::Transformer>(c);
  return out;
}

}  // namespace zt::ckpt
