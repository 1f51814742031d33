// The model registry: what `--model` names. A Hugging Face model directory (config.json, with or
// without safetensors beside it: the family comes from its `model_type`), or a named size: the
// GPT-2 family (gpt2-tiny ... gpt-65b) and Llama 3 shapes (llama-tiny ... llama-70b). Every family
// is a Transformer (models/transformer.h); the family rules live in nn/hf/hf_config.cc, keyed by
// model_type, so a named size and a directory of the same family build the same model.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"
#include "zt/nn/models/transformer.h"

namespace zt::nn {

struct ModelChoice {
  std::unique_ptr<Transformer> model;
  std::string source_dir;    // the model directory; empty for a named size
  bool has_weights = false;  // parameters come from weight files (else the family's init)
};

// Options a named size accepts (a model directory fixes its own).
struct ModelOverrides {
  int vocab_size = 0;  // 0: the model's own
};

// A named size's configuration.
Result<TransformerConfig> model_config_named(std::string_view name);
// Every named size, in size order within each family.
std::vector<std::string> model_names();
// A model directory or a named size; errors name the directory's file or list the known names.
Result<ModelChoice> model_open(std::string_view name_or_dir, const ModelOverrides& overrides = {});

}  // namespace zt::nn
