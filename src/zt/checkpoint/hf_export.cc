#include "zt/checkpoint/hf_export.h"

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/checkpoint/consolidate.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/core/file_io.h"
#include "zt/core/half.h"
#include "zt/nn/hf/hf_config.h"
#include "zt/checkpoint/hf_weights.h"
#include "zt/checkpoint/lora_export.h"
#include "zt/nn/models/family_names.h"

namespace zt::ckpt {

using namespace zt::nn;  // the model types this reads and writes
namespace fs = std::filesystem;
namespace {

// torch's names for the dtypes config.json's "dtype" / "torch_dtype" holds.
std::string_view torch_dtype_name(DType d) {
  switch (d) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    default:
      ZT_ASSERT(false, "no export dtype {}", dtype_name(d));
  }
  return "";
}

void store(DType d, void* buf, int64_t i, float v) {
  switch (d) {
    case DType::f32:
      static_cast<float*>(buf)[i] = v;
      return;
    case DType::bf16:
      static_cast<bf16_t*>(buf)[i] = float_to_bf16(v);
      return;
    case DType::f16:
      static_cast<f16_t*>(buf)[i] = float_to_f16(v);
      return;
    default:
      ZT_ASSERT(false, "no export dtype {}", dtype_name(d));
  }
}

// One file tensor of parameter `p` (a part hf_parts names), as the writer asks for it: rows
// [row_begin, row_begin + rows) of the parameter read as f32, transposed back to (cols, rows)
// for GPT-2's Conv1D, converted to the tensor's dtype.
ckpt::TensorToWrite tensor_of(const Param& p, const HfPart& part, DType dtype,
                              const ParamRead& read) {
  const int64_t cols = p.shape.ndim() == 2 ? p.shape[1] : 1;
  std::vector<int64_t> shape = {part.rows};
  if (p.shape.ndim() == 2) shape.push_back(cols);
  if (part.transposed) std::swap(shape[0], shape[1]);
  auto produce = [&p, part, cols, dtype, &read](void* buf) -> Status {
    const int64_t n = part.rows * cols, first = part.row_begin * cols;
    std::vector<float> v(static_cast<size_t>(n));
    ZT_RETURN_IF_ERROR(read(p, first, first + n, v.data()));
    if (!part.transposed) {
      for (int64_t i = 0; i < n; ++i) store(dtype, buf, i, v[static_cast<size_t>(i)]);
      return Status::ok();
    }
    for (int64_t r = 0; r < part.rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        store(dtype, buf, c * part.rows + r, v[static_cast<size_t>(r * cols + c)]);
      }
    }
    return Status::ok();
  };
  return {.name = part.name, .dtype = dtype, .shape = shape, .data = nullptr, .produce = produce};
}

// The tensor dtypes of a model directory's files, so an unchanged export writes what it read.
Result<std::map<std::string, DType>> file_dtypes(const std::vector<std::string>& files) {
  std::map<std::string, DType> out;
  for (const std::string& f : files) {
    ZT_ASSIGN_OR_RETURN(ckpt::SafetensorsFile file, ckpt::SafetensorsFile::open(f));
    for (const auto& [name, entry] : file.tensors()) out[name] = entry.dtype;
  }
  return out;
}

Result<HfExportSummary> export_model_dir(const std::string& src, const std::string& out_dir,
                                         const HfExportOptions& options) {
  ZT_ASSIGN_OR_RETURN(LoadedModel loaded, load_hf_model(src));
  if (!loaded.has_weights) {
    return invalid_argument(
        "'{}' has a config.json but no weights (model.safetensors or "
        "model.safetensors.index.json): nothing to export",
        src);
  }
  ZT_ASSIGN_OR_RETURN(auto dtypes, file_dtypes(loaded.weight_files));
  // GPT-2 files may lack the "transformer." prefix the export writes.
  const std::string prefix = family_names(loaded.model->transformer_config().model_type).hf_prefix;
  HfExportSource source{
      .read =
          [](const Param& p, int64_t lo, int64_t hi, float* out) {
            p.source->read(lo, hi, out);  // an I/O error there aborts naming the tensor
            return Status::ok();
          },
      .dtype_of =
          [dtypes = std::move(dtypes), prefix, forced = options.dtype](const std::string& name) {
            if (forced) return *forced;
            auto it = dtypes.find(name);
            if (it == dtypes.end() && name.rfind(prefix, 0) == 0) {
              it = dtypes.find(name.substr(prefix.size()));
            }
            return it != dtypes.end() ? it->second : DType::f32;
          },
      .config_dtype = options.dtype,
      .tokenizer_dir = src};
  ZT_ASSIGN_OR_RETURN(HfExportSummary sum,
                      hf_export_model(*loaded.model, source, out_dir, options));
  sum.source = "model directory";
  return sum;
}

Result<HfExportSummary> export_checkpoint(const std::string& src, const std::string& out_dir,
                                          const HfExportOptions& options) {
  ZT_ASSIGN_OR_RETURN(ckpt::CheckpointWeights opened,
                      ckpt::CheckpointWeights::open(src, options.tag));
  auto w = std::make_shared<const ckpt::CheckpointWeights>(std::move(opened));
  const std::string meta_file = fmt::format("{}/{}", w->path(), ckpt::kModelStatesFile);
  const nlohmann::json& model_meta = w->metadata().at("model");  // open() read its layout
  const nlohmann::json config = model_meta.value("config", nlohmann::json(nullptr));
  if (!config.is_object() || !config.contains("model_type")) {
    return invalid_argument(
        "'{}' is a checkpoint of model '{}', which records no Hugging Face config.json (only "
        "the transformer families export: {}); `zt ckpt to-fp32` writes its fp32 weights",
        w->path(), model_meta.value("name", "?"), fmt::join(hf_model_types(), ", "));
  }
  ZT_ASSIGN_OR_RETURN(TransformerConfig tc,
                      transformer_config_from_hf(config, meta_file + " (model.config)"));
  // The vocabulary padding is the checkpoint's own (a named size may pad otherwise than the
  // config's default rounding); it is dropped on export either way.
  const std::string wte = family_names(tc.model_type).wte + ".weight";
  if (const ckpt::CheckpointParam* t = w->find(wte);
      t != nullptr && t->shape.size() == 2 && t->shape[0] >= tc.vocab_size) {
    tc.padded_vocab_size = static_cast<int>(t->shape[0]);
  }
  // LoRA adapters (model.lora): merged into their base weights, or written alone for PEFT.
  std::optional<ckpt::LoraRecord> lora;
  if (model_meta.contains("lora") && !model_meta.at("lora").is_null()) {
    ZT_ASSIGN_OR_RETURN(ckpt::LoraRecord r, ckpt::lora_record_from(model_meta.at("lora"), meta_file));
    lora = std::move(r);
  }
  if (options.adapter_only) {
    if (!lora) {
      return invalid_argument("--adapter-only: '{}' has no LoRA adapters (trained without "
                              "--lora-dim); export the model without it",
                              w->path());
    }
    if (tc.task != nn::Task::kCausalLM) {
      return invalid_argument(
          "--adapter-only: '{}' trained a {} head besides the adapters; export the merged "
          "model (without --adapter-only)",
          w->path(), tc.task == nn::Task::kReward ? "reward" : "task");
    }
    ZT_ASSIGN_OR_RETURN(ckpt::PeftExportSummary ps,
                        ckpt::peft_adapter_write(*w, *lora, tc.model_type,
                                                 config.value("_name_or_path", std::string()),
                                                 out_dir));
    if (options.progress) options.progress((fs::path(out_dir) / "adapter_model.safetensors").string());
    HfExportSummary sum;
    sum.source = "checkpoint " + w->tag() + " (LoRA adapter)";
    sum.tensors = ps.tensors;
    sum.parameters = ps.parameters;
    sum.bytes = ps.bytes;
    sum.files = 1;
    sum.dtypes = "f32";
    return sum;
  }
  std::set<std::string> adapter_params;
  if (lora) {
    for (const ckpt::LoraAdapterRecord& a : lora->adapters) adapter_params.insert({a.a, a.b});
  }
  Transformer model(tc);
  model.set_source_config(config);
  // Every parameter of the model the config describes is in the checkpoint with its shape, and
  // nothing else is (but the adapters): otherwise the config and the weights are of different
  // models.
  std::unordered_map<const Param*, const ckpt::CheckpointParam*> where;
  for (auto& unit : model.units()) {
    for (Param* p : unit->params()) {
      const ckpt::CheckpointParam* c = w->find(p->name);
      if (c == nullptr) {
        return invalid_argument(
            "'{}': the checkpoint has no parameter '{}', which the model of "
            "its config needs (a checkpoint of another model?)",
            w->path(), p->name);
      }
      if (c->shape != p->shape.to_vector()) {
        return invalid_argument(
            "'{}': parameter '{}' has shape [{}] but the model of its config "
            "needs {}",
            w->path(), p->name, fmt::join(c->shape, ", "), p->shape.str());
      }
      where[p] = c;
    }
  }
  if (where.size() + adapter_params.size() != w->params().size()) {
    for (const ckpt::CheckpointParam& c : w->params()) {
      bool used = adapter_params.count(c.name) != 0;
      for (const auto& [p, cp] : where) used = used || cp == &c;
      if (!used) {
        return invalid_argument(
            "'{}': parameter '{}' belongs to no parameter of the model its "
            "config describes",
            w->path(), c.name);
      }
    }
  }
  const DType dtype = options.dtype.value_or(DType::f32);
  HfExportSource source{.read = [w, where = std::move(where), lora](
                                    const Param& p, int64_t lo, int64_t hi, float* out) {
                          ZT_RETURN_IF_ERROR(w->read(*where.at(&p), lo, hi, out));
                          if (!lora || p.shape.ndim() != 2) return Status::ok();
                          return ckpt::lora_merge_into(*w, *lora, p.name, p.shape[1], lo, hi, out);
                        },
                        .dtype_of = [dtype](const std::string&) { return dtype; },
                        .config_dtype = dtype,
                        .tokenizer_dir = ""};
  ZT_ASSIGN_OR_RETURN(HfExportSummary sum, hf_export_model(model, source, out_dir, options));
  sum.source = "checkpoint " + w->tag();
  return sum;
}

// Copies one companion file; a missing one is skipped.
Status companion_copy(const std::string& from_dir, const std::string& name,
                      const std::string& out_dir) {
  const fs::path from = fs::path(from_dir) / name;
  std::error_code ec;
  if (!fs::exists(from, ec)) return Status::ok();
  ZT_ASSIGN_OR_RETURN(std::string bytes, file_read_all(from.string(), "tokenizer file"));
  return file_write_atomic((fs::path(out_dir) / name).string(), bytes, "tokenizer file");
}

}  // namespace

const std::vector<std::string>& hf_companion_files() {
  static const std::vector<std::string> kFiles = {"tokenizer.json",
                                                  "tokenizer_config.json",
                                                  "special_tokens_map.json",
                                                  "vocab.txt",
                                                  "vocab.json",
                                                  "merges.txt",
                                                  "tokenizer.model",
                                                  "generation_config.json"};
  return kFiles;
}

Result<DType> hf_export_dtype_parse(const std::string& text, std::string_view flag) {
  auto d = dtype_parse(text);
  if (!d.is_ok() || (*d != DType::f32 && *d != DType::bf16 && *d != DType::f16)) {
    return invalid_argument("{} expects f32, bf16 or f16, got '{}'", flag, text);
  }
  return *d;
}

Result<HfExportSummary> hf_export_model(Transformer& model, const HfExportSource& source,
                                        const std::string& out_dir,
                                        const HfExportOptions& options) {
  const TransformerConfig& c = model.transformer_config();
  const std::string prefix = family_names(c.model_type).hf_prefix;
  std::vector<ckpt::TensorToWrite> tensors;
  std::set<std::string> names;
  std::set<std::string_view> dtypes;
  HfExportSummary sum;
  for (auto& unit : model.units()) {
    for (const Param* p : unit->params()) {
      for (const HfPart& part : hf_parts(c, *p, prefix)) {
        ZT_ASSERT(names.insert(part.name).second, "tensor '{}' exported twice", part.name);
        const DType dtype = source.dtype_of(part.name);
        if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
          return invalid_argument(
              "tensor '{}' would be written as {}; export f32, bf16 or f16 "
              "(--dtype)",
              part.name, dtype_name(dtype));
        }
        tensors.push_back(tensor_of(*p, part, dtype, source.read));
        dtypes.insert(dtype_name(dtype));
        sum.parameters += part.rows * (p->shape.ndim() == 2 ? p->shape[1] : 1);
      }
    }
  }
  ZT_ASSIGN_OR_RETURN(ckpt::WeightFilesSummary files,
                      ckpt::weight_files_write(out_dir, tensors,
                                               {.max_shard_bytes = options.max_shard_bytes,
                                                .progress = options.progress,
                                                .what = "exported weights"}));
  sum.tensors = static_cast<int>(tensors.size());
  sum.bytes = files.bytes;
  sum.files = files.files;
  sum.dtypes = fmt::format("{}", fmt::join(dtypes, "+"));

  nlohmann::json config = model.config_json();
  if (source.config_dtype) {
    // transformers 5.x writes "dtype", 4.x "torch_dtype"; from_pretrained(dtype="auto") and
    // readers of the folder go by it, so it must name what the files now hold.
    const char* key = config.contains("dtype") ? "dtype" : "torch_dtype";
    config[key] = std::string(torch_dtype_name(*source.config_dtype));
  }
  const std::string config_path = (fs::path(out_dir) / "config.json").string();
  ZT_RETURN_IF_ERROR(file_write_atomic(config_path, config.dump(2) + "\n", "model config"));
  if (options.progress) options.progress(config_path);
  if (!source.tokenizer_dir.empty()) {
    for (const std::string& name : hf_companion_files()) {
      ZT_RETURN_IF_ERROR(companion_copy(source.tokenizer_dir, name, out_dir));
    }
  }
  return sum;
}

Result<HfExportSummary> hf_export(const std::string& src, const std::string& out_dir,
                                  const HfExportOptions& options) {
  std::error_code ec;
  if (fs::exists(out_dir, ec) && fs::equivalent(src, out_dir, ec)) {
    return invalid_argument(
        "the output folder '{}' is the source itself; export into another "
        "folder",
        out_dir);
  }
  // A folder can be both (a 16-bit model saved into the checkpoint folder): --tag means the
  // checkpoint, else the model directory's files are what the user sees and gets.
  const bool checkpoint = ckpt::is_checkpoint_dir(src);
  if (is_model_dir(src) && (options.tag.empty() || !checkpoint)) {
    if (!options.tag.empty()) {
      return invalid_argument("--tag picks a checkpoint's tag, but '{}' is a model directory", src);
    }
    return export_model_dir(src, out_dir, options);
  }
  if (checkpoint) return export_checkpoint(src, out_dir, options);
  return invalid_argument(
      "'{}' is neither a model directory (config.json + safetensors) nor a "
      "checkpoint folder (`latest` or a global_step folder)",
      src);
}

}  // namespace zt::ckpt
