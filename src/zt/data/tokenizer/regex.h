// Regular expressions for tokenizer.json patterns: PCRE2 in UTF mode with Unicode properties
// and the JIT compiler. `tokenizers` runs these patterns with Oniguruma, whose `\s` is the
// Unicode White_Space set (tab..CR, NEL, the Z categories); PCRE2's `\s` leaves out NEL, so `\s`
// and `\S` are rewritten to that explicit set before compiling. Compiled patterns are shared
// between threads; match state is per thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zt/core/status.h"

namespace zt::text {

class Regex {
 public:
  // Errors name `where` (the JSON path of the pattern) and PCRE2's message with the offset.
  static Result<std::shared_ptr<const Regex>> compile(std::string_view pattern,
                                                      const std::string& where);
  static std::string escape(std::string_view literal);
  ~Regex();

  // Calls on_match(start, end) for every non-overlapping match in `s`, left to right (an empty
  // match advances by one character, as Oniguruma's and Rust's iterators do). Returns an error
  // only when PCRE2 gives up (a resource limit on pathological input).
  template <typename F>
  Status for_each_match(std::string_view s, F&& on_match) const {
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t b = 0, e = 0;
      ZT_ASSIGN_OR_RETURN(bool found, find(s, pos, &b, &e));
      if (!found) break;
      on_match(b, e);
      if (e == b) {
        if (e >= s.size()) break;
        pos = e + 1;
        while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
      } else {
        pos = e;
      }
    }
    return Status::ok();
  }

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  Result<bool> find(std::string_view s, size_t from, size_t* begin, size_t* end) const;

  std::string pattern_;  // as given
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

// `pattern` with Oniguruma's `\s`/`\S` spelled out for PCRE2 (see above).
std::string rewrite_whitespace_classes(std::string_view pattern);

}  // namespace zt::text
