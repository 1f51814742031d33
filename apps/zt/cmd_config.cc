// `zt config check FILE [--world-size N]`: the fully resolved config as JSON (DeepSpeed's key
// names, batch triad resolved, defaults filled), or the error and a non-zero exit.
#include <cstdio>

#include "cli_args.h"
#include "commands.h"
#include "zt/runtime/config.h"

namespace zt::cli {

int fail(const Status& status) {
  std::fprintf(stderr, "zt: error: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

namespace {

constexpr const char* kConfigUsage = R"(Usage: zt config check FILE [--world-size N]

Reads a DeepSpeed ds_config.json exactly as DeepSpeed would (keys, aliases, defaults, "auto"
rules, batch-size arithmetic for N data-parallel ranks) and prints it fully resolved as JSON.
Exits non-zero with one error line if the config is invalid.

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"--world-size", FlagKind::kValue, "data-parallel ranks to resolve the batch triad for (1)", "N"},
    {"--help", FlagKind::kSwitch, "this help"},
};

}  // namespace

int cmd_config(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s%s", kConfigUsage, usage_flags(kFlags).c_str());
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "check") {
    return fail(invalid_argument("zt config: unknown subcommand '{}'; use 'zt config check FILE'",
                                 args[0]));
  }
  auto parsed = parse_args("zt config check", kFlags, Args(args.begin() + 1, args.end()));
  if (!parsed) return fail(parsed.status());
  if (parsed->has("--help")) {
    std::printf("%s%s", kConfigUsage, usage_flags(kFlags).c_str());
    return 0;
  }
  if (parsed->positional.size() != 1) {
    return fail(invalid_argument("zt config check needs exactly one FILE, got {}",
                                 parsed->positional.size()));
  }
  int64_t world = 1;
  if (auto w = parsed->get("--world-size")) {
    auto v = parse_int("--world-size", *w, 1);
    if (!v) return fail(v.status());
    world = *v;
  }
  auto cfg = config_load(parsed->positional[0], static_cast<int>(world));
  if (!cfg) return fail(cfg.status());
  for (const auto& w : cfg->warnings) std::fprintf(stderr, "zt: warning: %s\n", w.c_str());
  if (!cfg->ignored_top_level_keys.empty()) {
    std::string keys;
    for (const auto& k : cfg->ignored_top_level_keys) keys += (keys.empty() ? "" : ", ") + k;
    std::fprintf(stderr, "zt: warning: unknown top-level keys ignored (as DeepSpeed does): %s\n",
                 keys.c_str());
  }
  std::printf("%s\n", config_to_json(*cfg).dump(2).c_str());
  return 0;
}

}  // namespace zt::cli
