// The machinery behind ds_config parsing (internal to src/zt/runtime): JSON text -> json with
// DeepSpeed's duplicate-key rule, typed field tables for the blocks, and one validator that
// turns a given block into a resolved one (defaults filled, DeepSpeed's output key names).
//
// Three kinds of block, as in DeepSpeed (reference §1):
//   kPydantic: DeepSpeedConfigModel (extra="forbid"): unknown key -> error with the nearest valid
//              key; a value equal to "auto" -> the default; alias ("stage3_x") or name accepted.
//   kStrict:   keyword arguments of a Python constructor (scheduler/optimizer params): unknown
//              key -> error (DeepSpeed: TypeError); "auto" -> error.
//   kPlain:    get_scalar_param dicts (fp16, aio, flops_profiler, ...): DeepSpeed ignores unknown
//              keys, so they become one warning each; "auto" -> error (DeepSpeed would take the
//              string literally and fail later).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt::config_detail {

using Json = nlohmann::json;

enum class FieldKind : unsigned char { kBool, kInt, kNumber, kString, kList, kObject, kAny };

// Field flags (bit set).
enum FieldFlag : unsigned {
  kFlagNone = 0,
  kNullable = 1u << 0,     // None accepted (Optional[...] in DeepSpeed)
  kNonNegative = 1u << 1,  // pydantic ge=0
  kPositive = 1u << 2,     // > 0 (ZeroTrain: zero would divide or never flush)
  kRequired = 1u << 3,     // no default (a required constructor argument)
  kNotActedOn = 1u << 4,   // parsed and kept, but ZeroTrain does not implement it yet
  kDeprecated = 1u << 5,   // DeepSpeed warns; mapped to its replacement by the block code
  kUpperCase = 1u << 6,    // string compared and stored upper-case (tag_validation)
};

struct FieldSpec {
  std::string_view name;   // DeepSpeed's field name
  std::string_view alias;  // pydantic alias (the name users usually write) or ""
  FieldKind kind;
  std::string_view default_json;  // JSON text of the default ("null" = None)
  unsigned flags = kFlagNone;
  std::string_view choices = "";  // "a|b|c" for strings with a fixed set of values
  // The key config_to_json writes: the alias when there is one (DeepSpeed's documented name).
  std::string_view out_name() const { return alias.empty() ? name : alias; }
};

enum class BlockKind : unsigned char { kPydantic, kStrict, kPlain };

struct BlockSpec {
  std::string_view path;  // "zero_optimization", "zero_optimization.offload_param", ...
  BlockKind kind;
  std::span<const FieldSpec> fields;
};

struct ResolvedBlock {
  Json values = Json::object();    // out_name -> resolved value, every field present
  std::vector<std::string> given;  // out_names of the fields the user gave (not "auto")
  bool was_given(std::string_view out_name) const;
};

// Validates `given` (must be an object; null means {}) against `spec`. Unknown keys of kPlain
// blocks and set kNotActedOn fields are appended to `warnings`.
Result<ResolvedBlock> block_resolve(const Json& given, const BlockSpec& spec,
                                    std::vector<std::string>& warnings);

// Converts one value to the field's kind with pydantic's lax rules (integral floats to int,
// "true"/"yes"/1 to bool). `what` names the key in messages ("zero_optimization.stage").
Result<Json> value_convert(const Json& v, const FieldSpec& f, std::string_view what);

bool value_is_auto(const Json& v);
// The error for "auto" outside the pydantic blocks.
Status auto_unresolved(std::string_view what);

// The nearest of `candidates` to `key` by edit distance, or "" when none is close.
std::string key_nearest(std::string_view key, const std::vector<std::string>& candidates);
// `{path}: unknown key "k"; did you mean "x"?` (or the list of valid keys when none is close).
Status unknown_key(std::string_view path, std::string_view key,
                   const std::vector<std::string>& candidates);

// JSON text (with comments and trailing commas) -> json. Duplicate keys in one object ->
// DeepSpeed's "Duplicate keys in DeepSpeed config: ['k']"; syntax errors name source, line and
// column.
Result<Json> json_text_parse(std::string_view text, std::string_view source);

// Python's repr of a list of strings: ['a', 'b'].
std::string py_str_list(const std::vector<std::string>& items);

}  // namespace zt::config_detail
