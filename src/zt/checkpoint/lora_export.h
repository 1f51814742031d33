// LoRA adapters out of a checkpoint: the record of the adapters a run trained (its rank, alpha
// and every adapter's place, kept in the checkpoint's metadata as model.lora), merging them into
// the base weights for `zt ckpt export-hf`, and PEFT's adapter format for
// `zt ckpt export-hf --adapter-only` (adapter_config.json + adapter_model.safetensors, which
// peft's PeftModel.from_pretrained loads onto the base model). tasks/lora.h adds the adapters.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/core/status.h"

namespace zt::ckpt {

class CheckpointWeights;

// One adapter: its base parameter (ZeroTrain's name), the rows of it the adapter covers, the
// Hugging Face module and the adapter's two parameters.
struct LoraAdapterRecord {
  std::string base;    // "layers.0.self_attn.qkv_proj.weight"
  std::string module;  // "model.layers.0.self_attn.q_proj" (the name in transformers' files)
  int64_t row0 = 0, rows = 0;
  std::string a, b;  // "layers.0.self_attn.q_proj.lora_A.weight", "...lora_B.weight"
};

struct LoraRecord {
  int r = 0;
  float alpha = 1.0f;
  float dropout = 0.0f;
  bool only_optimize = false;
  std::vector<std::string> modules;  // the module names matched (PEFT's target_modules)
  std::vector<LoraAdapterRecord> adapters;
  float scale() const { return alpha / static_cast<float>(r); }
};

nlohmann::json lora_json(const LoraRecord& record);
// `what` names the JSON's origin in errors (a checkpoint's metadata file).
Result<LoraRecord> lora_record_from(const nlohmann::json& j, const std::string& what);

// Elements [lo, hi) (row-major, `cols` columns) of the merged weight W + scale B A of every
// adapter on `base`, added into `out`, which holds W's elements [lo, hi) already. A and B are
// read from the checkpoint.
Status lora_merge_into(const CheckpointWeights& w, const LoraRecord& lora, const std::string& base,
                       int64_t cols, int64_t lo, int64_t hi, float* out);

struct PeftExportSummary {
  int tensors = 0;
  int64_t parameters = 0;
  int64_t bytes = 0;
};

// OUT_DIR/adapter_config.json and OUT_DIR/adapter_model.safetensors (f32): the adapters as PEFT
// names them ("base_model.model.<module>.lora_A.weight"), for the base model `base_model`
// (recorded as base_model_name_or_path) of `model_type` (GPT-2's Conv1D modules get
// fan_in_fan_out). Refused when the run trained more than the adapters (the merged export
// carries those weights).
Result<PeftExportSummary> peft_adapter_write(const CheckpointWeights& w, const LoraRecord& lora,
                                             const std::string& model_type,
                                             const std::string& base_model,
                                             const std::string& out_dir);

}  // namespace zt::ckpt
