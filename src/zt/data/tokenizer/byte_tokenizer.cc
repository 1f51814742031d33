// Byte-level tokenizer (byte_tokenizer.h).
#include "zt/data/tokenizer/byte_tokenizer.h"

namespace zt {
namespace {
constexpr std::string_view kEotText = "<|endoftext|>";
}  // namespace

ByteTokenizer::ByteTokenizer() { specials_.eos = kEot; }

std::vector<int32_t> ByteTokenizer::encode_bytes(std::string_view text) {
  std::vector<int32_t> out;
  encode_bytes_append(text, out);
  return out;
}

void ByteTokenizer::encode_bytes_append(std::string_view text, std::vector<int32_t>& out) {
  // No reserve(size() + n) here: called once per document on a growing vector, an exact
  // reserve would copy the whole vector every time instead of growing it geometrically.
  // Through unsigned char: a plain char is signed on x86, and byte 0xE9 must be token 233.
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode_bytes(std::span<const int32_t> tokens, bool skip_eot) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
  std::string out;
  out.reserve(tokens.size());
  for (int32_t t : tokens) {
    if (t >= 0 && t < 256) {
      out.push_back(static_cast<char>(static_cast<unsigned char>(t)));
    } else if (t == kEot) {
      if (!skip_eot) out.push_back('\n');
    } else {
      out.append(kReplacement);
    }
  }
  return out;
}

Status ByteTokenizer::encode_append(std::string_view text, bool /*add_special_tokens*/,
                                    std::vector<int32_t>& out) const {
  encode_bytes_append(text, out);
  return Status::ok();
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return decode_bytes(ids, skip_special_tokens);
}

std::optional<int32_t> ByteTokenizer::token_to_id(std::string_view token) const {
  if (token == kEotText) return kEot;
  if (token.size() == 1) return static_cast<unsigned char>(token[0]);
  return std::nullopt;
}

std::optional<std::string> ByteTokenizer::id_to_token(int32_t id) const {
  if (id == kEot) return std::string(kEotText);
  if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
  return std::nullopt;
}

}  // namespace zt
