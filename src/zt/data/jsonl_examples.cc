#include "zt/data/jsonl_examples.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "zt/core/file_io.h"
#include "zt/core/json_limits.h"

namespace zt {
namespace {

Result<std::vector<int32_t>> int_array(const nlohmann::json& row, const char* field,
                                       const std::string& where, size_t length, int64_t lo,
                                       int64_t hi, int64_t also_ok) {
  const nlohmann::json& a = row[field];
  if (!a.is_array()) return invalid_argument("{}: '{}' must be an array of integers", where, field);
  if (length != 0 && a.size() != length) {
    return invalid_argument("{}: '{}' has {} values but input_ids has {}", where, field, a.size(),
                            length);
  }
  std::vector<int32_t> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number_integer()) {
      return invalid_argument("{}: '{}'[{}] is not an integer", where, field, i);
    }
    const int64_t v = a[i].get<int64_t>();
    if ((v < lo || v >= hi) && v != also_ok) {
      return invalid_argument("{}: '{}'[{}] = {} is outside [{}, {})", where, field, i, v, lo, hi);
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

}  // namespace

bool jsonl_looks_like(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c)) {
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return c == '{';
  }
  return false;
}

Result<std::vector<TokenExample>> jsonl_examples_read(const std::string& path, int vocab_size) {
  ZT_ASSIGN_OR_RETURN(std::string text, file_read_all(path, "JSON Lines data", int64_t{1} << 34));
  const int64_t hi = vocab_size > 0 ? vocab_size : (int64_t{1} << 31) - 1;
  std::vector<TokenExample> out;
  size_t start = 0;
  for (int line = 1; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string_view body(text.data() + start, end - start);
    start = end + 1;
    if (body.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{}:{}", path, line);
    ZT_ASSIGN_OR_RETURN(nlohmann::json row, json_parse_checked(body, where));
    if (!row.is_object()) return invalid_argument("{}: not a JSON object", where);
    if (!row.contains("input_ids")) {
      if (row.contains("text")) {
        return invalid_argument(
            "{}: 'text' needs a tokenizer; give tokenised rows with 'input_ids' (for example "
            "from transformers' tokenizer)",
            where);
      }
      return invalid_argument("{}: no 'input_ids'", where);
    }
    TokenExample e;
    ZT_ASSIGN_OR_RETURN(e.input_ids, int_array(row, "input_ids", where, 0, 0, hi, 0));
    if (e.input_ids.empty()) return invalid_argument("{}: 'input_ids' is empty", where);
    const size_t n = e.input_ids.size();
    if (row.contains("labels")) {
      ZT_ASSIGN_OR_RETURN(e.labels, int_array(row, "labels", where, n, 0, hi, -100));
    }
    if (row.contains("attention_mask")) {
      ZT_ASSIGN_OR_RETURN(e.attention_mask, int_array(row, "attention_mask", where, n, 0, 2, 0));
    }
    if (row.contains("token_type_ids")) {
      ZT_ASSIGN_OR_RETURN(e.token_type_ids,
                          int_array(row, "token_type_ids", where, n, 0, int64_t{1} << 16, 0));
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) return invalid_argument("{}: no examples", path);
  return out;
}

}  // namespace zt
