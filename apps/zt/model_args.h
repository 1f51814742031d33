// What `zt eval` and `zt generate` share: the model (--model), the device (--device) and the
// weights' dtype (--dtype), with the weights bound for inference (runtime/inference.h).
#pragma once

#include <memory>
#include <string>

#include "cli_args.h"
#include "zt/checkpoint/model_open.h"
#include "zt/data/tokenizer/tokenizer.h"
#include "zt/runtime/inference.h"

namespace zt::cli {

// The flags this adds to a command's table.
std::vector<FlagSpec> model_flags();

struct InferenceModel {
  ckpt::ModelChoice choice;
  std::unique_ptr<InferenceWeights> weights;
  nn::Transformer& model() { return *choice.model; }
  const nn::TransformerConfig& config() const { return choice.model->transformer_config(); }
};

// --model (required), --device (default: cuda when a GPU is visible), --dtype (default: bf16 on
// a GPU, f32 on the CPU).
Result<InferenceModel> inference_model_open(const ParsedArgs& a, const std::string& command);

// The tokenizer for a model's text: --tokenizer when given (a tokenizer.json, a folder holding
// one, or 'bytes'), else the tokenizer.json in the model directory, else the byte tokenizer for
// a named size (ZeroTrain's own models train on bytes). A Hugging Face directory without a
// tokenizer.json is an error asking for --tokenizer. The model's vocabulary must hold every id
// the tokenizer makes.
Result<std::shared_ptr<const Tokenizer>> model_tokenizer(const ParsedArgs& a,
                                                         const ckpt::ModelChoice& choice,
                                                         int64_t model_vocab);
FlagSpec tokenizer_flag();
// eos_token_id of a model directory's config.json (the first of a list), or nullopt.
std::optional<int32_t> model_eos_id(const std::string& source_dir);

}  // namespace zt::cli
