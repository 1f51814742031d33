// `zt tokenize --tokenizer FILE [--add-special-tokens] [--decode]`: JSON Lines in on stdin, one
// JSON array of ids (or, with --decode, one JSON string) out per line.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_args.h"
#include "commands.h"
#include "zt/data/tokenizer/tokenizer.h"

namespace zt::cli {
namespace {

constexpr const char* kUsage = R"(Usage: zt tokenize --tokenizer FILE|DIR|bytes [--add-special-tokens] [--decode]

Reads JSON Lines on stdin and writes one line per input line on stdout:
  encode (default): each line is a JSON string, or an object with "text"; the output line is a
                    JSON array of token ids.
  --decode:         each line is a JSON array of ids (or an object with "ids" or "input_ids");
                    the output line is the decoded text as a JSON string.
The ids are the ones Hugging Face `tokenizers` gives for the same tokenizer.json (encode with
add_special_tokens as given; decode with skip_special_tokens when --skip-special-tokens).

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"--tokenizer", FlagKind::kValue, "tokenizer.json, a model folder holding one, or 'bytes'", "PATH"},
    {"--add-special-tokens", FlagKind::kSwitch, "add the post-processor's tokens (BOS, [CLS] ... [SEP])"},
    {"--decode", FlagKind::kSwitch, "ids in, text out"},
    {"--skip-special-tokens", FlagKind::kSwitch, "with --decode: leave special tokens out"},
    {"--help", FlagKind::kSwitch, "this help"},
};

Status run(const ParsedArgs& a) {
  auto name = a.get("--tokenizer");
  if (!name) return invalid_argument("zt tokenize needs --tokenizer FILE (a tokenizer.json, a model folder, or 'bytes')");
  ZT_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tok, tokenizer_load(*name));
  const bool decode = a.has("--decode");
  const bool add_special = a.has("--add-special-tokens");
  const bool skip_special = a.has("--skip-special-tokens");
  std::string line, out;
  std::vector<int32_t> ids;
  int64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      return invalid_argument("stdin:{}: an empty line; each line must be a JSON value", line_no);
    }
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      return invalid_argument("stdin:{}: not valid JSON (or not valid UTF-8)", line_no);
    }
    out.clear();
    if (!decode) {
      const nlohmann::json* text = &j;
      if (j.is_object()) {
        auto it = j.find("text");
        if (it == j.end()) return invalid_argument("stdin:{}: the object has no \"text\" key", line_no);
        text = &*it;
      }
      if (!text->is_string()) {
        return invalid_argument("stdin:{}: expected a JSON string or {{\"text\": string}}", line_no);
      }
      ids.clear();
      Status st = tok->encode_append(text->get_ref<const std::string&>(), add_special, ids);
      if (!st.is_ok()) return st.with_context(fmt::format("stdin:{}: ", line_no));
      out.push_back('[');
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out.push_back(',');
        out += std::to_string(ids[i]);
      }
      out += "]\n";
    } else {
      const nlohmann::json* arr = &j;
      if (j.is_object()) {
        auto it = j.find("ids");
        if (it == j.end()) it = j.find("input_ids");
        if (it == j.end()) {
          return invalid_argument("stdin:{}: the object has no \"ids\" or \"input_ids\" key", line_no);
        }
        arr = &*it;
      }
      if (!arr->is_array()) return invalid_argument("stdin:{}: expected a JSON array of ids", line_no);
      ids.clear();
      for (size_t i = 0; i < arr->size(); ++i) {
        const auto& v = (*arr)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok->vocab_size()) {
          return invalid_argument("stdin:{}: id [{}] = {} is not an id of this tokenizer (0 .. {})",
                                  line_no, i, v.dump(), tok->vocab_size() - 1);
        }
        ids.push_back(v.get<int32_t>());
      }
      out = nlohmann::json(tok->decode(ids, skip_special))
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out.push_back('\n');
    }
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) {
      return io_error("writing the standard output failed");
    }
  }
  return Status::ok();
}

}  // namespace

int cmd_tokenize(const Args& args) {
  auto parsed = parse_command("zt tokenize", kUsage, kFlags, args);
  if (!parsed) return fail(parsed.status());
  if (!parsed->has_value()) return 0;
  Status st = run(**parsed);
  if (!st.is_ok()) return fail(st);
  return 0;
}

}  // namespace zt::cli
