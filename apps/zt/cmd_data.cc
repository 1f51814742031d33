// `zt data prepare FILES... -o OUT`: text files (or folders) into a token file (byte-level).
#include <cstdio>

#include "cli_args.h"
#include "commands.h"
#include "zt/data/prepare.h"

namespace zt::cli {
namespace {

constexpr const char* kDataUsage = R"(Usage: zt data prepare [FILE|DIR]... -o OUT.bin

Concatenates text files (folders: every regular file inside, sorted) with an end-of-text token
between files, encodes them with the byte-level tokenizer (vocabulary 257) and writes an llm.c
token file. With no inputs, uses the default corpus (the license texts in
/usr/share/common-licenses that every Debian machine carries).

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"-o", FlagKind::kValue, "output token file", "OUT"},
    {"--output", FlagKind::kValue, "same as -o", "OUT"},
    {"--help", FlagKind::kSwitch, "this help"},
};

}  // namespace

int cmd_data(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s%s", kDataUsage, usage_flags(kFlags).c_str());
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "prepare") {
    return fail(invalid_argument("zt data: unknown subcommand '{}'; use 'zt data prepare'", args[0]));
  }
  auto parsed = parse_args("zt data prepare", kFlags, Args(args.begin() + 1, args.end()));
  if (!parsed) return fail(parsed.status());
  if (parsed->has("--help")) {
    std::printf("%s%s", kDataUsage, usage_flags(kFlags).c_str());
    return 0;
  }
  auto out = parsed->get("-o");
  if (!out) out = parsed->get("--output");
  if (!out) return fail(invalid_argument("zt data prepare needs an output file: -o OUT.bin"));
  std::vector<std::string> inputs = parsed->positional;
  if (inputs.empty()) {
    auto def = default_corpus_paths();
    if (!def) return fail(def.status());
    inputs = *def;
  }
  PrepareOptions opts;
  opts.on_file = [](const PrepareProgress& p) {
    std::fprintf(stderr, "[%lld/%lld] %.*s (%lld bytes)\n", static_cast<long long>(p.file_index + 1),
                 static_cast<long long>(p.num_files), static_cast<int>(p.path.size()),
                 p.path.data(), static_cast<long long>(p.bytes));
  };
  auto summary = data_prepare(inputs, *out, opts);
  if (!summary) return fail(summary.status());
  std::printf("wrote %s: %lld tokens from %zu files (%lld bytes)\n", summary->output.c_str(),
              static_cast<long long>(summary->tokens), summary->files.size(),
              static_cast<long long>(summary->bytes));
  return 0;
}

}  // namespace zt::cli
