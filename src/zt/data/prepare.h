// `zt data prepare`: text files -> one token file. The inputs are concatenated in order with the
// end-of-text token between files, encoded with the byte tokenizer (byte_tokenizer.h) and
// written as an llm.c token file (uint16 tokens; token_file.h), atomically. Files are streamed,
// so a corpus larger than memory is fine.
//
// Input expansion (data_prepare_files):
//   - a file argument is included as given (a symlink to a file is followed);
//   - a folder argument means every regular file under it, recursively, in byte-wise path order;
//     symlinked folders are not entered (no cycles), and a file found in a folder (through a
//     symlink or not) whose target is already included is skipped, so Debian's
//     common-licenses/GPL -> GPL-3 is read once;
//   - the output file itself is never an input: skipped when found in a folder (re-running into
//     the same folder is safe), an error when named as an input.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt {

// Plain text every Debian machine carries (package base-files): the demo's default corpus.
inline constexpr std::string_view kDefaultCorpusDir = "/usr/share/common-licenses";

struct PrepareProgress {
  int64_t file_index = 0;  // 0-based
  int64_t num_files = 0;
  std::string_view path;
  int64_t bytes = 0;        // of this file
  int64_t total_bytes = 0;  // read so far, this file included
};

struct PrepareOptions {
  // Called after each file is encoded; empty: one debug log line per file.
  std::function<void(const PrepareProgress&)> on_file;
};

struct PrepareSummary {
  std::string output;
  std::vector<std::string> files;  // in the order they were concatenated
  int64_t bytes = 0;               // text bytes read
  int64_t tokens = 0;              // bytes + one EOT between consecutive files
};

// The files `inputs` expand to (rules above). Errors name the input: missing, neither file nor
// folder, an unreadable folder, or nothing found at all.
Result<std::vector<std::string>> data_prepare_files(const std::vector<std::string>& inputs,
                                                    const std::string& output);

// Expands `inputs`, encodes and writes `output`. On error `output` is left as it was.
Result<PrepareSummary> data_prepare(const std::vector<std::string>& inputs,
                                    const std::string& output, const PrepareOptions& options = {});

// The regular files (symlinks skipped) directly in `folder`, sorted; not_found naming the folder
// if it is missing, invalid_argument if it holds no regular file.
Result<std::vector<std::string>> default_corpus_paths(
    const std::string& folder = std::string(kDefaultCorpusDir));

}  // namespace zt
