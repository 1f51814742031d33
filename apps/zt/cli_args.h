// A small command-line parser for `zt` subcommands: `--flag value`, `--flag=value`, boolean
// switches, and positional arguments. Unknown flags are errors that name the nearest known one.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "zt/core/status.h"

namespace zt::cli {

enum class FlagKind : unsigned char { kValue, kSwitch };

struct FlagSpec {
  std::string name;  // "--config"
  FlagKind kind = FlagKind::kValue;
  std::string help;
  std::string value_name = "VALUE";
};

struct ParsedArgs {
  std::map<std::string, std::string> values;  // flag -> value ("" for switches)
  std::vector<std::string> positional;
  bool has(const std::string& flag) const { return values.count(flag) != 0; }
  std::optional<std::string> get(const std::string& flag) const;
};

// `command` names the subcommand in error messages ("zt train").
Result<ParsedArgs> parse_args(const std::string& command, const std::vector<FlagSpec>& specs,
                              const std::vector<std::string>& args);
std::string usage_flags(const std::vector<FlagSpec>& specs);
// A command that takes flags only: parses `args`; with --help (which `specs` must list) prints
// `usage` and the flags and returns nullopt (the command then exits 0); a positional argument is
// an error naming it.
Result<std::optional<ParsedArgs>> parse_command(const std::string& command, const char* usage,
                                                const std::vector<FlagSpec>& specs,
                                                const std::vector<std::string>& args);
Result<int64_t> parse_int(const std::string& flag, const std::string& value, int64_t min_value);
// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace zt::cli
