// The byte-level tokenizer of the demo: token = byte value (0..255), plus one end-of-text token
// (256) that separates documents. Vocabulary 257. Every byte sequence round-trips exactly, so it
// needs no vocabulary file and works on any text in any encoding (it is the one Tokenizer that
// accepts bytes that are not UTF-8).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zt/data/tokenizer/tokenizer.h"

namespace zt {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEot = 256;
  static constexpr int32_t kVocabSize = 257;

  ByteTokenizer();

  // One token per byte of `text` (no EOT is added).
  static std::vector<int32_t> encode_bytes(std::string_view text);
  // Appends the encoding of `text` to `out` (streaming use, no temporary vector).
  static void encode_bytes_append(std::string_view text, std::vector<int32_t>& out);
  // Bytes back: tokens 0..255 become that byte (non-printable and non-UTF-8 bytes are kept as
  // they are), kEot becomes "\n" (nothing when skip_eot). A token outside the vocabulary (a model
  // with a padded vocabulary can sample one) becomes U+FFFD, so decoding generated text never
  // fails.
  static std::string decode_bytes(std::span<const int32_t> tokens, bool skip_eot = false);

  // Tokenizer: add_special_tokens adds nothing (the byte tokenizer has no post-processor).
  Status encode_append(std::string_view text, bool add_special_tokens,
                       std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override { return kVocabSize; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override { return id == kEot; }
  const SpecialTokenIds& special_ids() const override { return specials_; }
  std::string describe() const override { return "bytes"; }

 private:
  SpecialTokenIds specials_;
};

}  // namespace zt
