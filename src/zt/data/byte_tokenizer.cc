// Byte-level tokenizer (byte_tokenizer.h).
#include "zt/data/byte_tokenizer.h"

namespace zt {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<int32_t> out;
  encode_append(text, out);
  return out;
}

void ByteTokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) {
  out.reserve(out.size() + text.size());
  // Through unsigned char: a plain char is signed on x86, and byte 0xE9 must be token 233.
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode(std::span<const int32_t> tokens) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
  std::string out;
  out.reserve(tokens.size());
  for (int32_t t : tokens) {
    if (t >= 0 && t < 256) {
      out.push_back(static_cast<char>(static_cast<unsigned char>(t)));
    } else if (t == kEot) {
      out.push_back('\n');
    } else {
      out.append(kReplacement);
    }
  }
  return out;
}

}  // namespace zt
