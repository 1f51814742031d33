// The tokenizer interface every text path uses (data preparation, JSON Lines datasets, `zt
// tokenize`, `zt generate`): text to ids and back, the special tokens, the vocabulary size.
// Two implementations: ByteTokenizer (byte_tokenizer.h, bytes 0..255 plus an end-of-text id,
// no file needed) and HfTokenizer (hf_tokenizer.h, a Hugging Face tokenizer.json, producing the
// ids the `tokenizers` library produces). tokenizer_load picks one from what the user names.
//
// Text is UTF-8. encode refuses invalid UTF-8 with the byte offset of the first bad sequence
// (Hugging Face takes only valid strings, so there is no "same ids" for it); a caller that wants
// to go on anyway repairs the text first with utf8_repair.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt {

// The special tokens a training job needs to know, as ids (absent when the tokenizer has none).
struct SpecialTokenIds {
  std::optional<int32_t> bos;  // beginning of sequence
  std::optional<int32_t> eos;  // end of text: separates documents, ends a response
  std::optional<int32_t> pad;
  std::optional<int32_t> unk;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to `out`. With add_special_tokens the post-processor's tokens are
  // added as Hugging Face does for a single sequence (BERT's [CLS] ... [SEP], Llama's <s>).
  // Errors: invalid UTF-8 (the offset of the first bad byte).
  virtual Status encode_append(std::string_view text, bool add_special_tokens,
                               std::vector<int32_t>& out) const = 0;
  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens = false) const;

  // Text of `ids`. skip_special_tokens drops special tokens (as `tokenizers`' decode does by
  // default). An id outside the vocabulary decodes to U+FFFD, never an error: a model with a
  // padded vocabulary can sample one.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;

  // One more than the largest id the tokenizer produces (model vocabulary and added tokens).
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  virtual const SpecialTokenIds& special_ids() const = 0;
  // What the tokenizer is, for logs: "bytes", or "BPE from /path/tokenizer.json".
  virtual std::string describe() const = 0;
};

// The tokenizer a user names:
//   - "bytes": the byte-level tokenizer (vocabulary 257);
//   - a tokenizer.json file;
//   - a folder holding tokenizer.json (a Hugging Face model directory).
// The special tokens come from tokenizer_config.json beside the file when it is there
// (bos_token, eos_token, pad_token, unk_token), else from the usual names among the added
// tokens. Errors name the file and, for an unsupported component, its type and JSON path.
Result<std::shared_ptr<const Tokenizer>> tokenizer_load(const std::string& name_or_path);

// Byte offset of the first invalid UTF-8 sequence in `text` (overlong forms, surrogates and code
// points above U+10FFFF are invalid), or nullopt when it is all valid.
std::optional<size_t> utf8_invalid_offset(std::string_view text);
// `text` with each maximal invalid subpart replaced by U+FFFD (as Python errors="replace").
std::string utf8_repair(std::string_view text);

}  // namespace zt
