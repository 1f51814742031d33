// Model directories as transformers writes them: config.json plus model.safetensors, or shards
// named by model.safetensors.index.json; f32, bf16 or f16 on disk. Loading reads every header
// (checking shapes, dtypes, sizes and that the weights match the config) and attaches to each
// parameter a source that reads only the ranges a rank asks for (nn/param.h ParamSource): a
// stage-3 rank reads its own chunk of each unit and nothing else.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/nn/models/transformer.h"

namespace zt::ckpt {

using nn::Param;
using nn::Transformer;
using nn::TransformerConfig;

// One tensor of transformers' files that (part of) a parameter comes from: rows
// [row_begin, row_begin + rows) of the parameter (viewed as (rows, cols)), transposed when the
// file holds it as (cols, rows) (GPT-2's Conv1D weights).
struct HfPart {
  std::string name;
  int64_t row_begin = 0;
  int64_t rows = 0;
  bool transposed = false;
};

// The file tensors of parameter `p` (rows past the real vocabulary of a padded table come from
// no file and stay 0). `prefix` is the family's body prefix as it appears in the files.
std::vector<HfPart> hf_parts(const TransformerConfig& c, const Param& p,
                             const std::string& prefix);

// File tensors that belong to no parameter but are expected in transformers' files (buffers,
// tied copies, heads this model does not use).
bool hf_tensor_ignored(const TransformerConfig& c, const std::string& name);

// Whether `dir` looks like a model directory (has config.json).
bool is_model_dir(const std::string& dir);

struct LoadedModel {
  std::unique_ptr<Transformer> model;
  bool has_weights = false;  // false: config.json only, the family's random initialisation
  std::vector<std::string> weight_files;
};

// Reads DIR/config.json and the weights beside it (none: random initialisation).
Result<LoadedModel> load_hf_model(const std::string& dir);

}  // namespace zt::ckpt
