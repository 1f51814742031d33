#include "zt/checkpoint/consolidate.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/checkpoint/flat_layout.h"
#include "zt/core/assert.h"
#include "zt/core/file_io.h"

namespace zt::ckpt {
namespace fs = std::filesystem;

Result<int64_t> byte_size_parse(const std::string& text, std::string_view flag) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  const std::string num = text.substr(0, i), unit = text.substr(i);
  static const std::map<std::string, double> kUnits = {
      {"", 1},         {"B", 1},         {"KB", 1e3},         {"MB", 1e6},
      {"GB", 1e9},     {"TB", 1e12},     {"KIB", 1024.0},     {"MIB", 1048576.0},
      {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  std::string u;
  for (char c : unit) u.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  auto it = kUnits.find(u);
  char* end = nullptr;
  const double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  if (it == kUnits.end() || v <= 0 || end != num.c_str() + num.size() || v * it->second > 9e18) {
    return invalid_argument("{} expects a size such as 5GB, 500MB or 2GiB, got '{}'", flag, text);
  }
  return static_cast<int64_t>(std::llround(v * it->second));
}

// ---- the reader

Result<CheckpointWeights> CheckpointWeights::open(const std::string& ckpt_dir,
                                                  const std::string& tag) {
  CheckpointWeights w;
  ZT_ASSIGN_OR_RETURN(w.tag_, tag_resolve(ckpt_dir, tag));
  w.path_ = tag_path(ckpt_dir, w.tag_);
  const std::string& dir = w.path_;
  ZT_ASSIGN_OR_RETURN(w.meta_, metadata_read(dir));
  ZT_RETURN_IF_ERROR(checkpoint_verify(dir, w.meta_));
  const std::string meta_path = (fs::path(dir) / kModelStatesFile).string();
  try {
    w.world_ = w.meta_.at("dp_world_size").get<int>();
    w.tensor_ = w.meta_.value("tensor_parallel_size", 1);
    if (w.tensor_ < 1 || w.tensor_ > 1 << 16) {
      return invalid_argument("'{}': tensor_parallel_size {} is not a size", meta_path, w.tensor_);
    }
    const auto& units = w.meta_.at("model").at("units");
    for (size_t u = 0; u < units.size(); ++u) {
      // Pipeline checkpoints: the stage whose files hold the unit (0: saved without one).
      w.unit_stage_.push_back(units[u].value("stage", 0));
      ZT_ASSIGN_OR_RETURN(SavedUnit saved, saved_unit_parse(units[u], w.tensor_, meta_path));
      for (SavedParam& p : saved.params) {
        w.params_.push_back({.name = p.name,
                             .shape = p.whole,
                             .unit = static_cast<int>(u),
                             .unit_numel = saved.numel,
                             .offset = p.offset,
                             .numel = p.whole_numel(),
                             .split = std::move(p.split)});
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("'{}' lacks the model's layout ({})", meta_path, e.what());
  }
  if (w.world_ < 1) {
    return invalid_argument("'{}': dp_world_size {} is not a world size", dir, w.world_);
  }
  for (int st : std::set<int>(w.unit_stage_.begin(), w.unit_stage_.end())) {
    for (int r = 0; r < w.world_; ++r) {
      for (int t = 0; t < w.tensor_; ++t) {
        const int mp = st * w.tensor_ + t;
        ZT_ASSIGN_OR_RETURN(
            SafetensorsFile f,
            SafetensorsFile::open((fs::path(dir) / shard_file_name(r, mp)).string()));
        w.shards_.emplace(std::pair{r, mp}, std::move(f));
      }
    }
  }
  return w;
}

const CheckpointParam* CheckpointWeights::find(const std::string& name) const {
  for (const CheckpointParam& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Status CheckpointWeights::read(const CheckpointParam& p, int64_t lo, int64_t hi,
                               float* out) const {
  ZT_ASSERT(lo >= 0 && lo <= hi && hi <= p.numel, "range [{}, {}) of '{}' ({} elements)", lo, hi,
            p.name, p.numel);
  // The parameter's elements among the tensor ranks' parts, then each part's elements among
  // the data-parallel ranks' chunks of that tensor rank's unit buffer.
  const std::vector<SplitIndex::Piece> parts =
      p.split ? p.split->pieces(lo, hi)
              : std::vector<SplitIndex::Piece>{{.tensor_rank = 0, .local = lo, .n = hi - lo}};
  const int stage = unit_stage_[static_cast<size_t>(p.unit)];
  const std::string name = fmt::format("unit{}.fp32", p.unit);
  for (const SplitIndex::Piece& t : parts) {
    const int64_t at = p.offset + t.local;
    for (const SlicePiece& s : flat_reslice(p.unit_numel, world_, at, at + t.n)) {
      const auto& file = shards_.at({s.rank, stage * tensor_ + t.tensor_rank});
      ZT_RETURN_IF_ERROR(file.read(name, s.src_offset, s.n, out + t.dst + s.dst_offset));
    }
  }
  return Status::ok();
}

bool is_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  if (fs::exists(fs::path(dir) / kLatestFile, ec)) return true;
  auto tags = tags_list(dir);
  return tags.is_ok() && !tags->empty();
}

// ---- transformers' weight files

namespace {

// The folder the files go into: created when missing; anything else by that name is refused
// here, in one line, rather than as a failed temporary file further down.
Status output_folder_prepare(const std::string& dir, std::string_view what) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) {
      return invalid_argument("'{}' exists and is not a folder: name a folder for the {}", dir,
                              what);
    }
    return Status::ok();
  }
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create the folder '{}' for the {}: {}", dir, what, ec.message());
  return Status::ok();
}

// Removes the weight files of an earlier save that `written` does not name.
void stale_weights_remove(const std::string& dir, const std::set<std::string>& written) {
  static const std::regex kShard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool weights = name == "model.safetensors" || name == "model.safetensors.index.json" ||
                         std::regex_match(name, kShard);
    if (!weights || written.count(name) != 0) continue;
    if (!entry.is_regular_file(ec) && !entry.is_symlink(ec)) continue;
    fs::remove(entry.path(), ec);  // best effort: the new set is complete either way
  }
}

}  // namespace

Result<WeightFilesSummary> weight_files_write(const std::string& out_dir,
                                              const std::vector<TensorToWrite>& tensors,
                                              const WeightFilesOptions& options) {
  ZT_RETURN_IF_ERROR(output_folder_prepare(out_dir, options.what));
  // Cut the tensors into files of at most max_shard_bytes (a larger tensor alone), in order, as
  // transformers' shard_checkpoint does.
  std::vector<std::vector<size_t>> groups(1);
  int64_t in_group = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    int64_t b = static_cast<int64_t>(dtype_size(tensors[i].dtype));
    for (int64_t d : tensors[i].shape) b *= d;
    if (in_group > 0 && in_group + b > options.max_shard_bytes) {
      groups.emplace_back();
      in_group = 0;
    }
    groups.back().push_back(i);
    in_group += b;
    total += b;
  }
  WeightFilesSummary sum{.files = 0, .bytes = total};
  nlohmann::json weight_map = nlohmann::json::object();
  std::set<std::string> written;
  const int n = static_cast<int>(groups.size());
  for (int g = 0; g < n; ++g) {
    const std::string name = n == 1 ? "model.safetensors"
                                    : fmt::format("model-{:05d}-of-{:05d}.safetensors", g + 1, n);
    std::vector<TensorToWrite> group;
    for (size_t i : groups[g]) {
      group.push_back(tensors[i]);
      weight_map[tensors[i].name] = name;
    }
    const std::string path = (fs::path(out_dir) / name).string();
    ZT_RETURN_IF_ERROR(safetensors_write(path, group, {{"format", "pt"}}, options.what).status());
    written.insert(name);
    ++sum.files;
    if (options.progress) options.progress(path);
  }
  if (n > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
    const std::string path = (fs::path(out_dir) / "model.safetensors.index.json").string();
    ZT_RETURN_IF_ERROR(file_write_atomic(path, index.dump(2) + "\n", "safetensors index"));
    written.insert("model.safetensors.index.json");
    if (options.progress) options.progress(path);
  }
  stale_weights_remove(out_dir, written);
  return sum;
}

// ---- to-fp32

Result<ConsolidateSummary> consolidate_fp32(const std::string& ckpt_dir,
                                            const std::string& out_dir,
                                            const ConsolidateOptions& options) {
  ZT_ASSIGN_OR_RETURN(CheckpointWeights w, CheckpointWeights::open(ckpt_dir, options.tag));
  std::vector<TensorToWrite> tensors;
  ConsolidateSummary sum{.tag = w.tag(), .parameters = 0, .bytes = 0, .files = 0};
  for (const CheckpointParam& p : w.params()) {
    tensors.push_back({.name = p.name,
                       .dtype = DType::f32,
                       .shape = p.shape,
                       .data = nullptr,
                       .produce = [&w, &p](void* buf) {
                         return w.read(p, 0, p.numel, static_cast<float*>(buf));
                       }});
    sum.parameters += p.numel;
  }
  ZT_ASSIGN_OR_RETURN(WeightFilesSummary files,
                      weight_files_write(out_dir, tensors,
                                         {.max_shard_bytes = options.max_shard_bytes,
                                          .progress = options.progress,
                                          .what = "consolidated weights"}));
  sum.bytes = files.bytes;
  sum.files = files.files;
  nlohmann::json config = w.metadata().at("model").value("config", nlohmann::json(nullptr));
  if (config.is_null()) config = {{"model_name", w.metadata().at("model").value("name", "")}};
  ZT_RETURN_IF_ERROR(file_write_atomic((fs::path(out_dir) / "config.json").string(),
                                       config.dump(2) + "\n", "model config"));
  return sum;
}

}  // namespace zt::ckpt
