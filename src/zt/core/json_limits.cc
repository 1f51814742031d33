#include "zt/core/json_limits.h"

namespace zt {

Status json_nesting_check(std::string_view text, std::string_view source, int max_depth) {
  int depth = 0;
  bool in_string = false;
  int64_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) {
        return invalid_argument(
            "{}: JSON nested more than {} levels deep (line {}); no ZeroTrain file needs that "
            "many: the file is damaged or not what it should be",
            source, max_depth, line);
      }
    } else if (c == '}' || c == ']') {
      if (depth > 0) --depth;
    }
  }
  return Status::ok();
}

Result<nlohmann::json> json_parse_checked(std::string_view text, std::string_view source) {
  ZT_RETURN_IF_ERROR(json_nesting_check(text, source));
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("{}: not valid JSON: {}", source, e.what());
  }
}

}  // namespace zt
