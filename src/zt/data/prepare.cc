// `zt data prepare` (prepare.h): input expansion, streaming encode, atomic write.
#include "zt/data/prepare.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/ranges.h>

#include "zt/core/log.h"
#include "zt/data/tokenizer/byte_tokenizer.h"
#include "zt/data/token_file.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// The identity of a file for de-duplication: its canonical path (symlinks resolved), or the
// lexical absolute path when it does not exist yet (the output).
std::string file_identity(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  if (ec) c = fs::absolute(p, ec).lexically_normal();
  return c.string();
}

// Appends the files under `folder` (rules in prepare.h) to `files`, skipping identities already
// in `seen` and recording the new ones.
Status expand_folder(const std::string& folder, const std::string& output_id,
                     std::set<std::string>& seen, std::vector<std::string>& files) {
  std::vector<fs::path> regular;
  std::vector<fs::path> links;
  std::error_code ec;
  fs::recursive_directory_iterator it(folder, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& e = *it;
    std::error_code st_ec;
    if (e.is_symlink(st_ec)) {
      links.push_back(e.path());
    } else if (e.is_regular_file(st_ec)) {
      regular.push_back(e.path());
    }
    // Sockets, fifos, devices: not text; skipped.
  }
  if (ec) return io_error("reading input folder '{}': {}", folder, ec.message());

  // Real files claim their identities first, so a symlink sorting before its target
  // (GPL -> GPL-3) is the one dropped, whatever the order.
  std::sort(regular.begin(), regular.end());
  std::sort(links.begin(), links.end());
  std::vector<fs::path> chosen;
  for (const fs::path& p : regular) {
    const std::string id = file_identity(p);
    if (id == output_id) continue;
    if (seen.insert(id).second) chosen.push_back(p);
  }
  for (const fs::path& p : links) {
    std::error_code st_ec;
    if (!fs::is_regular_file(p, st_ec)) continue;  // dangling, or a link to a folder
    const std::string id = file_identity(p);
    if (id == output_id) continue;
    if (seen.insert(id).second) chosen.push_back(p);
  }
  std::sort(chosen.begin(), chosen.end());
  for (const fs::path& p : chosen) files.push_back(p.string());
  return Status::ok();
}

}  // namespace

Result<std::vector<std::string>> data_prepare_files(const std::vector<std::string>& inputs,
                                                    const std::string& output) {
  if (inputs.empty()) return invalid_argument("data prepare: no input files or folders given");
  const std::string output_id = file_identity(output);
  std::set<std::string> seen;
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);  // follows symlinks
    if (ec || !fs::exists(st)) {
      return not_found("data prepare: input '{}' does not exist", input);
    }
    if (fs::is_regular_file(st)) {
      const std::string id = file_identity(input);
      if (id == output_id) {
        return invalid_argument(
            "data prepare: input '{}' is also the output file; choose "
            "another output path",
            input);
      }
      seen.insert(id);
      files.push_back(input);
    } else if (fs::is_directory(st)) {
      ZT_RETURN_IF_ERROR(expand_folder(input, output_id, seen, files));
    } else {
      return invalid_argument("data prepare: input '{}' is neither a regular file nor a folder",
                              input);
    }
  }
  if (files.empty()) {
    return invalid_argument("data prepare: the inputs ({}) contain no regular files",
                            fmt::join(inputs, ", "));
  }
  return files;
}

Result<PrepareSummary> data_prepare(const std::vector<std::string>& inputs,
                                    const std::string& output, const PrepareOptions& options) {
  PrepareSummary summary;
  summary.output = output;
  ZT_ASSIGN_OR_RETURN(summary.files, data_prepare_files(inputs, output));
  ZT_ASSIGN_OR_RETURN(TokenFileWriter writer,
                      TokenFileWriter::create(output, ByteTokenizer::kVocabSize));

  constexpr size_t kChunk = size_t{1} << 20;
  std::string buf(kChunk, '\0');
  std::vector<int32_t> tokens;
  const auto num_files = static_cast<int64_t>(summary.files.size());
  for (int64_t i = 0; i < num_files; ++i) {
    const std::string& path = summary.files[i];
    if (i > 0) {
      const int32_t eot = ByteTokenizer::kEot;
      ZT_RETURN_IF_ERROR(writer.append({&eot, 1}));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error("data prepare: cannot open '{}' for reading", path);
    int64_t file_bytes = 0;
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const std::streamsize got = in.gcount();
      if (got <= 0) break;
      tokens.clear();
      ByteTokenizer::encode_bytes_append({buf.data(), static_cast<size_t>(got)}, tokens);
      ZT_RETURN_IF_ERROR(writer.append(tokens));
      file_bytes += got;
    }
    // eof is the normal end; badbit means the read itself failed (EIO, a folder, ...).
    if (in.bad()) return io_error("data prepare: reading '{}' failed", path);
    summary.bytes += file_bytes;
    const PrepareProgress progress{.file_index = i,
                                   .num_files = num_files,
                                   .path = path,
                                   .bytes = file_bytes,
                                   .total_bytes = summary.bytes};
    if (options.on_file) {
      options.on_file(progress);
    } else {
      ZT_LOG_DEBUG("data prepare: [{}/{}] {} ({} bytes)", i + 1, num_files, path, file_bytes);
    }
  }
  if (summary.bytes == 0) {
    return invalid_argument("data prepare: the {} input file(s) are all empty; nothing to write",
                            num_files);
  }
  summary.tokens = writer.num_tokens();
  ZT_RETURN_IF_ERROR(writer.finish());
  return summary;
}

Result<std::vector<std::string>> default_corpus_paths(const std::string& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    return not_found(
        "default corpus folder '{}' is missing (Debian's base-files package provides it); "
        "pass text files or folders to use instead",
        folder);
  }
  std::vector<std::string> files;
  fs::directory_iterator it(folder, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code st_ec;
    if (it->is_symlink(st_ec) || !it->is_regular_file(st_ec)) continue;
    files.push_back(it->path().string());
  }
  if (ec) return io_error("reading default corpus folder '{}': {}", folder, ec.message());
  if (files.empty()) {
    return invalid_argument("default corpus folder '{}' holds no regular files", folder);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace zt
