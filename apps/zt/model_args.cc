#include "model_args.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "zt/core/log.h"

namespace zt::cli {

std::vector<FlagSpec> model_flags() {
  return {
      {"--model", FlagKind::kValue,
       "a Hugging Face model directory (config.json + *.safetensors) or a named size "
       "(gpt2-tiny, llama-tiny, ...)",
       "DIR|NAME"},
      {"--device", FlagKind::kValue, "cpu, cuda or cuda:N (default: cuda when a GPU is visible)",
       "DEV"},
      {"--dtype", FlagKind::kValue, "f32, bf16 or f16 (default: bf16 on a GPU, f32 on the CPU)",
       "DTYPE"},
  };
}

Result<InferenceModel> inference_model_open(const ParsedArgs& a, const std::string& command) {
  auto name = a.get("--model");
  if (!name) return invalid_argument("{} needs --model DIR|NAME", command);
  Device device = cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  if (auto d = a.get("--device")) {
    ZT_ASSIGN_OR_RETURN(device, device_parse(*d));
  }
  ZT_RETURN_IF_ERROR(device_check(device));
  DType dtype = device.is_cuda() ? DType::bf16 : DType::f32;
  if (auto d = a.get("--dtype")) {
    ZT_ASSIGN_OR_RETURN(dtype, dtype_parse(*d));
    if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
      return invalid_argument("--dtype must be f32, bf16 or f16, not '{}'", *d);
    }
  }
  InferenceModel m;
  ZT_ASSIGN_OR_RETURN(m.choice, ckpt::model_open(*name));
  if (!m.choice.has_weights) {
    ZT_LOG_WARN("{}: no weights, the model is randomly initialised", *name);
  }
  ZT_ASSIGN_OR_RETURN(InferenceWeights w, InferenceWeights::bind(m.model(), device, dtype));
  m.weights = std::make_unique<InferenceWeights>(std::move(w));
  return m;
}

std::optional<int32_t> model_eos_id(const std::string& source_dir) {
  if (source_dir.empty()) return std::nullopt;
  std::ifstream in(std::filesystem::path(source_dir) / "config.json");
  if (!in) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("eos_token_id")) return std::nullopt;
  const nlohmann::json& e = j["eos_token_id"];
  if (e.is_number_integer()) return e.get<int32_t>();
  if (e.is_array() && !e.empty() && e[0].is_number_integer()) return e[0].get<int32_t>();
  return std::nullopt;
}

FlagSpec tokenizer_flag() {
  return {"--tokenizer", FlagKind::kValue,
          "tokenizer.json, a folder holding one, or 'bytes' (default: the model directory's "
          "tokenizer.json; bytes for a named size)",
          "PATH"};
}

Result<std::shared_ptr<const Tokenizer>> model_tokenizer(const ParsedArgs& a,
                                                         const ckpt::ModelChoice& choice,
                                                         int64_t model_vocab) {
  std::string name;
  if (auto t = a.get("--tokenizer")) {
    name = *t;
  } else if (choice.source_dir.empty()) {
    name = "bytes";
  } else {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::path(choice.source_dir) / "tokenizer.json", ec)) {
      return invalid_argument(
          "--model {} has no tokenizer.json; name the tokenizer with --tokenizer FILE (or "
          "--tokenizer bytes for a model trained on bytes), or give token ids",
          choice.source_dir);
    }
    name = choice.source_dir;
  }
  ZT_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tok, tokenizer_load(name));
  // Byte tokenizers make ids 0..256, the EOT only between documents: a model of 256 or more ids
  // holds every byte.
  const int64_t need = name == "bytes" ? 256 : tok->vocab_size();
  if (need > model_vocab) {
    return invalid_argument("the tokenizer ({}) makes ids up to {}, but the model's vocabulary "
                            "has {}; they do not belong together",
                            tok->describe(), need - 1, model_vocab);
  }
  return tok;
}

}  // namespace zt::cli
