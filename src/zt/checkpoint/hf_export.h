// Models out in the Hugging Face format (`zt ckpt export-hf`): a folder that transformers'
// from_pretrained loads as the family's *ForCausalLM / BertForMaskedLM. It inverts the loader
// (hf_weights.h): fused q/k/v and gate/up split back, vocabulary padding rows dropped, GPT-2's
// Conv1D weights transposed back, tied tensors stored once (as transformers stores them), the
// family's prefix on the body's names. Weights are read one tensor at a time, so an export holds
// about one tensor in memory whatever the model's size.
//
// The source is a model directory (config.json + safetensors) or a ZeroTrain checkpoint (its
// metadata records the model's config.json; checkpoint/consolidate.h reads its weights). A folder
// that is both is read as the model directory unless a checkpoint tag is asked for.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "zt/core/dtype.h"
#include "zt/core/status.h"
#include "zt/nn/models/transformer.h"

namespace zt::ckpt {

using nn::Param;
using nn::Transformer;
using nn::TransformerConfig;

// (Default member initialisers: designated initialisers may leave out any of them.)
struct HfExportOptions {
  // f32, bf16 or f16. nullopt: each tensor keeps the dtype it had on disk (a model directory),
  // f32 (a checkpoint: its master weights).
  std::optional<DType> dtype{};
  int64_t max_shard_bytes = 5'000'000'000;  // transformers' max_shard_size="5GB"
  std::string tag{};                        // checkpoint tag (empty: the one `latest` names)
  // A checkpoint with LoRA adapters: write them as a PEFT adapter (checkpoint/lora_export.h)
  // instead of the merged model. Without this, adapters are merged into the base weights.
  bool adapter_only = false;
  std::function<void(const std::string&)> progress{};  // told each file written (may be empty)
};

struct HfExportSummary {
  std::string source;  // "model directory" or "checkpoint <tag>"
  int tensors = 0;
  int64_t parameters = 0;  // elements written (padding rows not counted)
  int64_t bytes = 0;       // of tensor data
  int files = 0;           // safetensors files
  std::string dtypes;      // "bf16", or "f32+bf16" when tensors kept mixed dtypes
};

// SRC (a model directory or a checkpoint folder) -> OUT_DIR: the weights as model.safetensors
// (or model-0000i-of-0000n.safetensors + model.safetensors.index.json past max_shard_bytes),
// config.json, and the tokenizer and generation files found beside a model directory.
Result<HfExportSummary> hf_export(const std::string& src, const std::string& out_dir,
                                  const HfExportOptions& options);

// Elements [lo, hi) of parameter `p`'s full value as f32 (row-major in its own shape).
using ParamRead = std::function<Status(const Param& p, int64_t lo, int64_t hi, float* out)>;

// Where the export of one model gets what it writes.
struct HfExportSource {
  ParamRead read{};
  // The dtype of each tensor written, by its transformers name.
  std::function<DType(const std::string& hf_name)> dtype_of{};
  // The dtype config.json should name ("dtype" / "torch_dtype"); nullopt: as the config says.
  std::optional<DType> config_dtype{};
  std::string tokenizer_dir{};  // folder to copy tokenizer files from ("" none)
};

// Writes `model` (its config_json() and every parameter through source.read) into OUT_DIR.
Result<HfExportSummary> hf_export_model(Transformer& model, const HfExportSource& source,
                                        const std::string& out_dir, const HfExportOptions& options);

// "f32"/"fp32"/"float32", "bf16"/"bfloat16", "f16"/"fp16"/"float16": the dtypes an export writes.
Result<DType> hf_export_dtype_parse(const std::string& text, std::string_view flag);

// The files beside a model that are copied with it (tokenizer, generation settings).
const std::vector<std::string>& hf_companion_files();

}  // namespace zt::ckpt
