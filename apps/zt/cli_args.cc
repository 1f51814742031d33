#include "cli_args.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace zt::cli {

std::optional<std::string> ParsedArgs::get(const std::string& flag) const {
  auto it = values.find(flag);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Result<ParsedArgs> parse_args(const std::string& command, const std::vector<FlagSpec>& specs,
                              const std::vector<std::string>& args) {
  ParsedArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-' || a == "-") {
      out.positional.push_back(a);
      continue;
    }
    std::string name = a, value;
    bool inline_value = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    auto it = std::find_if(specs.begin(), specs.end(),
                           [&](const FlagSpec& s) { return s.name == name; });
    if (it == specs.end()) {
      std::string best;
      size_t best_d = 4;
      for (const auto& s : specs) {
        size_t d = edit_distance(name, s.name);
        if (d < best_d) {
          best_d = d;
          best = s.name;
        }
      }
      return invalid_argument("{}: unknown option '{}'{}; see '{} --help'", command, name,
                              best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best),
                              command);
    }
    if (it->kind == FlagKind::kSwitch) {
      if (inline_value) return invalid_argument("{}: option '{}' takes no value", command, name);
      out.values[name] = "";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) {
        return invalid_argument("{}: option '{}' needs a value ({})", command, name,
                                it->value_name);
      }
      value = args[++i];
    }
    out.values[name] = value;
  }
  return out;
}

Result<std::optional<ParsedArgs>> parse_command(const std::string& command, const char* usage,
                                                const std::vector<FlagSpec>& specs,
                                                const std::vector<std::string>& args) {
  ZT_ASSIGN_OR_RETURN(ParsedArgs a, parse_args(command, specs, args));
  if (a.has("--help")) {
    std::printf("%s%s", usage, usage_flags(specs).c_str());
    return std::optional<ParsedArgs>();
  }
  if (!a.positional.empty()) {
    return invalid_argument("{}: unexpected argument '{}'", command, a.positional[0]);
  }
  return std::optional<ParsedArgs>(std::move(a));
}

std::string usage_flags(const std::vector<FlagSpec>& specs) {
  std::string s;
  for (const auto& f : specs) {
    std::string left = f.kind == FlagKind::kValue ? f.name + " " + f.value_name : f.name;
    s += fmt::format("  {:<28} {}\n", left, f.help);
  }
  return s;
}

Result<int64_t> parse_int(const std::string& flag, const std::string& value, int64_t min_value) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0') {
    return invalid_argument("{} expects an integer, got '{}'", flag, value);
  }
  if (errno == ERANGE) {
    return invalid_argument("{} {} is out of range (at most {})", flag, value, INT64_MAX);
  }
  if (v < min_value) return invalid_argument("{} must be at least {}, got {}", flag, min_value, v);
  return static_cast<int64_t>(v);
}

}  // namespace zt::cli
