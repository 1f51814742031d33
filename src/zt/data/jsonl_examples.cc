// Pre-tokenized JSON Lines examples (jsonl_examples.h), on top of JsonlFile and
// jsonl_tokens_read (jsonl_dataset.h).
#include "zt/data/jsonl_examples.h"

#include <fstream>

#include <nlohmann/json.hpp>

namespace zt {

bool jsonl_looks_like(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c)) {
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return c == '{';
  }
  return false;
}

Result<std::vector<TokenExample>> jsonl_examples_read(const std::string& path, int vocab_size) {
  ZT_ASSIGN_OR_RETURN(JsonlFile file, JsonlFile::open(path));
  std::vector<TokenExample> out;
  out.reserve(static_cast<size_t>(file.size()));
  for (int64_t i = 0; i < file.size(); ++i) {
    ZT_ASSIGN_OR_RETURN(nlohmann::json row, file.parse(i));
    const std::string where = file.location(i);
    if (!row.contains("input_ids") && row.contains("text")) {
      return invalid_argument(
          "{}: 'text' needs a tokenizer; give tokenised rows with 'input_ids' (for example "
          "from transformers' tokenizer)",
          where);
    }
    ZT_ASSIGN_OR_RETURN(TokenExample e, jsonl_tokens_read(row, where, vocab_size));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace zt
