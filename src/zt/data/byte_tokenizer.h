// The byte-level tokenizer of the demo: token = byte value (0..255), plus one end-of-text token
// (256) that separates documents. Vocabulary 257. Every byte sequence round-trips exactly, so it
// needs no vocabulary file and works on any text in any encoding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

class ByteTokenizer {
 public:
  static constexpr int32_t kEot = 256;
  static constexpr int32_t kVocabSize = 257;

  // One token per byte of `text` (no EOT is added).
  static std::vector<int32_t> encode(std::string_view text);
  // Appends the encoding of `text` to `out` (streaming use, no temporary vector).
  static void encode_append(std::string_view text, std::vector<int32_t>& out);
  // Bytes back: tokens 0..255 become that byte (non-printable and non-UTF-8 bytes are kept as
  // they are), kEot becomes "\n". A token outside the vocabulary (a model with a padded
  // vocabulary can sample one) becomes U+FFFD, so decoding generated text never fails.
  static std::string decode(std::span<const int32_t> tokens);
};

}  // namespace zt
