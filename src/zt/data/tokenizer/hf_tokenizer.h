// A Hugging Face tokenizer.json, run as the `tokenizers` library runs it, so the ids are the
// ones a model was trained on: added tokens are split out first (special ones on the raw text,
// the others after normalization), then each remaining piece is normalized, pre-tokenized,
// encoded by the model (BPE or WordPiece), and the post-processor adds the special tokens.
// Decoding maps ids to tokens and runs the decoder chain.
//
// Components (the JSON "type" names): normalizers BertNormalizer, NFC, NFD, NFKC, NFKD,
// Lowercase, StripAccents, Strip, Prepend, Replace, Sequence; pre-tokenizers ByteLevel, Split,
// Metaspace, BertPreTokenizer, Whitespace, WhitespaceSplit, Digits, Punctuation, Sequence;
// models BPE, WordPiece; post-processors TemplateProcessing, BertProcessing, RobertaProcessing,
// ByteLevel, Sequence; decoders ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace,
// WordPiece, BPEDecoder, Sequence. Anything else is refused naming its type and JSON path.
// Unicode data (normalization forms, categories, case) comes from utf8proc; regexes are PCRE2
// with JIT.
#pragma once

#include <memory>
#include <string>

#include "zt/data/tokenizer/tokenizer.h"

namespace zt {

class HfTokenizer : public Tokenizer {
 public:
  // Reads `path` (a tokenizer.json) and, when present beside it, tokenizer_config.json for the
  // special tokens.
  static Result<std::shared_ptr<const HfTokenizer>> load(const std::string& path);
  // From the JSON text itself; `where` names it in errors; `config_json` is the text of a
  // tokenizer_config.json or empty.
  static Result<std::shared_ptr<const HfTokenizer>> from_json(std::string_view json,
                                                              const std::string& where,
                                                              std::string_view config_json = {});
  ~HfTokenizer() override;

  Status encode_append(std::string_view text, bool add_special_tokens,
                       std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override;
  const SpecialTokenIds& special_ids() const override;
  std::string describe() const override;

  struct Impl;

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
