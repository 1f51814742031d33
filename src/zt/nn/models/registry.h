// The model registry's named sizes: the GPT-2 family (gpt2-tiny ... gpt-65b) and Llama 3 shapes
// (llama-tiny ... llama-70b). Every family is a Transformer (models/transformer.h); the family
// rules live in nn/hf/hf_config.cc, keyed by config.json's model_type, so a named size and a
// model directory of the same family build the same model (checkpoint/model_open.h opens
// either, as `--model` names them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"
#include "zt/nn/models/transformer.h"

namespace zt::nn {

// A named size's configuration.
Result<TransformerConfig> model_config_named(std::string_view name);
// Every named size, in size order within each family.
std::vector<std::string> model_names();

}  // namespace zt::nn
