#include "zt/checkpoint/lora_export.h"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "zt/checkpoint/consolidate.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/core/file_io.h"

namespace zt::ckpt {
namespace fs = std::filesystem;

nlohmann::json lora_json(const LoraRecord& r) {
  nlohmann::json adapters = nlohmann::json::array();
  for (const LoraAdapterRecord& a : r.adapters) {
    adapters.push_back({{"base", a.base},
                        {"module", a.module},
                        {"row0", a.row0},
                        {"rows", a.rows},
                        {"a", a.a},
                        {"b", a.b}});
  }
  return {{"r", r.r},
          {"alpha", r.alpha},
          {"dropout", r.dropout},
          {"only_optimize", r.only_optimize},
          {"modules", r.modules},
          {"adapters", adapters}};
}

Result<LoraRecord> lora_record_from(const nlohmann::json& j, const std::string& what) {
  try {
    LoraRecord r;
    r.r = j.at("r").get<int>();
    r.alpha = j.at("alpha").get<float>();
    r.dropout = j.at("dropout").get<float>();
    r.only_optimize = j.at("only_optimize").get<bool>();
    r.modules = j.at("modules").get<std::vector<std::string>>();
    for (const auto& a : j.at("adapters")) {
      r.adapters.push_back({.base = a.at("base").get<std::string>(),
                            .module = a.at("module").get<std::string>(),
                            .row0 = a.at("row0").get<int64_t>(),
                            .rows = a.at("rows").get<int64_t>(),
                            .a = a.at("a").get<std::string>(),
                            .b = a.at("b").get<std::string>()});
    }
    if (r.r <= 0 || r.adapters.empty()) {
      return invalid_argument("{}: model.lora has rank {} and {} adapters", what, r.r,
                              r.adapters.size());
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("{}: model.lora is not a LoRA record ({})", what, e.what());
  }
}

namespace {

Result<std::vector<float>> read_whole(const CheckpointWeights& w, const std::string& name,
                                      std::vector<int64_t> shape) {
  const CheckpointParam* p = w.find(name);
  if (p == nullptr || p->shape != shape) {
    return invalid_argument("'{}': the LoRA parameter '{}' is missing or not of shape [{}]",
                            w.path(), name, fmt::join(shape, ", "));
  }
  std::vector<float> v(static_cast<size_t>(p->numel));
  ZT_RETURN_IF_ERROR(w.read(*p, 0, p->numel, v.data()));
  return v;
}

}  // namespace

Status lora_merge_into(const CheckpointWeights& w, const LoraRecord& lora, const std::string& base,
                       int64_t cols, int64_t lo, int64_t hi, float* out) {
  const float scale = lora.scale();
  for (const LoraAdapterRecord& ad : lora.adapters) {
    if (ad.base != base) continue;
    const int64_t begin = std::max(lo, ad.row0 * cols), end = std::min(hi, (ad.row0 + ad.rows) * cols);
    if (begin >= end) continue;
    ZT_ASSIGN_OR_RETURN(std::vector<float> A, read_whole(w, ad.a, {lora.r, cols}));
    ZT_ASSIGN_OR_RETURN(std::vector<float> B, read_whole(w, ad.b, {ad.rows, lora.r}));
    for (int64_t e = begin; e < end; ++e) {
      const int64_t row = e / cols - ad.row0, col = e % cols;
      double d = 0;
      for (int k = 0; k < lora.r; ++k) {
        d += static_cast<double>(B[static_cast<size_t>(row * lora.r + k)]) *
             A[static_cast<size_t>(k * cols + col)];
      }
      out[e - lo] += static_cast<float>(scale * d);
    }
  }
  return Status::ok();
}

Result<PeftExportSummary> peft_adapter_write(const CheckpointWeights& w, const LoraRecord& lora,
                                             const std::string& model_type,
                                             const std::string& base_model,
                                             const std::string& out_dir) {
  if (!lora.only_optimize) {
    return invalid_argument(
        "'{}' trained the base weights too (no --only-optimize-lora): a PEFT adapter would "
        "leave those changes out; export the merged model (without --adapter-only)",
        w.path());
  }
  std::vector<TensorToWrite> tensors;
  PeftExportSummary sum;
  for (const LoraAdapterRecord& a : lora.adapters) {
    for (const std::string& name : {a.a, a.b}) {
      const CheckpointParam* p = w.find(name);
      if (p == nullptr) {
        return invalid_argument("'{}': the LoRA parameter '{}' is missing", w.path(), name);
      }
      const bool is_a = name == a.a;
      tensors.push_back(
          {.name = fmt::format("base_model.model.{}.{}.weight", a.module, is_a ? "lora_A" : "lora_B"),
           .dtype = DType::f32,
           .shape = p->shape,
           .data = nullptr,
           .produce = [&w, p](void* buf) {
             return w.read(*p, 0, p->numel, static_cast<float*>(buf));
           }});
      sum.parameters += p->numel;
      sum.bytes += p->numel * 4;
    }
  }
  sum.tensors = static_cast<int>(tensors.size());
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error("cannot create '{}': {}", out_dir, ec.message());
  ZT_RETURN_IF_ERROR(safetensors_write((fs::path(out_dir) / "adapter_model.safetensors").string(),
                                       tensors, {{"format", "pt"}}, "adapter weights")
                         .status());
  const nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base_model},
      {"r", lora.r},
      {"lora_alpha", lora.alpha},
      {"lora_dropout", lora.dropout},
      {"target_modules", lora.modules},
      {"fan_in_fan_out", model_type == "gpt2"},  // GPT-2's Conv1D stores weights (in, out)
      {"bias", "none"},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"modules_to_save", nullptr}};
  ZT_RETURN_IF_ERROR(file_write_atomic((fs::path(out_dir) / "adapter_config.json").string(),
                                       config.dump(2) + "\n", "adapter config"));
  return sum;
}

}  // namespace zt::ckpt
