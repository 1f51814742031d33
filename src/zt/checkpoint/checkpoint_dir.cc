#include "zt/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <linux/fs.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "zt/core/file_io.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/core/json_limits.h"

namespace zt::ckpt {
namespace fs = std::filesystem;

std::string shard_file_name(int rank, int mp_rank) {
  return fmt::format("zero_pp_rank_{}_mp_rank_{:02d}_optim_states.safetensors", rank, mp_rank);
}

std::string tag_path(const std::string& dir, const std::string& tag) {
  return (fs::path(dir) / tag).string();
}

std::string partial_path(const std::string& dir, const std::string& tag) {
  return (fs::path(dir) / ("." + tag + ".partial")).string();
}

Status tag_check(const std::string& tag) {
  const bool printable = std::all_of(tag.begin(), tag.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && c != 0x7f && c != '/' && c != '\\';
  });
  if (tag.empty() || tag.size() > 200 || !printable || tag[0] == '.') {
    return invalid_argument(
        "checkpoint tag '{}' is not a plain folder name (no '/', spaces or control characters, "
        "no leading '.', at most 200 characters)",
        tag);
  }
  return Status::ok();
}

Result<std::optional<std::string>> latest_read(const std::string& dir) {
  const std::string path = (fs::path(dir) / kLatestFile).string();
  // Only "not there" means nothing was saved: a folder that cannot be read must not make a
  // resumable job start from the beginning.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::optional<std::string>();
    return io_error("cannot read the checkpoint folder '{}': {} (check its permissions)", dir,
                    errno_text());
  }
  ZT_ASSIGN_OR_RETURN(std::string text, file_read_all(path, "checkpoint 'latest' file", 4096));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
    text.pop_back();
  }
  if (Status s = tag_check(text); !s.is_ok()) {
    return invalid_argument("'{}' does not hold a checkpoint tag ({}); it is damaged: write the "
                            "tag to load into it, or pass --load-tag",
                            path, s.message());
  }
  return std::optional<std::string>(text);
}

Status latest_write(const std::string& dir, const std::string& tag) {
  return file_write_atomic((fs::path(dir) / kLatestFile).string(), tag + "\n",
                           "checkpoint 'latest' file");
}

Status partial_prepare(const std::string& dir, const std::string& tag) {
  const std::string p = partial_path(dir, tag);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create the checkpoint folder '{}': {}", dir, ec.message());
  // What crashed saves left behind: unfinished tag folders and temporaries of `latest`.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool partial = name.size() > 9 && name[0] == '.' &&
                         name.compare(name.size() - 8, 8, ".partial") == 0;
    if (partial || name.rfind(".latest.tmp.", 0) == 0) {
      std::error_code rm;
      fs::remove_all(e.path(), rm);
      if (rm) {
        return io_error("cannot remove the unfinished checkpoint '{}': {}", e.path().string(),
                        rm.message());
      }
    }
  }
  if (ec) return io_error("cannot list the checkpoint folder '{}': {}", dir, ec.message());
  fs::create_directory(p, ec);
  if (ec) return io_error("cannot create '{}': {}", p, ec.message());
  return Status::ok();
}

Result<WrittenFile> shard_write(const std::string& dir, const std::string& tag, int rank,
                                int world, const std::vector<TensorToWrite>& tensors,
                                const ShardPlace& place) {
  std::map<std::string, std::string> meta = {{"format", kFormatName},
                                             {"rank", std::to_string(rank)},
                                             {"dp_world_size", std::to_string(world)},
                                             {"pipeline_stage", std::to_string(place.stage)}};
  if (place.tensor_size > 1) {
    meta["tensor_parallel_rank"] = std::to_string(place.tensor_rank);
    meta["tensor_parallel_size"] = std::to_string(place.tensor_size);
  }
  return safetensors_write(
      (fs::path(partial_path(dir, tag)) / shard_file_name(rank, place.mp_rank())).string(),
      tensors, meta, "checkpoint shard");
}

void partial_discard(const std::string& dir, const std::string& tag) {
  std::error_code ec;
  fs::remove_all(partial_path(dir, tag), ec);
}

Status partial_publish(const std::string& dir, const std::string& tag) {
  const std::string from = partial_path(dir, tag);
  const std::string to = tag_path(dir, tag);
  ZT_RETURN_IF_ERROR(folder_sync(from));
  std::error_code ec;
  if (fs::exists(to, ec)) {
    // Swap the new folder in atomically, then delete the old one (now at `from`).
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) {
      return io_error("cannot replace checkpoint '{}' with the new one: {}", to, errno_text());
    }
    fs::remove_all(from, ec);
  } else if (::rename(from.c_str(), to.c_str()) != 0) {
    return io_error("cannot move the finished checkpoint into '{}': {}", to, errno_text());
  }
  return folder_sync(dir);
}

Status checkpoint_finish(const std::string& dir, const std::string& tag, nlohmann::json meta,
                         const nlohmann::json& files, int keep_last) {
  meta["files"] = files;
  ZT_RETURN_IF_ERROR(file_write_atomic((fs::path(partial_path(dir, tag)) / kModelStatesFile)
                                           .string(),
                                       meta.dump(1) + "\n", "checkpoint metadata"));
  ZT_RETURN_IF_ERROR(partial_publish(dir, tag));
  ZT_RETURN_IF_ERROR(latest_write(dir, tag));
  return tags_prune(dir, keep_last);
}

namespace {
std::string note_path(const std::string& dir, const std::string& tag, int rank) {
  return (fs::path(partial_path(dir, tag)) / fmt::format(".shard_{}.note", rank)).string();
}
}  // namespace

Status shard_note_write(const std::string& dir, const std::string& tag, int rank,
                        const Result<WrittenFile>& written) {
  nlohmann::json note = written.is_ok()
                            ? nlohmann::json{{"bytes", written->bytes},
                                             {"xxh3", hash_hex(written->xxh3)}}
                            : nlohmann::json{{"error", written.status().message()}};
  return file_write_atomic(note_path(dir, tag, rank), note.dump(), "checkpoint note");
}

Result<nlohmann::json> shard_notes_wait(const std::string& dir, const std::string& tag, int world,
                                        double timeout_s) {
  nlohmann::json files = nlohmann::json::object();
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < world; ++r) {
    const std::string path = note_path(dir, tag, r);
    std::error_code ec;
    while (!fs::exists(path, ec)) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_s) {
        return unavailable("checkpoint '{}': rank {} wrote no shard within {:.0f} s (did it "
                           "stop?); the checkpoint is not published",
                           tag_path(dir, tag), r, timeout_s);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ZT_ASSIGN_OR_RETURN(std::string text, file_read_all(path, "checkpoint note", 1 << 16));
    const nlohmann::json note = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!note.is_object()) return io_error("checkpoint note '{}' is damaged", path);
    if (note.contains("error")) {
      return io_error("checkpoint '{}': rank {} failed to write its shard: {}",
                      tag_path(dir, tag), r, note.value("error", ""));
    }
    files[shard_file_name(r)] = {{"bytes", note.value("bytes", int64_t{0})},
                                 {"xxh3", note.value("xxh3", "")}};
    fs::remove(path, ec);
  }
  return files;
}

Result<std::string> tag_resolve(const std::string& dir, const std::string& tag) {
  if (!tag.empty()) {
    ZT_RETURN_IF_ERROR(tag_check(tag));
    return tag;
  }
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("checkpoint folder '{}' does not exist", dir);
  ZT_ASSIGN_OR_RETURN(std::optional<std::string> latest, latest_read(dir));
  if (!latest) {
    return not_found("'{}' has no `latest` file: no checkpoint was completed there (name one "
                     "with --tag)",
                     dir);
  }
  return *latest;
}

Result<nlohmann::json> metadata_read(const std::string& tag_dir) {
  const std::string path = (fs::path(tag_dir) / kModelStatesFile).string();
  std::error_code ec;
  if (!fs::is_directory(tag_dir, ec)) return not_found("checkpoint '{}' does not exist", tag_dir);
  ZT_ASSIGN_OR_RETURN(std::string text,
                      file_read_all(path, "checkpoint metadata", int64_t{256} << 20));
  ZT_RETURN_IF_ERROR(json_nesting_check(text, path));
  nlohmann::json meta = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || meta.value("format", "") != kFormatName) {
    return invalid_argument("'{}' is not ZeroTrain checkpoint metadata (damaged, or another "
                            "program's file)",
                            path);
  }
  if (meta.value("version", 0) > kFormatVersion) {
    return invalid_argument("'{}' is checkpoint format version {}; this ZeroTrain reads up to {} "
                            "(read it with the ZeroTrain that saved it, or a newer one)",
                            path, meta.value("version", 0), kFormatVersion);
  }
  return meta;
}

Status checkpoint_verify(const std::string& tag_dir, const nlohmann::json& meta) {
  if (!meta.contains("files") || !meta["files"].is_object()) {
    return invalid_argument("'{}' lists no files; the checkpoint is damaged",
                            (fs::path(tag_dir) / kModelStatesFile).string());
  }
  for (const auto& [name, info] : meta["files"].items()) {
    const std::string file = (fs::path(tag_dir) / name).string();
    std::error_code ec;
    if (!fs::exists(file, ec)) return not_found("checkpoint file '{}' is missing", file);
    const auto size = static_cast<int64_t>(fs::file_size(file, ec));
    const int64_t want = info.value("bytes", int64_t{-1});
    if (ec || size != want) {
      return invalid_argument("checkpoint file '{}' has {} bytes, {} were written: truncated or "
                              "damaged",
                              file, size, want);
    }
    ZT_ASSIGN_OR_RETURN(uint64_t h, file_xxh3(file));
    if (hash_hex(h) != info.value("xxh3", "")) {
      return invalid_argument("checkpoint file '{}' fails its checksum (xxh3 {}, expected {}): "
                              "it is damaged",
                              file, hash_hex(h), info.value("xxh3", ""));
    }
  }
  return Status::ok();
}

Result<std::vector<TagInfo>> tags_list(const std::string& dir) {
  std::vector<TagInfo> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || !e.is_directory()) continue;
    auto j = metadata_read(e.path().string());  // not a complete checkpoint: not listed
    if (!j) continue;
    TagInfo t{.tag = name, .global_steps = 0};
    if (j->contains("global_steps") && (*j)["global_steps"].is_number_integer()) {
      t.global_steps = (*j)["global_steps"].get<int64_t>();
    }
    out.push_back(t);
  }
  if (ec) return io_error("cannot list the checkpoint folder '{}': {}", dir, ec.message());
  std::sort(out.begin(), out.end(), [](const TagInfo& a, const TagInfo& b) {
    return a.global_steps != b.global_steps ? a.global_steps < b.global_steps : a.tag < b.tag;
  });
  return out;
}

Status tags_prune(const std::string& dir, int keep) {
  if (keep <= 0) return Status::ok();
  ZT_ASSIGN_OR_RETURN(std::vector<TagInfo> tags, tags_list(dir));
  ZT_ASSIGN_OR_RETURN(std::optional<std::string> latest, latest_read(dir));
  const int excess = static_cast<int>(tags.size()) - keep;
  for (int i = 0; i < excess; ++i) {
    if (latest && tags[i].tag == *latest) continue;
    std::error_code ec;
    fs::remove_all(tag_path(dir, tags[i].tag), ec);
    if (ec) {
      return io_error("cannot delete the old checkpoint '{}': {}", tag_path(dir, tags[i].tag),
                      ec.message());
    }
  }
  return Status::ok();
}

}  // namespace zt::ckpt
