// What `--model` names, opened: a Hugging Face model directory (config.json, with or without
// safetensors beside it: the family comes from its model_type; hf_weights.h reads it) or a named
// size of the registry (nn/models/registry.h, initialised by the family's rule).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "zt/core/status.h"
#include "zt/nn/models/transformer.h"

namespace zt::ckpt {

struct ModelChoice {
  std::unique_ptr<nn::Transformer> model;
  std::string source_dir;    // the model directory; empty for a named size
  bool has_weights = false;  // parameters come from weight files (else the family's init)
};

// Options a named size accepts (a model directory fixes its own).
struct ModelOverrides {
  int vocab_size = 0;  // 0: the model's own
};

// Errors name the directory's file or list the known names.
Result<ModelChoice> model_open(std::string_view name_or_dir, const ModelOverrides& overrides = {});

}  // namespace zt::ckpt
