// Limits every JSON reader of ZeroTrain applies before parsing (ds_config.json, config.json,
// tokenizer.json, safetensors headers, JSON Lines, checkpoint metadata): a document nested deeper
// than kJsonMaxDepth is refused with one line, instead of exhausting the stack of a recursive
// parser or destructor (100,000 levels crashed the config reader). No real file comes close.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "zt/core/status.h"

namespace zt {

constexpr int kJsonMaxDepth = 256;

// Scans `text` (brackets outside strings) and refuses nesting deeper than max_depth, naming
// `source` and the line where the limit is crossed.
Status json_nesting_check(std::string_view text, std::string_view source,
                          int max_depth = kJsonMaxDepth);

// json_nesting_check, then a parse that returns a syntax error as one line naming `source` (no
// exception escapes).
Result<nlohmann::json> json_parse_checked(std::string_view text, std::string_view source);

}  // namespace zt
