// tokenizer_load and the UTF-8 helpers (tokenizer.h).
#include "zt/data/tokenizer/tokenizer.h"

#include <filesystem>

#include "zt/data/tokenizer/byte_tokenizer.h"
#include "zt/data/tokenizer/hf_tokenizer.h"
#include "zt/data/tokenizer/unicode.h"

namespace zt {

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                               bool add_special_tokens) const {
  std::vector<int32_t> out;
  ZT_RETURN_IF_ERROR(encode_append(text, add_special_tokens, out));
  return out;
}

Result<std::shared_ptr<const Tokenizer>> tokenizer_load(const std::string& name_or_path) {
  if (name_or_path == "bytes") return std::shared_ptr<const Tokenizer>(new ByteTokenizer());
  std::error_code ec;
  std::filesystem::path p(name_or_path);
  if (std::filesystem::is_directory(p, ec)) {
    if (!std::filesystem::exists(p / "tokenizer.json", ec)) {
      return not_found(
          "tokenizer: folder {} has no tokenizer.json; name a tokenizer.json file, a model folder "
          "that holds one, or 'bytes'",
          name_or_path);
    }
    p /= "tokenizer.json";
  } else if (!std::filesystem::exists(p, ec)) {
    return not_found("tokenizer: {} does not exist; name a tokenizer.json file, a model folder "
                     "that holds one, or 'bytes'",
                     name_or_path);
  }
  ZT_ASSIGN_OR_RETURN(std::shared_ptr<const HfTokenizer> t, HfTokenizer::load(p.string()));
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid.
size_t utf8_valid_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  const size_t n = s.size() - i;
  if (c >= 0xC2 && c <= 0xDF) return n >= 2 && (b(i + 1) & 0xC0) == 0x80 ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (n < 3 || (b(i + 1) & 0xC0) != 0x80 || (b(i + 2) & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(i + 1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (n < 4 || (b(i + 1) & 0xC0) != 0x80 || (b(i + 2) & 0xC0) != 0x80 ||
        (b(i + 3) & 0xC0) != 0x80) {
      return 0;
    }
    if (c == 0xF0 && b(i + 1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(i + 1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::optional<size_t> utf8_invalid_offset(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, text.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const size_t len = utf8_valid_len(text, i);
    if (len == 0) return i;
    i += len;
  }
  return std::nullopt;
}

std::string utf8_repair(std::string_view text) { return text::utf8_lossy(text); }

}  // namespace zt
