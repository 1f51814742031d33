// `zt data prepare INPUTS... -o OUT`: text files, JSON Lines (or folders of them, plain, .gz or
// .zst) into a token file, encoded in parallel with a tokenizer (prepare.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli_args.h"
#include "commands.h"
#include "progress.h"
#include "zt/data/prepare.h"
#include "zt/data/tokenizer/tokenizer.h"

namespace zt::cli {
namespace {

constexpr const char* kDataUsage =
    R"(Usage: zt data prepare [--tokenizer FILE|DIR|bytes] [FILE|DIR]... -o OUT.bin

Encodes documents with a tokenizer and writes an llm.c token file (uint16 tokens when the
vocabulary fits, else uint32), with the tokenizer's end-of-text token between documents.
Documents: a whole text file, or each line of a JSON Lines file (its "text" field). Folders mean
every regular file inside, sorted; .gz and .zst files are decompressed. With no inputs, uses the
default corpus (the license texts in /usr/share/common-licenses that every Debian machine
carries). The output is the same for any --workers.

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"-o", FlagKind::kValue, "output token file", "OUT"},
    {"--output", FlagKind::kValue, "same as -o", "OUT"},
    {"--tokenizer", FlagKind::kValue,
     "bytes (default: byte-level, vocabulary 257), a tokenizer.json, or a model folder holding "
     "one",
     "FILE|DIR|bytes"},
    {"--format", FlagKind::kValue,
     "text (a file is a document) or jsonl (a line is a document); default: by name, "
     "*.jsonl/*.json[.gz|.zst] are jsonl",
     "FMT"},
    {"--text-key", FlagKind::kValue, "jsonl: the field holding the text (default text)", "KEY"},
    {"--append-eos", FlagKind::kSwitch,
     "end-of-text after every document, the last too (default: between documents)"},
    {"--workers", FlagKind::kValue, "encoding threads (default: the number of cores)", "N"},
    {"--val-fraction", FlagKind::kValue,
     "send this share of documents (evenly spread) to a validation file, 0 <= F < 1", "F"},
    {"--val-output", FlagKind::kValue,
     "validation file (default: OUT with _val before the extension)", "PATH"},
    {"--skip-bad", FlagKind::kSwitch,
     "skip and count bad documents (invalid UTF-8, bad JSON, missing or non-string key) instead "
     "of stopping at the first"},
    {"--help", FlagKind::kSwitch, "this help"},
};

double parse_fraction(const std::string& flag, const std::string& value, Status& status) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno == ERANGE || !(v >= 0 && v < 1)) {
    status = invalid_argument("{} expects a number in [0, 1), got '{}'", flag, value);
  }
  return v;
}

// One line on stderr: redrawn in place on a terminal, every ~5 s otherwise.
class PrepareProgressLine {
 public:
  PrepareProgressLine() : tty_(isatty(STDERR_FILENO) != 0) {}
  void update(const PrepareProgress& p) {
    const double every = tty_ ? 0.2 : 5.0;
    if (p.seconds - last_ < every) return;
    last_ = p.seconds;
    const double mb = static_cast<double>(p.bytes) / 1e6;
    const std::string line = fmt::format(
        "data prepare: file {}/{} | {:.1f} MB read | {:.1f} MB/s | {} documents | {} tokens{} | "
        "{}",
        p.file_index + 1, p.num_files, mb, mb / std::max(p.seconds, 1e-9), p.documents, p.tokens,
        p.skipped > 0 ? fmt::format(" | {} skipped", p.skipped) : std::string(),
        format_duration(p.seconds));
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\n");
  }

 private:
  bool tty_;
  bool drawn_ = false;
  double last_ = 0;
};

}  // namespace

int cmd_data(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("%s%s", kDataUsage, usage_flags(kFlags).c_str());
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "prepare") {
    return fail(
        invalid_argument("zt data: unknown subcommand '{}'; use 'zt data prepare'", args[0]));
  }
  auto parsed = parse_args("zt data prepare", kFlags, Args(args.begin() + 1, args.end()));
  if (!parsed) return fail(parsed.status());
  const ParsedArgs& a = *parsed;
  if (a.has("--help")) {
    std::printf("%s%s", kDataUsage, usage_flags(kFlags).c_str());
    return 0;
  }
  auto out = a.get("-o");
  if (!out) out = a.get("--output");
  if (!out) return fail(invalid_argument("zt data prepare needs an output file: -o OUT.bin"));

  PrepareOptions opts;
  const std::string tokenizer_name = a.get("--tokenizer").value_or("bytes");
  auto tokenizer = tokenizer_load(tokenizer_name);
  if (!tokenizer) return fail(tokenizer.status().with_context("--tokenizer: "));
  opts.tokenizer = *tokenizer;
  if (auto f = a.get("--format")) {
    if (*f == "text") {
      opts.format = DocumentFormat::kText;
    } else if (*f == "jsonl") {
      opts.format = DocumentFormat::kJsonl;
    } else {
      return fail(invalid_argument("--format must be text or jsonl, got '{}'", *f));
    }
  }
  if (auto k = a.get("--text-key")) {
    if (k->empty()) return fail(invalid_argument("--text-key must name a field, got ''"));
    opts.text_key = *k;
  }
  if (a.has("--append-eos")) opts.eos = EosPlacement::kAfterEach;
  if (a.has("--skip-bad")) opts.bad = BadDocuments::kSkip;
  if (auto w = a.get("--workers")) {
    auto n = parse_int("--workers", *w, 1);
    if (!n) return fail(n.status());
    opts.workers = static_cast<int>(std::min<int64_t>(*n, 1024));
  }
  if (auto f = a.get("--val-fraction")) {
    Status s;
    opts.val_fraction = parse_fraction("--val-fraction", *f, s);
    if (!s.is_ok()) return fail(s);
  }
  if (auto v = a.get("--val-output")) {
    if (opts.val_fraction == 0) {
      return fail(
          invalid_argument("--val-output needs --val-fraction F (the share to send there)"));
    }
    opts.val_output = *v;
  }

  std::vector<std::string> inputs = a.positional;
  if (inputs.empty()) {
    auto def = default_corpus_paths();
    if (!def) return fail(def.status());
    inputs = *def;
  }
  PrepareProgressLine line;
  opts.on_progress = [&line](const PrepareProgress& p) { line.update(p); };
  auto summary = data_prepare(inputs, *out, opts);
  line.finish();
  if (!summary) return fail(summary.status());
  const PrepareSummary& s = *summary;
  const double mb = static_cast<double>(s.bytes) / 1e6;
  std::printf("wrote %s: %lld tokens, %lld documents from %zu files\n", s.output.c_str(),
              static_cast<long long>(s.tokens), static_cast<long long>(s.documents),
              s.files.size());
  std::printf("  tokenizer %s, %lld bytes read, %lld text bytes, %.4f tokens/byte\n",
              s.tokenizer.c_str(), static_cast<long long>(s.bytes),
              static_cast<long long>(s.text_bytes),
              s.text_bytes > 0
                  ? static_cast<double>(s.tokens + s.val_tokens) / static_cast<double>(s.text_bytes)
                  : 0.0);
  std::printf("  %.2f s, %.1f MB/s, %d workers, %lld bad documents skipped\n", s.seconds,
              mb / std::max(s.seconds, 1e-9), s.workers, static_cast<long long>(s.skipped));
  if (!s.val_output.empty()) {
    std::printf("wrote %s: %lld tokens, %lld documents (validation)\n", s.val_output.c_str(),
                static_cast<long long>(s.val_tokens), static_cast<long long>(s.val_documents));
  }
  return 0;
}

}  // namespace zt::cli
