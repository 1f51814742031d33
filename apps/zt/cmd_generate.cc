// `zt generate`: text (or token ids) from a model, with a KV cache, batched, on the CPU or a GPU.
// Prints each row's continuation on stdout and the speed on stderr.
#include <chrono>
#include <climits>
#include <filesystem>
#include <cstdio>
#include <sstream>

#include "cli_args.h"
#include "commands.h"
#include "model_args.h"
#include "zt/core/file_io.h"
#include "zt/core/json_limits.h"
#include "zt/data/tokenizer/byte_tokenizer.h"
#include "zt/nn/generate.h"

namespace zt::cli {
namespace {

constexpr const char* kUsage = R"(Usage: zt generate --model DIR|NAME (--prompt TEXT | --prompt-ids IDS) [options]

Generates from a causal language model with a KV cache: greedy by default, sampled with
--temperature > 0 (then --top-k and --top-p filter as transformers does). --prompt is encoded
with the model's tokenizer (--tokenizer; by default the model directory's tokenizer.json, or
bytes for a named size) with its special tokens, as transformers' pipelines do, and the prompt
and continuation are printed as text (special tokens left out); --prompt-ids takes token ids,
comma-separated, and prints the new ids.
--batch N decodes N copies of the prompt together (one forward per step for all rows).

Options:
)";

std::vector<FlagSpec> flags() {
  std::vector<FlagSpec> f = model_flags();
  f.insert(f.end(),
           {
               {"--prompt", FlagKind::kValue, "prompt text", "TEXT"},
               tokenizer_flag(),
               {"--prompt-ids", FlagKind::kValue, "prompt token ids, e.g. 15496,11,995", "IDS"},
               {"--max-new-tokens", FlagKind::kValue, "tokens to generate (default 64)", "N"},
               {"--temperature", FlagKind::kValue, "0 (default): greedy; > 0: sample", "T"},
               {"--top-k", FlagKind::kValue, "sample from the K most likely (default 50; 0: all)",
                "K"},
               {"--top-p", FlagKind::kValue, "sample from the top-P probability mass (default 1)",
                "P"},
               {"--seed", FlagKind::kValue, "sampling seed (default 42)", "N"},
               {"--batch", FlagKind::kValue, "rows decoded together (default 1)", "N"},
               {"--eos-id", FlagKind::kValue,
                "stop a row after this token id (default: eos_token_id of the model directory's "
                "generation_config.json, as transformers; -1: never stop)",
                "ID"},
               {"--no-kv-cache", FlagKind::kSwitch,
                "recompute the whole sequence for every token (slow; a check)"},
               {"--help", FlagKind::kSwitch, "this help"},
           });
  return f;
}

Result<std::vector<int32_t>> ids_parse(const std::string& text, int vocab) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    ZT_ASSIGN_OR_RETURN(int64_t v, parse_int("--prompt-ids", item, 0));
    if (v >= vocab) {
      return invalid_argument("--prompt-ids: id {} is outside the model's vocabulary [0, {})", v,
                              vocab);
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return invalid_argument("--prompt-ids is empty");
  return ids;
}

Result<float> float_flag(const ParsedArgs& a, const char* flag, float def, float lo, float hi) {
  auto v = a.get(flag);
  if (!v) return def;
  char* end = nullptr;
  const float f = std::strtof(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || !(f >= lo && f <= hi)) {
    return invalid_argument("{} must be a number in [{}, {}], got '{}'", flag, lo, hi, *v);
  }
  return f;
}

// transformers' default stop tokens: eos_token_id (an id or a list) of generation_config.json
// beside the model, else none.
Result<std::vector<int32_t>> eos_from_generation_config(const std::string& dir) {
  const std::string path = dir + "/generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::vector<int32_t>{};
  ZT_ASSIGN_OR_RETURN(std::string text, file_read_all(path, "generation config"));
  ZT_ASSIGN_OR_RETURN(nlohmann::json j, json_parse_checked(text, path));
  std::vector<int32_t> ids;
  const nlohmann::json eos = j.is_object() ? j.value("eos_token_id", nlohmann::json()) : nullptr;
  for (const nlohmann::json& v : eos.is_array() ? eos : nlohmann::json::array({eos})) {
    if (v.is_null()) continue;
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return invalid_argument("{}: eos_token_id must be a token id or a list of them, got {}",
                              path, eos.dump());
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace

int cmd_generate(const Args& args) {
  auto parsed = parse_command("zt generate", kUsage, flags(), args);
  if (!parsed) return fail(parsed.status());
  if (!*parsed) return 0;  // --help
  const ParsedArgs& a = **parsed;
  if (a.has("--prompt") == a.has("--prompt-ids")) {
    return fail(invalid_argument("zt generate needs one of --prompt TEXT or --prompt-ids IDS"));
  }
  auto int_flag = [&](const char* flag, int64_t def, int64_t min) -> Result<int64_t> {
    auto v = a.get(flag);
    return v ? parse_int(flag, *v, min) : Result<int64_t>(def);
  };
  auto max_new = int_flag("--max-new-tokens", 64, 1);
  auto top_k = int_flag("--top-k", 50, 0);
  auto seed = int_flag("--seed", 42, 0);
  auto batch = int_flag("--batch", 1, 1);
  auto eos = int_flag("--eos-id", -1, -1);
  auto temperature = float_flag(a, "--temperature", 0.0f, 0.0f, 100.0f);
  auto top_p = float_flag(a, "--top-p", 1.0f, 0.0f, 1.0f);
  for (const Status& s : {max_new.status(), top_k.status(), seed.status(), batch.status(),
                          eos.status(), temperature.status(), top_p.status()}) {
    if (!s.is_ok()) return fail(s);
  }
  auto m = inference_model_open(a, "zt generate");
  if (!m) return fail(m.status());
  const nn::TransformerConfig& c = m->config();
  if (c.task != nn::Task::kCausalLM) {
    return fail(invalid_argument("--model {}: a {} model does not generate text",
                                 *a.get("--model"),
                                 c.task == nn::Task::kReward ? "reward (value-head)" : "masked-LM"));
  }
  std::vector<int32_t> prompt;
  const bool text_prompt = a.has("--prompt");
  std::shared_ptr<const Tokenizer> tok;
  if (auto p = a.get("--prompt")) {
    auto t = model_tokenizer(a, m->choice, c.vocab_size);
    if (!t) return fail(t.status());
    tok = *t;
    auto ids = tok->encode(*p, true);
    if (!ids) return fail(ids.status().with_context("--prompt"));
    prompt = std::move(*ids);
    if (prompt.empty()) return fail(invalid_argument("--prompt is empty"));
  } else {
    auto ids = ids_parse(*a.get("--prompt-ids"), c.vocab_size);
    if (!ids) return fail(ids.status());
    prompt = *ids;
  }
  if (static_cast<int64_t>(prompt.size()) >= c.max_positions) {
    return fail(invalid_argument("the prompt's {} tokens fill the model's context of {}",
                                 prompt.size(), c.max_positions));
  }
  nn::GenerateOptions g{.max_new_tokens = static_cast<int>(*max_new),
                        .sampling = *temperature > 0 ? nn::Sampling::kSample : nn::Sampling::kGreedy,
                        .top_k = static_cast<int>(*top_k),
                        .top_p = *top_p,
                        .temperature = *temperature,
                        .seed = static_cast<uint64_t>(*seed),
                        .vocab_size = c.vocab_size,
                        .max_seq_len = static_cast<int>(c.max_positions),
                        .num_layers = c.n_layer,
                        .eos_token_ids = {},
                        .cache = a.has("--no-kv-cache") ? nn::KvCacheUse::kOff : nn::KvCacheUse::kOn};
  if (a.has("--eos-id")) {
    if (*eos >= 0) g.eos_token_ids = {static_cast<int32_t>(*eos)};
  } else if (!m->choice.source_dir.empty()) {
    auto ids = eos_from_generation_config(m->choice.source_dir);
    if (!ids) return fail(ids.status());
    g.eos_token_ids = *ids;
  }
  const std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(*batch), prompt);
  const auto t0 = std::chrono::steady_clock::now();
  auto out = nn::generate_batch(m->model(), m->weights->context(), prompts, g);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t made = 0;
  for (const auto& row : out) {
    made += static_cast<int64_t>(row.size());
    if (text_prompt) {  // the prompt and its continuation as text
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), row.begin(), row.end());
      std::printf("%s\n", tok->decode(all, true).c_str());
    } else {
      std::string line;
      for (int32_t t : row) {
        if (!line.empty()) line += ' ';
        line += std::to_string(t);
      }
      std::printf("%s\n", line.c_str());
    }
  }
  std::fprintf(stderr, "generated %lld tokens (%lld row(s), prompt %zu) in %.3f s: %.1f tokens/s\n",
               static_cast<long long>(made), static_cast<long long>(*batch), prompt.size(), secs,
               made / std::max(secs, 1e-9));
  return 0;
}

}  // namespace zt::cli
