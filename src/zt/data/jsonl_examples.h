// Tokenised examples from JSON Lines, one object per line, with transformers' field names:
// `input_ids` (required), and optionally `labels` (-100: position not counted),
// `attention_mask` (1 real token, 0 padding) and `token_type_ids`; each the same length as
// input_ids. A line with `text` instead needs a tokenizer and is refused naming the line (the
// fine-tuning reader, jsonl_dataset.h, tokenizes text). Blank lines are skipped. Errors name
// FILE:LINE and the field. Read through JsonlFile (jsonl_dataset.h): the file is mapped, not
// copied, though every example is kept in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/data/jsonl_dataset.h"  // TokenExample

namespace zt {

// `vocab_size` > 0 checks every id (and label other than -100) against it.
Result<std::vector<TokenExample>> jsonl_examples_read(const std::string& path, int vocab_size);

// Whether `path` looks like JSON Lines (its first non-blank byte is '{'), not a token file.
bool jsonl_looks_like(const std::string& path);

}  // namespace zt
