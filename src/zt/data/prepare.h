// `zt data prepare`: text -> token files. The inputs are read in order as a stream of
// documents, each document is encoded with a tokenizer (tokenizer.h; the byte tokenizer by
// default) without special tokens, the documents are joined with the tokenizer's end-of-text
// token and written as an llm.c token file (uint16 tokens when the vocabulary fits, else uint32;
// token_file.h), atomically. Optionally every document after which floor((i+1)*F) > floor(i*F)
// goes to a second, validation file instead.
//
// Documents (PrepareOptions::format):
//   - text: a whole file is one document;
//   - jsonl: every non-blank line is a JSON object and one document, the string in its
//     `text_key` field. JSON is UTF-8: a line that is not is a bad line, whatever the tokenizer.
// kAuto picks per file by name, after dropping a compression suffix: .jsonl, .json and .ndjson
// are JSON Lines, anything else is text. Files ending in .gz are read through zlib, .zst / .zstd
// through libzstd's streaming decoder (concatenated members or frames are fine).
//
// End-of-text: between consecutive documents of a file (EosPlacement::kBetween, as before), or
// after every document, the last included (kAfterEach). A tokenizer without an end-of-text
// token is an error.
//
// Invalid UTF-8 in a document (not checked for the byte tokenizer, which takes any bytes),
// a line that is not JSON, not an object, lacks the key or holds a non-string there, is an error
// naming FILE:LINE (jsonl) or the file and byte offset (text) -- or, with BadDocuments::kSkip,
// the document is dropped and counted (PrepareSummary::skipped). Skipped documents take no
// document index (the validation split counts the documents kept).
//
// Parallelism: a reader thread cuts the input into batches of about batch_bytes of text, at most
// 2 * workers batches are in flight, `workers` threads encode batches, and the calling thread
// writes the results in input order. The output depends only on the inputs and options, never
// on `workers`: --workers 8 writes byte for byte the file --workers 1 writes, and the error
// reported is always the first one in input order. A document is encoded by one worker as a
// whole (a BPE tokenizer may merge across any boundary we would cut at, newlines included), so a
// text file must fit in memory and parallelism comes from many files or many JSON lines. The
// byte tokenizer is the exception: bytes encode independently, so a text file is streamed in
// pieces and a corpus file of any size is fine.
//
// Input expansion (data_prepare_files):
//   - a file argument is included as given (a symlink to a file is followed);
//   - a folder argument means every regular file under it, recursively, in byte-wise path order;
//     symlinked folders are not entered (no cycles), and a file found in a folder (through a
//     symlink or not) whose target is already included is skipped, so Debian's
//     common-licenses/GPL -> GPL-3 is read once;
//   - the output files themselves are never inputs: skipped when found in a folder (re-running
//     into the same folder is safe), an error when named as an input.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"
#include "zt/data/tokenizer/tokenizer.h"

namespace zt {

// Plain text every Debian machine carries (package base-files): the demo's default corpus.
inline constexpr std::string_view kDefaultCorpusDir = "/usr/share/common-licenses";

enum class DocumentFormat : unsigned char {
  kAuto,   // per file, by name (above)
  kText,   // a file is a document
  kJsonl,  // a line is a document
};
enum class EosPlacement : unsigned char { kBetween, kAfterEach };
enum class BadDocuments : unsigned char { kFail, kSkip };

// Where the work stands, after each batch is written (on the calling thread).
struct PrepareProgress {
  int64_t file_index = 0;  // 0-based, the file of the last document written
  int64_t num_files = 0;
  int64_t bytes = 0;      // input bytes consumed (after decompression)
  int64_t documents = 0;  // kept, both outputs
  int64_t tokens = 0;     // written, both outputs
  int64_t skipped = 0;
  double seconds = 0;  // since the start
};

struct PrepareOptions {
  // Null: the byte tokenizer.
  std::shared_ptr<const Tokenizer> tokenizer = nullptr;
  DocumentFormat format = DocumentFormat::kAuto;
  std::string text_key = "text";  // jsonl: the field holding the document
  EosPlacement eos = EosPlacement::kBetween;
  BadDocuments bad = BadDocuments::kFail;
  int workers = 0;  // encoding threads; 0: std::thread::hardware_concurrency()
  // In [0, 1): the share of documents written to val_output instead.
  double val_fraction = 0;
  std::string val_output = {};             // empty: the output with "_val" before its extension
  int64_t batch_bytes = int64_t{4} << 20;  // text per batch (tests make it small)
  std::function<void(const PrepareProgress&)> on_progress = nullptr;
};

struct PrepareSummary {
  std::string output;
  std::vector<std::string> files;  // in the order they were read
  std::string tokenizer;           // Tokenizer::describe()
  int workers = 0;
  int64_t bytes = 0;       // input bytes read (after decompression; jsonl: whole lines)
  int64_t text_bytes = 0;  // bytes of document text encoded
  int64_t documents = 0;   // in `output`
  int64_t tokens = 0;      // in `output`, end-of-text tokens included
  int64_t skipped = 0;     // bad documents dropped (BadDocuments::kSkip)
  std::string val_output;  // empty without a validation split
  int64_t val_documents = 0;
  int64_t val_tokens = 0;
  double seconds = 0;
};

// The files `inputs` expand to (rules above). Errors name the input: missing, neither file nor
// folder, an unreadable folder, or nothing found at all.
Result<std::vector<std::string>> data_prepare_files(const std::vector<std::string>& inputs,
                                                    const std::string& output);

// `output` with "_val" inserted before its extension: train.bin -> train_val.bin.
std::string data_prepare_val_path(const std::string& output);

// Expands `inputs`, encodes and writes `output` (and the validation file). On error neither
// output is touched. Errors: those of data_prepare_files, a bad document (above), no documents
// or no text at all (naming the files), a tokenizer without an end-of-text token, a validation
// fraction outside [0, 1) or one that selects no document, read and write failures.
Result<PrepareSummary> data_prepare(const std::vector<std::string>& inputs,
                                    const std::string& output, const PrepareOptions& options = {});

// The regular files (symlinks skipped) directly in `folder`, sorted; not_found naming the folder
// if it is missing, invalid_argument if it holds no regular file.
Result<std::vector<std::string>> default_corpus_paths(
    const std::string& folder = std::string(kDefaultCorpusDir));

}  // namespace zt
