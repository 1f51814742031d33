// ds_config text -> json. DeepSpeed reads its file with hjson and a hook that rejects duplicate
// keys (runtime/config_utils.py: dict_raise_error_on_duplicate_keys). Here: strict JSON plus the
// parts of hjson people actually use in ds_config files — `//`, `/* */` and `#` comments and
// trailing commas — which are blanked out before nlohmann::json parses the text, so that the
// line and column of a syntax error still point into the user's file. Not supported from hjson:
// unquoted keys and strings, omitted commas between members, multi-line ''' strings.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "zt/core/json_limits.h"
#include "zt/runtime/config_schema.h"

namespace zt::config_detail {
namespace {

// Replaces comments and trailing commas outside strings with spaces, keeping newlines, so byte
// offsets (and so line/column numbers) are unchanged.
std::string blank_comments_and_trailing_commas(std::string_view text) {
  std::string s(text);
  const size_t n = s.size();
  // Pass 1: comments.
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '#' || (c == '/' && i + 1 < n && s[i + 1] == '/')) {
      while (i < n && s[i] != '\n') s[i++] = ' ';
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      size_t j = i;
      while (j < n && !(s[j] == '*' && j + 1 < n && s[j + 1] == '/')) ++j;
      size_t end = j < n ? j + 2 : n;  // an unterminated comment runs to the end
      for (size_t k = i; k < end; ++k) {
        if (s[k] != '\n') s[k] = ' ';
      }
      i = end - 1;
    }
  }
  // Pass 2: a comma followed (after whitespace) by '}' or ']'.
  in_string = false;
  for (size_t i = 0; i < n; ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == ',') {
      size_t j = i + 1;
      while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r')) ++j;
      if (j < n && (s[j] == '}' || s[j] == ']')) s[i] = ' ';
    }
  }
  return s;
}

// 1-based line and column of byte offset `pos` (0-based).
std::pair<size_t, size_t> line_column(std::string_view text, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

}  // namespace

Result<Json> json_text_parse(std::string_view text, std::string_view source) {
  const std::string clean = blank_comments_and_trailing_commas(text);
  ZT_RETURN_IF_ERROR(json_nesting_check(clean, source));
  // Keys seen in each open object; the first object (in closing order, as Python's
  // object_pairs_hook sees them) that has a duplicate is reported with all its duplicates.
  std::vector<std::vector<std::string>> open;
  std::vector<std::string> duplicates;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open.emplace_back();
        break;
      case Json::parse_event_t::key:
        if (!open.empty()) open.back().push_back(parsed.get<std::string>());
        break;
      case Json::parse_event_t::object_end:
        if (!open.empty()) {
          const auto& keys = open.back();
          if (duplicates.empty()) {
            for (size_t i = 0; i < keys.size(); ++i) {
              bool first = std::find(keys.begin(), keys.begin() + i, keys[i]) == keys.begin() + i;
              bool repeated = std::find(keys.begin() + i + 1, keys.end(), keys[i]) != keys.end();
              if (first && repeated) duplicates.push_back(keys[i]);
            }
          }
          open.pop_back();
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(clean, callback, /*allow_exceptions=*/true);
  } catch (const Json::parse_error& e) {
    // e.byte is 1-based: the last character read, the end of the offending token. An
    // unexpected string (typically a member after a missing comma) is reported where it starts.
    size_t pos = e.byte > 0 ? e.byte - 1 : 0;
    if (pos < clean.size() && pos > 0 && clean[pos] == '"') {
      size_t q = pos - 1;
      while (q > 0 && !(clean[q] == '"' && clean[q - 1] != '\\')) --q;
      if (clean[q] == '"') pos = q;
    }
    auto [line, col] = line_column(clean, pos);
    std::string what = e.what();
    size_t p = what.find("column");
    p = p == std::string::npos ? std::string::npos : what.find(": ", p);
    std::string detail = p == std::string::npos ? what : what.substr(p + 2);
    return invalid_argument("{}:{}:{}: invalid JSON at line {}, column {}: {}", source, line, col,
                            line, col, detail);
  } catch (const Json::exception& e) {
    // A number too large for any JSON number type ("7E667"): nlohmann reports it as out_of_range.
    std::string what = e.what();
    if (const size_t at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
    return invalid_argument("{}: invalid JSON: {}", source, what);
  }
  if (!duplicates.empty()) {
    return invalid_argument("{}: Duplicate keys in DeepSpeed config: {}", source,
                            py_str_list(duplicates));
  }
  if (!j.is_object()) {
    return invalid_argument("{}: a DeepSpeed config must be a JSON object {{...}}, got {}", source,
                            j.type_name());
  }
  return j;
}

}  // namespace zt::config_detail
