// PCRE2 patterns (regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "zt/data/tokenizer/regex.h"

#include <pcre2.h>

namespace zt::text {
namespace {

constexpr std::string_view kWhiteSpaceSet =
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}";

// Per-thread match state: match data for one pair (only the whole match is read) and a JIT
// stack large enough for long runs of the same class.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    if (context != nullptr && stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string rewrite_whitespace_classes(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        if (in_class) {
          out.append(kWhiteSpaceSet);
        } else {
          out.append("[").append(kWhiteSpaceSet).append("]");
        }
        ++i;
        continue;
      }
      if (n == 'S' && !in_class) {
        out.append("[^").append(kWhiteSpaceSet).append("]");
        ++i;
        continue;
      }
      out.push_back(c);
      out.push_back(n);
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out.push_back(']');
        ++i;
      }
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      // A POSIX class [:name:] inside a class.
      const size_t close = p.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(p.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-#&~ ").find(c) != std::string_view::npos) {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

Result<std::shared_ptr<const Regex>> Regex::compile(std::string_view pattern,
                                                    const std::string& where) {
  const std::string rewritten = rewrite_whitespace_classes(pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()),
                                   rewritten.size(), PCRE2_UTF | PCRE2_UCP, &err, &err_offset,
                                   nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return invalid_argument("{}: the regex \"{}\" does not compile: {} (at offset {})", where,
                            std::string(pattern), reinterpret_cast<const char*>(msg),
                            static_cast<size_t>(err_offset));
  }
  std::shared_ptr<Regex> r(new Regex());
  r->pattern_ = std::string(pattern);
  r->code_ = code;
  r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const Regex>(std::move(r));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Result<bool> Regex::find(std::string_view s, size_t from, size_t* begin, size_t* end) const {
  ThreadMatchState& st = thread_state();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  // The text was checked to be valid UTF-8 once, before tokenizing: skip PCRE2's check.
  int rc = jit_ ? pcre2_jit_match(code, subject, s.size(), from, 0, st.data, st.context)
                : pcre2_match(code, subject, s.size(), from, PCRE2_NO_UTF_CHECK, st.data,
                              st.context);
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && jit_) {
    // The JIT stack ran out on a pathological input: the interpreter has its own limits.
    rc = pcre2_match(code, subject, s.size(), from, PCRE2_NO_UTF_CHECK, st.data, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof(msg));
    return invalid_argument("tokenizer regex \"{}\" gave up on a {}-byte text: {}", pattern_,
                              s.size(), reinterpret_cast<const char*>(msg));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  *begin = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace zt::text
