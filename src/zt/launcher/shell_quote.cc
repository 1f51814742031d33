// Shell quoting, shlex-style splitting and host name checks (shell_quote.h).
#include "zt/launcher/shell_quote.h"

#include <fmt/format.h>

namespace zt::launcher {
namespace {

bool is_name_start(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
bool is_alnum(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}

bool is_bare_safe(char c) {
  if (is_alnum(c)) return true;
  switch (c) {
    case '@':
    case '%':
    case '+':
    case '=':
    case ':':
    case ',':
    case '.':
    case '/':
    case '-':
      return true;
    default:
      return false;
  }
}

// NAME=... is an assignment when it is a command's first word, so such a word is always quoted.
bool looks_like_assignment(std::string_view word) {
  size_t eq = word.find('=');
  if (eq == std::string_view::npos || eq == 0 || !is_name_start(word[0])) return false;
  for (size_t i = 1; i < eq; ++i) {
    if (!is_alnum(word[i])) return false;
  }
  return true;
}


bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

std::string shell_quote(std::string_view word) {
  bool bare = !word.empty() && !looks_like_assignment(word);
  for (char c : word) {
    if (!bare) break;
    bare = is_bare_safe(c);
  }
  if (bare) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += ' ';
    out += shell_quote(words[i]);
  }
  return out;
}

Result<std::vector<std::string>> shell_split(std::string_view text, std::string_view flag) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // a word has started (an empty '' still makes a word)
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (is_space(c)) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      ++i;
    } else if (c == '\'') {
      size_t end = text.find('\'', i + 1);
      if (end == std::string_view::npos) {
        return invalid_argument("{} '{}': no closing quotation (a ' opened at character {})", flag,
                                printable(text), i + 1);
      }
      word.append(text.substr(i + 1, end - i - 1));
      in_word = true;
      i = end + 1;
    } else if (c == '"') {
      size_t j = i + 1;
      for (;; ++j) {
        if (j >= text.size()) {
          return invalid_argument("{} '{}': no closing quotation (a \" opened at character {})",
                                  flag, printable(text), i + 1);
        }
        if (text[j] == '"') break;
        if (text[j] == '\\' && j + 1 < text.size() && (text[j + 1] == '"' || text[j + 1] == '\\')) {
          ++j;
        }
        word += text[j];
      }
      in_word = true;
      i = j + 1;
    } else if (c == '\\') {
      if (i + 1 >= text.size()) {
        return invalid_argument("{} '{}': ends with a backslash that escapes nothing", flag,
                                printable(text));
      }
      word += text[i + 1];
      in_word = true;
      i += 2;
    } else {
      word += c;
      in_word = true;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

Status host_name_check(std::string_view host, std::string_view where) {
  std::string source = where.empty() ? std::string() : fmt::format(" ({})", where);
  if (host.empty()) return invalid_argument("an empty host name{}; name a host", source);
  if (host.size() > 255) {
    return invalid_argument("host name '{}...'{} is longer than 255 characters",
                            printable(host.substr(0, 40)), source);
  }
  if (host[0] == '-') {
    return invalid_argument(
        "host '{}'{} starts with '-', which ssh, pdsh and mpirun would read as an option; fix the "
        "host name",
        printable(host), source);
  }
  for (char c : host) {
    bool ok = is_alnum(c) || c == '.' || c == '-' || c == ':' || c == '%' || c == '@';
    if (!ok) {
      return invalid_argument(
          "host '{}'{} holds the character {}; a host name may hold only letters, digits and "
          ". - _ : % @ (no spaces, quotes or shell characters); fix the host name",
          printable(host), source, fmt::format("'{}'", printable(std::string_view(&c, 1))));
    }
  }
  return Status::ok();
}

}  // namespace zt::launcher
