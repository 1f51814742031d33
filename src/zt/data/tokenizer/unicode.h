// The Unicode pieces the tokenizer needs, as the `tokenizers` library (Rust) defines them:
// UTF-8 stepping, general categories and normalization forms (from utf8proc), Rust's
// char::is_whitespace (the Unicode White_Space property) and char::to_lowercase, and
// String::from_utf8_lossy's replacement of invalid bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zt::text {

// The code point at s[i] (s is valid UTF-8) and its length in bytes.
inline char32_t utf8_next(std::string_view s, size_t i, size_t* len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  if (c < 0xE0) {
    *len = 2;
    return (char32_t(c & 0x1F) << 6) | (b(i + 1) & 0x3F);
  }
  if (c < 0xF0) {
    *len = 3;
    return (char32_t(c & 0x0F) << 12) | (char32_t(b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
  }
  *len = 4;
  return (char32_t(c & 0x07) << 18) | (char32_t(b(i + 1) & 0x3F) << 12) |
         (char32_t(b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
}
// Length in bytes of the UTF-8 sequence whose first byte is c (valid input).
inline size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }
void utf8_append(std::string& out, char32_t cp);
size_t utf8_count(std::string_view s);  // code points

// Unicode general category (utf8proc's numbering: UTF8PROC_CATEGORY_*).
int category(char32_t c);
bool is_white_space(char32_t c);   // Rust char::is_whitespace (White_Space property)
bool is_numeric(char32_t c);       // Rust char::is_numeric: Nd, Nl, No
bool is_punctuation(char32_t c);   // ASCII punctuation or a P* category (BERT's rule)
bool is_other(char32_t c);         // Cc, Cf, Cn, Co, Cs
bool is_mark(char32_t c);          // Mn, Mc, Me (combining marks)
bool is_mark_nonspacing(char32_t c);  // Mn
bool is_chinese_char(char32_t c);  // the CJK blocks BERT isolates

enum class NormForm : unsigned char { kNFC, kNFD, kNFKC, kNFKD };
// `s` in normalization form `form`. ASCII text is returned unchanged without a copy's cost.
std::string normalize(std::string_view s, NormForm form);
// Rust's char::to_lowercase applied to every code point (no context rules such as final sigma).
std::string lowercase(std::string_view s);

// Bytes to text as Rust's String::from_utf8_lossy (and Python's errors="replace"): each maximal
// invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace zt::text
