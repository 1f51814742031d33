// Hugging Face config.json <-> TransformerConfig, per family (gpt2, llama and mistral without a
// sliding window, qwen2, opt, bert). Both the transformers 4.x rope keys (rope_theta,
// rope_scaling) and 5.x's rope_parameters are read. A key whose value ZeroTrain cannot honour is
// an error naming the key and the file, never silently different math.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "zt/core/status.h"
#include "zt/nn/models/transformer.h"

namespace zt::nn {

// The families ZeroTrain builds (model_type values).
const std::vector<std::string>& hf_model_types();

// `where` names the file in errors. `task` "" takes the task from `architectures` (masked LM for
// BertForMaskedLM / BertForPreTraining, else causal LM).
Result<TransformerConfig> transformer_config_from_hf(const nlohmann::json& config,
                                                     std::string_view where);

// config.json for a model (the inverse of the above for every key it reads).
nlohmann::json hf_config_from_transformer(const TransformerConfig& c);

}  // namespace zt::nn
