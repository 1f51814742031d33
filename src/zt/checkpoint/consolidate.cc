#include "zt/checkpoint/consolidate.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/checkpoint/flat_layout.h"
#include "zt/checkpoint/safetensors.h"
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

Result<ConsolidateSummary> consolidate_fp32(const std::string& ckpt_dir,
                                            const std::string& out_dir,
                                            const ConsolidateOptions& options) {
  ZT_ASSIGN_OR_RETURN(std::string tag, tag_resolve(ckpt_dir, options.tag));
  const std::string dir = tag_path(ckpt_dir, tag);
  ZT_ASSIGN_OR_RETURN(nlohmann::json meta, metadata_read(dir));
  ZT_RETURN_IF_ERROR(checkpoint_verify(dir, meta));
  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    int unit = 0;
    int64_t unit_numel = 0, offset = 0, numel = 0;
  };
  std::vector<Param> params;
  int world = 0;
  try {
    world = meta.at("dp_world_size").get<int>();
    const auto& units = meta.at("model").at("units");
    for (size_t u = 0; u < units.size(); ++u) {
      for (const auto& p : units[u].at("params")) {
        Param q{.name = p.at("name").get<std::string>(),
                .shape = p.at("shape").get<std::vector<int64_t>>(),
                .unit = static_cast<int>(u),
                .unit_numel = units[u].at("numel").get<int64_t>(),
                .offset = p.at("offset").get<int64_t>(),
                .numel = 1};
        for (int64_t d : q.shape) q.numel *= d;
        if (q.offset < 0 || q.numel < 0 || q.offset + q.numel > q.unit_numel) {
          return invalid_argument("'{}': parameter '{}' lies outside its unit; the metadata is "
                                  "damaged",
                                  dir, q.name);
        }
        params.push_back(std::move(q));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("'{}/{}' lacks the model's layout ({})", dir, kModelStatesFile,
                            e.what());
  }
  if (world < 1) return invalid_argument("'{}': dp_world_size {} is not a world size", dir, world);
  std::vector<SafetensorsFile> shards;
  for (int r = 0; r < world; ++r) {
    ZT_ASSIGN_OR_RETURN(SafetensorsFile f,
                        SafetensorsFile::open((fs::path(dir) / shard_file_name(r)).string()));
    shards.push_back(std::move(f));
  }
  // Cut the parameters into output files of at most max_shard_bytes (a larger tensor alone).
  std::vector<std::vector<size_t>> groups(1);
  int64_t in_group = 0, total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t b = params[i].numel * 4;
    if (in_group > 0 && in_group + b > options.max_shard_bytes) {
      groups.emplace_back();
      in_group = 0;
    }
    groups.back().push_back(i);
    in_group += b;
    total += b;
  }
  auto produce = [&](const Param& p) {
    return [&, p](void* buf) -> Status {
      auto* out = static_cast<float*>(buf);
      for (const SlicePiece& s : flat_reslice(p.unit_numel, world, p.offset, p.offset + p.numel)) {
        ZT_RETURN_IF_ERROR(shards[s.rank].read(fmt::format("unit{}.fp32", p.unit), s.src_offset,
                                               s.n, out + s.dst_offset));
      }
      return Status::ok();
    };
  };
  ConsolidateSummary sum{.tag = tag, .parameters = 0, .bytes = total, .files = 0};
  nlohmann::json weight_map = nlohmann::json::object();
  const int n = static_cast<int>(groups.size());
  for (int g = 0; g < n; ++g) {
    const std::string name = n == 1 ? "model.safetensors"
                                    : fmt::format("model-{:05d}-of-{:05d}.safetensors", g + 1, n);
    std::vector<TensorToWrite> tensors;
    for (size_t i : groups[g]) {
      tensors.push_back({.name = params[i].name,
                         .dtype = DType::f32,
                         .shape = params[i].shape,
                         .data = nullptr,
                         .produce = produce(params[i])});
      weight_map[params[i].name] = name;
      sum.parameters += params[i].numel;
    }
    const std::string path = (fs::path(out_dir) / name).string();
    auto w = safetensors_write(path, tensors, {{"format", "pt"}}, "consolidated weights");
    ZT_RETURN_IF_ERROR(w.status());
    ++sum.files;
    if (options.progress) options.progress(path);
  }
  if (n > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
    ZT_RETURN_IF_ERROR(file_write_atomic((fs::path(out_dir) / "model.safetensors.index.json")
                                             .string(),
                                         index.dump(2) + "\n", "safetensors index"));
  }
  nlohmann::json config = meta.at("model").value("config", nlohmann::json(nullptr));
  if (config.is_null()) config = {{"model_name", meta.at("model").value("name", "")}};
  ZT_RETURN_IF_ERROR(file_write_atomic((fs::path(out_dir) / "config.json").string(),
                                       config.dump(2) + "\n", "model config"));
  return sum;
}

}  // namespace zt::ckpt
