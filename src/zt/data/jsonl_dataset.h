// JSON Lines datasets for fine-tuning, read as a stream: one JSON object per line, turned into
// token sequences with labels, then into padded or packed (B, T) batches (docs/data.md, "JSON
// Lines datasets").
//
// Two layers:
//   - JsonlFile: the file memory-mapped read-only and an index of where each non-blank line
//     starts, built in one pass; a line is parsed only when asked for. The file is never copied
//     into memory; the index costs 8 bytes a line.
//   - JsonlDataset: each record converted to a tokenized example according to its format
//     (JsonlFormat below), truncated to seq_len, and served by index, in a seeded per-epoch
//     order, sharded across ranks and batched.
//
// Labels are ALIGNED with input_ids (the transformers convention): labels[t] is the label of
// token t, and the model shifts internally (position t predicts labels[t + 1]). -100 marks a
// token that is not a target (the prompt, padding).
//
// Every error a user's file can cause names FILE:LINE and the key ("data.jsonl:7: 'response'
// must be a string, found number"); with BadRecords::kSkip such lines are counted and left out
// instead.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "zt/core/status.h"
#include "zt/data/batch_sampler.h"
#include "zt/data/tokenizer/tokenizer.h"

namespace zt {

// ---------------------------------------------------------------------------------------------
// The file

class JsonlFile {
 public:
  // Maps `path` and indexes its lines. Blank and whitespace-only lines are skipped (line numbers
  // in messages stay the real 1-based lines of the file); CRLF line ends and a missing final
  // newline are accepted, and a UTF-8 byte-order mark before the first line is ignored. Errors:
  // a missing or unreadable file, and a file with no non-blank line, naming the file.
  static Result<JsonlFile> open(const std::string& path);
  // The same from bytes held in memory (tests, fuzzing); `name` stands for the path in messages.
  static Result<JsonlFile> from_memory(std::string bytes, const std::string& name);

  JsonlFile(JsonlFile&& other) noexcept;
  JsonlFile& operator=(JsonlFile&& other) noexcept;
  JsonlFile(const JsonlFile&) = delete;
  JsonlFile& operator=(const JsonlFile&) = delete;
  ~JsonlFile();

  const std::string& path() const { return path_; }
  // Number of non-blank lines.
  int64_t size() const { return static_cast<int64_t>(starts_.size()); }
  // The 1-based line of the file that non-blank line i is.
  int64_t line_number(int64_t i) const;
  // "FILE:LINE" of non-blank line i, for messages.
  std::string location(int64_t i) const;
  // Line i without its line end ("\n" or "\r\n"). Valid while the JsonlFile lives.
  std::string_view text(int64_t i) const;
  // Line i as a JSON object. Errors: "FILE:LINE: not a JSON object (why)": a syntax error,
  // invalid UTF-8 (with the key whose value holds it), nesting past kJsonMaxDepth, or valid JSON
  // that is not an object.
  Result<nlohmann::json> parse(int64_t i) const;

 private:
  friend class JsonlDataset;  // holds one, filled in create()
  JsonlFile() = default;
  Status index();
  std::string_view bytes() const;
  void release();

  std::string path_;
  void* map_ = nullptr;  // the whole file (open), or null (from_memory)
  size_t map_bytes_ = 0;
  std::string owned_;             // from_memory's bytes
  std::vector<uint64_t> starts_;  // byte offset of each non-blank line
  // Blank lines, sparsely: (i, n) means non-blank line i and later ones sit n lines further down
  // the file than their index says. Sorted by i; usually empty.
  std::vector<std::pair<int64_t, int64_t>> blank_runs_;
};

// ---------------------------------------------------------------------------------------------
// Examples

// One token sequence with transformers' field names; every non-empty vector has the length of
// input_ids. (Also the row type of jsonl_examples.h.)
struct TokenExample {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;  // aligned with input_ids; -100 not counted; empty: not given
  std::vector<int32_t> attention_mask;  // 1 real token, 0 padding; empty: all ones
  std::vector<int32_t> token_type_ids;  // empty: all zeros
};

// A pre-tokenized record: `input_ids` (required, non-empty), optional `labels`, `attention_mask`
// and `token_type_ids` of the same length. Ids and labels (other than -100) must lie in
// [0, vocab_size) when vocab_size > 0. `where` ("FILE:LINE") opens every error, which names the
// key and the index of a bad value.
Result<TokenExample> jsonl_tokens_read(const nlohmann::json& row, const std::string& where,
                                       int64_t vocab_size);

// The record formats, declared once: the name a user writes, and the keys each needs.
enum class JsonlFormat : unsigned char {
  kAuto,            // detected from the first record (the order below is the detection order)
  kTokens,          // input_ids [+ labels, attention_mask, token_type_ids]: used as they are
  kPairs,           // prompt + chosen + rejected: two sequences (reward models)
  kPromptResponse,  // prompt + response: supervised fine-tuning
  kPromptChosen,    // prompt + chosen: supervised fine-tuning on DeepSpeed-Chat's files
  kText,            // text: plain language modelling
};
struct JsonlFormatInfo {
  JsonlFormat format;
  const char* name;
  std::array<const char*, 3> keys;  // the keys it needs (nullptr-terminated)
};
inline constexpr std::array<JsonlFormatInfo, 6> kJsonlFormats = {{
    {JsonlFormat::kAuto, "auto", {nullptr, nullptr, nullptr}},
    {JsonlFormat::kTokens, "tokens", {"input_ids", nullptr, nullptr}},
    {JsonlFormat::kPairs, "pairs", {"prompt", "chosen", "rejected"}},
    {JsonlFormat::kPromptResponse, "prompt_response", {"prompt", "response", nullptr}},
    {JsonlFormat::kPromptChosen, "prompt_chosen", {"prompt", "chosen", nullptr}},
    {JsonlFormat::kText, "text", {"text", nullptr, nullptr}},
}};
const char* jsonl_format_name(JsonlFormat f);
// "prompt_response" -> kPromptResponse; an unknown name is an error listing the names.
Result<JsonlFormat> jsonl_format_parse(std::string_view name);

enum class PromptLabels : unsigned char {
  kMasked,   // -100 on the prompt: the loss covers the response and its eos (the default)
  kTrained,  // every token is a label (train_on_prompt)
};
enum class BadRecords : unsigned char {
  kFail,  // the first bad line is the error
  kSkip,  // bad lines are counted (skipped()) and left out
};
enum class RowLayout : unsigned char {
  kPad,   // one example per row, padded to seq_len
  kPack,  // whole examples packed greedily into rows of seq_len
};

struct JsonlDatasetOptions {
  JsonlFormat format = JsonlFormat::kAuto;
  int64_t seq_len = 0;  // T, required (>= 1): examples are truncated to it, rows are this long
  PromptLabels prompt_labels = PromptLabels::kMasked;
  BadRecords bad_records = BadRecords::kFail;
  RowLayout layout = RowLayout::kPad;
  // End of text, when the tokenizer names none (its special_ids().eos wins).
  std::optional<int32_t> eos_id = std::nullopt;
  // `text` records end with the eos (causal language modelling). Off for masked LMs: the text
  // with the tokenizer's own special tokens ([CLS] ... [SEP]), as BERT's tokenizer makes it.
  bool text_eos = true;
  // Checks pre-tokenized ids; 0: the tokenizer's vocabulary, or no check without a tokenizer.
  int64_t vocab_size = 0;
  // Batches: rows per rank (pairs: B pairs give 2B rows), order and sharding.
  int64_t batch_size = 1;
  SampleOrder order = SampleOrder::kRandom;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
};

// One record, tokenized: one sequence, or two for pairs (chosen, then rejected). Labels are
// always filled (aligned with input_ids); attention_mask is empty (all ones) unless the record
// gave one.
struct JsonlExample {
  std::vector<TokenExample> sequences;
  int64_t line = 0;        // its line in the file
  bool truncated = false;  // some sequence was longer than seq_len and lost its right end
};

// A (B, T) batch, host values row-major, as tasks/lm_loss.h's LmBatch: rows shorter than T are
// padded with the pad id, label -100, attention mask 0 and position 0.
struct JsonlBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> input_ids, labels, attention_mask, position_ids;
  // Per row, where its examples end: {0, end of the 1st, end of the 2nd, ...} (flash-attention's
  // cu_seqlens for that row); the last value is the number of real tokens. Padded rows: {0, n}.
  std::vector<std::vector<int32_t>> boundaries;
  std::vector<int64_t> examples;  // the dataset indices in the batch, in row order
};

class JsonlDataset {
 public:
  // Indexes the file, then reads every record once (tokenizing it) to check it, find the format,
  // count truncations and learn each example's length; examples are tokenized again on demand.
  // `tokenizer` may be null for pre-tokenized data. Errors: the first bad line (FILE:LINE and
  // the key) unless bad_records is kSkip; options out of range; a text format without a
  // tokenizer or without an eos id; no usable example.
  static Result<JsonlDataset> open(const std::string& path,
                                   std::shared_ptr<const Tokenizer> tokenizer,
                                   const JsonlDatasetOptions& options);
  static Result<JsonlDataset> create(JsonlFile file, std::shared_ptr<const Tokenizer> tokenizer,
                                     const JsonlDatasetOptions& options);

  JsonlDataset(JsonlDataset&&) noexcept;
  JsonlDataset& operator=(JsonlDataset&&) noexcept;
  ~JsonlDataset();

  const JsonlFile& file() const { return file_; }
  JsonlFormat format() const { return format_; }  // never kAuto once opened
  const JsonlDatasetOptions& options() const { return options_; }
  int64_t size() const { return static_cast<int64_t>(records_.size()); }
  int64_t skipped() const { return skipped_; }                         // bad lines left out (kSkip)
  const std::string& first_skipped() const { return first_skipped_; }  // the first one's error
  int64_t truncated() const { return truncated_; }  // examples longer than seq_len
  int32_t pad_id() const { return pad_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }

  // Example i (0 <= i < size()), tokenized now.
  Result<JsonlExample> example(int64_t i) const;
  int64_t line_number(int64_t i) const;

  // The order of every example in `epoch`: 0..N-1, shuffled (kRandom) by Fisher-Yates with
  // std::mt19937_64 seeded by batch_seed(seed, epoch) and random_below, so it is the same on
  // every machine and standard library.
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // This rank's examples of `epoch`: positions r, r+W, r+2W, ... of epoch_order.
  std::vector<int64_t> shard(int64_t epoch) const;
  // Full batches of `epoch`, the same number on every rank (the smallest rank's count) so that
  // ranks step together; what is left over (fewer than B rows) is not used that epoch.
  // kPad: a batch is B examples of shard(). kPack: shard()'s examples are packed greedily in
  // order (an example joins the current row if it fits, else opens the next), and a batch is
  // B rows.
  int64_t num_batches(int64_t epoch) const;
  Result<JsonlBatch> batch(int64_t epoch, int64_t b) const;
  // Batch g of a whole run, the epochs following each other (training's global batch number).
  // Each epoch's batch count is found once and kept, so a step does not replan earlier epochs.
  Result<JsonlBatch> batch_at(int64_t g) const;

 private:
  struct Plan;
  JsonlDataset() = default;
  Result<JsonlExample> convert(const nlohmann::json& row, int64_t line_index) const;
  Status fill_row(JsonlBatch& out, int64_t row, const std::vector<int64_t>& examples) const;
  const Plan& plan(int64_t epoch) const;

  JsonlFile file_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  JsonlDatasetOptions options_;
  JsonlFormat format_ = JsonlFormat::kAuto;
  std::optional<int32_t> eos_id_;
  int32_t pad_id_ = 0;
  int64_t vocab_size_ = 0;        // pre-tokenized check; 0 none
  std::vector<int64_t> records_;  // the file line index of each example
  std::vector<int32_t> lengths_;  // its first sequence's length after truncation
  int64_t skipped_ = 0, truncated_ = 0;
  std::string first_skipped_;
  std::unique_ptr<Plan> plan_;  // the last epoch's rows and batch count, behind a mutex
};

}  // namespace zt
