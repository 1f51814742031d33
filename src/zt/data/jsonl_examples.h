// Tokenised examples from JSON Lines, one object per line, with transformers' field names:
// `input_ids` (required), and optionally `labels` (-100: position not counted),
// `attention_mask` (1 real token, 0 padding) and `token_type_ids`; each the same length as
// input_ids. A line with `text` instead needs a tokenizer and is refused naming the line. Blank
// lines are skipped. Errors name FILE:LINE and the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zt/core/status.h"

namespace zt {

struct TokenExample {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;          // empty: not given
  std::vector<int32_t> attention_mask;  // empty: all ones
  std::vector<int32_t> token_type_ids;  // empty: all zeros
};

// `vocab_size` > 0 checks every id (and label other than -100) against it.
Result<std::vector<TokenExample>> jsonl_examples_read(const std::string& path, int vocab_size);

// Whether `path` looks like JSON Lines (its first non-blank byte is '{'), not a token file.
bool jsonl_looks_like(const std::string& path);

}  // namespace zt
