#include "zt/checkpoint/hf_weights.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "zt/checkpoint/safetensors.h"
#include "zt/core/file_io.h"
#include "zt/core/half.h"
#include "zt/core/json_limits.h"
#include "zt/core/log.h"
#include "zt/nn/hf/hf_config.h"
#include "zt/nn/models/family_names.h"

namespace zt::ckpt {

using namespace zt::nn;  // the model types this reads and writes
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Replaces the last occurrence of `from` in `s` with `to`.
std::string swap_last(const std::string& s, std::string_view from, std::string_view to) {
  const size_t at = s.rfind(from);
  return at == std::string::npos ? s
                                 : s.substr(0, at) + std::string(to) + s.substr(at + from.size());
}

bool is_head_name(const std::string& name) {
  return name.rfind("lm_head", 0) == 0 || name.rfind("cls.", 0) == 0 ||
         name.rfind("classifier.", 0) == 0 || name.rfind("score.", 0) == 0;
}

// A tensor of one open file, as a parameter reads it.
struct BoundPart {
  HfPart part;
  std::shared_ptr<const ckpt::SafetensorsFile> file;
  const ckpt::TensorEntry* entry = nullptr;
  int64_t cols = 0;
};

void to_f32(const std::vector<char>& raw, const ckpt::TensorEntry& e, int64_t count, float* out) {
  if (e.dtype == DType::f32) {
    std::memcpy(out, raw.data(), static_cast<size_t>(count) * 4);
  } else if (e.dtype == DType::bf16) {
    const auto* h = reinterpret_cast<const bf16_t*>(raw.data());
    for (int64_t i = 0; i < count; ++i) out[i] = bf16_to_float(h[i]);
  } else {
    const auto* h = reinterpret_cast<const f16_t*>(raw.data());
    for (int64_t i = 0; i < count; ++i) out[i] = f16_to_float(h[i]);
  }
}

class HfParamSource : public ParamSource {
 public:
  HfParamSource(std::string param, int64_t cols, std::vector<BoundPart> parts)
      : param_(std::move(param)), cols_(cols), parts_(std::move(parts)) {}

  void read(int64_t lo, int64_t hi, float* out) const override {
    std::fill(out, out + (hi - lo), 0.0f);  // rows no file covers (vocabulary padding)
    for (const BoundPart& b : parts_) {
      const int64_t first = b.part.row_begin * cols_;
      const int64_t last = first + b.part.rows * cols_;
      const int64_t a = std::max(lo, first), z = std::min(hi, last);
      if (a >= z) continue;
      const size_t esz = dtype_size(b.entry->dtype);
      if (!b.part.transposed) {
        std::vector<char> raw(static_cast<size_t>(z - a) * esz);
        check(b.file->read(b.part.name, a - first, z - a, raw.data()), b);
        to_f32(raw, *b.entry, z - a, out + (a - lo));
        continue;
      }
      // The file holds (cols, rows): element (r, c) of the parameter is (c, r) there. Read the
      // whole tensor once (Conv1D weights are a few tens of MB at most) and pick.
      std::vector<char> raw(static_cast<size_t>(b.entry->numel) * esz);
      check(b.file->read(b.part.name, 0, b.entry->numel, raw.data()), b);
      std::vector<float> all(static_cast<size_t>(b.entry->numel));
      to_f32(raw, *b.entry, b.entry->numel, all.data());
      const int64_t rows = b.part.rows;
      for (int64_t e = a; e < z; ++e) {
        const int64_t r = (e - first) / cols_, c = (e - first) % cols_;
        out[e - lo] = all[static_cast<size_t>(c * rows + r)];
      }
    }
  }

 private:
  void check(const Status& st, const BoundPart& b) const {
    // Headers and sizes were checked when the model was loaded: only an I/O error lands here.
    ZT_ASSERT(st.is_ok(), "reading parameter '{}' from tensor '{}': {}", param_, b.part.name,
              st.message());
  }
  std::string param_;
  int64_t cols_;
  std::vector<BoundPart> parts_;
};

}  // namespace

std::vector<HfPart> hf_parts(const TransformerConfig& c, const Param& p,
                             const std::string& prefix) {
  const std::string full = is_head_name(p.name) ? p.name : prefix + p.name;
  const int64_t rows = p.shape[0];
  // The fused projections: q/k/v (rows NH*HS, KV*HS, KV*HS) and gate/up (F, F).
  const int64_t q_rows = int64_t{c.n_head} * c.head_dim,
                kv_rows = int64_t{c.n_kv_head} * c.head_dim;
  auto split = [&](std::string_view fused, std::vector<std::pair<std::string, int64_t>> parts) {
    std::vector<HfPart> out;
    int64_t at = 0;
    for (auto& [name, n] : parts) {
      out.push_back({swap_last(full, fused, name), at, n, false});
      at += n;
    }
    return out;
  };
  if (full.find("qkv_proj.") != std::string::npos) {
    return split("qkv_proj", {{"q_proj", q_rows}, {"k_proj", kv_rows}, {"v_proj", kv_rows}});
  }
  if (full.find("attention.self.qkv.") != std::string::npos) {
    return split("qkv", {{"query", q_rows}, {"key", kv_rows}, {"value", kv_rows}});
  }
  if (full.find("gate_up_proj.") != std::string::npos) {
    return split("gate_up_proj", {{"gate_proj", c.inner}, {"up_proj", c.inner}});
  }
  // Vocabulary tables and biases: the file has the real rows only. GPT-2's Conv1D stores its
  // block weights as (in, out): every 2-D parameter of a GPT-2 block is transposed.
  const bool vocab_rows = rows == c.padded_vocab_size &&
                          (p.name == family_names(c.model_type).wte + ".weight" ||
                           p.name.rfind("lm_head", 0) == 0 || p.name == "cls.predictions.bias");
  const bool conv1d = c.model_type == "gpt2" && p.shape.ndim() == 2 && p.name.rfind("h.", 0) == 0;
  return {{full, 0, vocab_rows ? c.vocab_size : rows, conv1d}};
}

bool hf_tensor_ignored(const TransformerConfig& c, const std::string& name) {
  // Causal-mask buffers (old GPT-2 files), rotary caches, BERT's position_ids buffer, the copy
  // of a tied head, and BERT pre-training parts an MLM model does not use.
  if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
      ends_with(name, "rotary_emb.inv_freq") || ends_with(name, "position_ids")) {
    return true;
  }
  if (c.tied == Tied::kYes &&
      (name == "lm_head.weight" || name == "cls.predictions.decoder.weight")) {
    return true;
  }
  // A classifier keeps the pooler; a masked-LM model may find one (and pre-training heads) in a
  // BertForPreTraining checkpoint and not use it.
  if (c.task == Task::kSequenceClassification) return false;
  return name == "cls.predictions.decoder.bias" || name.rfind("cls.seq_relationship", 0) == 0 ||
         name.rfind("bert.pooler.", 0) == 0;
}

bool is_model_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::exists(fs::path(dir) / "config.json", ec);
}

Result<LoadedModel> load_hf_model(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  ZT_ASSIGN_OR_RETURN(std::string text, file_read_all(config_path, "model config"));
  nlohmann::json j;
  ZT_ASSIGN_OR_RETURN(j, json_parse_checked(text, config_path));
  ZT_ASSIGN_OR_RETURN(TransformerConfig tc, transformer_config_from_hf(j, config_path));
  LoadedModel out;
  out.model = std::make_unique<Transformer>(tc);
  out.model->set_source_config(j);

  // Which files hold the weights.
  std::error_code ec;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::map<std::string, std::string> file_of;  // tensor -> file (from the index)
  std::vector<std::string> files;
  if (fs::exists(index, ec)) {
    ZT_ASSIGN_OR_RETURN(std::string itext, file_read_all(index.string(), "weight index"));
    nlohmann::json ij;
    ZT_ASSIGN_OR_RETURN(ij, json_parse_checked(itext, index.string()));
    if (!ij.is_object() || !ij.contains("weight_map") || !ij["weight_map"].is_object()) {
      return invalid_argument("{}: no 'weight_map' object", index.string());
    }
    std::set<std::string> seen;
    for (auto& [tensor, file] : ij["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return invalid_argument("{}: weight_map['{}'] must be a file name beside the index",
                                index.string(), tensor);
      }
      file_of[tensor] = file.get<std::string>();
      if (seen.insert(file.get<std::string>()).second) files.push_back(file.get<std::string>());
    }
  } else if (fs::exists(single, ec)) {
    files.push_back("model.safetensors");
  } else {
    if (fs::exists(fs::path(dir) / "pytorch_model.bin", ec)) {
      return invalid_argument(
          "{}: the weights are in pytorch_model.bin (a pickle), which ZeroTrain does not read; "
          "save them as safetensors (model.save_pretrained(dir, safe_serialization=True))",
          dir);
    }
    ZT_LOG_INFO("{}: no model.safetensors beside config.json: random initialisation", dir);
    return out;
  }

  // Open every file (headers checked against the file sizes) and index its tensors.
  struct Where {
    std::shared_ptr<const ckpt::SafetensorsFile> file;
    const ckpt::TensorEntry* entry;
  };
  std::map<std::string, Where> tensors;
  for (const std::string& f : files) {
    const std::string path = (fs::path(dir) / f).string();
    auto opened = ckpt::SafetensorsFile::open(path);
    if (!opened.is_ok()) {
      return Status(opened.status().code(),
                    fmt::format("{}{}", opened.status().message(),
                                fs::exists(path, ec) ? "" : " (a shard named by the index)"));
    }
    auto file = std::make_shared<const ckpt::SafetensorsFile>(std::move(*opened));
    for (const auto& [name, entry] : file->tensors()) {
      if (!file_of.empty() && file_of.count(name) != 0 && file_of[name] != f) {
        return invalid_argument("{}: tensor '{}' is here but the index puts it in '{}'", path, name,
                                file_of[name]);
      }
      tensors[name] = {file, &entry};
    }
    out.weight_files.push_back(path);
  }
  for (const auto& [tensor, f] : file_of) {
    if (tensors.count(tensor) == 0) {
      return invalid_argument("{}: '{}' should hold tensor '{}' but does not", dir, f, tensor);
    }
  }

  // GPT-2 files come with or without the "transformer." prefix.
  std::string prefix = family_names(tc.model_type).hf_prefix;
  if (tc.model_type == "gpt2" && tensors.count("transformer.wte.weight") == 0) prefix.clear();

  std::set<std::string> used;
  for (auto& unit : out.model->units()) {
    for (Param* p : unit->params()) {
      const int64_t cols = p->shape.ndim() == 2 ? p->shape[1] : 1;
      std::vector<BoundPart> bound;
      for (const HfPart& part : hf_parts(tc, *p, prefix)) {
        auto it = tensors.find(part.name);
        if (it == tensors.end()) {
          return invalid_argument(
              "{}: tensor '{}' (for parameter '{}') is in none of the weight "
              "files ({})",
              dir, part.name, p->name, fmt::join(files, ", "));
        }
        const ckpt::TensorEntry& e = *it->second.entry;
        if (e.dtype != DType::f32 && e.dtype != DType::bf16 && e.dtype != DType::f16) {
          return invalid_argument("{}: tensor '{}' is {}; weights must be F32, BF16 or F16",
                                  it->second.file->path(), part.name, e.dtype_name);
        }
        std::vector<int64_t> want = {part.rows};
        if (p->shape.ndim() == 2) want.push_back(cols);
        if (part.transposed) std::reverse(want.begin(), want.end());
        if (e.shape != want) {
          return invalid_argument(
              "{}: tensor '{}' has shape [{}] but the model in config.json needs [{}] for "
              "parameter '{}'",
              it->second.file->path(), part.name, fmt::join(e.shape, ", "), fmt::join(want, ", "),
              p->name);
        }
        used.insert(part.name);
        bound.push_back({part, it->second.file, &e, cols});
      }
      p->source = std::make_shared<HfParamSource>(p->name, cols, std::move(bound));
    }
  }
  for (const auto& [name, where] : tensors) {
    if (used.count(name) == 0 && !hf_tensor_ignored(tc, name)) {
      return invalid_argument(
          "{}: tensor '{}' belongs to no parameter of the model config.json "
          "describes (a different model or size?)",
          where.file->path(), name);
    }
  }
  out.has_weights = true;
  return out;
}

}  // namespace zt::ckpt
