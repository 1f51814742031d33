// `zt eval`: a model's loss and perplexity on a token file or tokenised JSON Lines, exactly as
// transformers computes the loss for that input (tasks/lm_loss.h).
#include <chrono>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli_args.h"
#include "commands.h"
#include "model_args.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/core/file_io.h"
#include "zt/core/log.h"
#include "zt/data/jsonl_dataset.h"
#include "zt/data/jsonl_examples.h"
#include "zt/data/token_file.h"
#include "zt/tasks/lm_loss.h"
#include "zt/tasks/reward.h"

namespace zt::cli {
namespace {

constexpr const char* kUsage = R"(Usage: zt eval --model DIR|NAME --data FILE [options]

Prints the mean loss over every counted token of FILE and its perplexity. FILE is a token file
(cut into windows of --seq-len tokens, labels = inputs) or JSON Lines with `input_ids` and
optionally `labels` (-100: not counted), `attention_mask`, `token_type_ids`, or with `text`
(causal models: tokenized by --tokenizer or the model's tokenizer.json with its special
tokens, labels = inputs). --task causal
(default for decoders) predicts each next token; --task mlm (BERT) the labelled positions.

Options:
)";

std::vector<FlagSpec> flags() {
  std::vector<FlagSpec> f = model_flags();
  f.insert(f.end(), {
                        {"--data", FlagKind::kValue, "token file or JSON Lines", "FILE"},
                        {"--task", FlagKind::kValue,
                         "causal or mlm (default: the model's), sft (prompt/response JSON "
                         "Lines through the tokenizer: the response's loss) or reward "
                         "(prompt/chosen/rejected pairs: loss, accuracy, mean scores)",
                         "TASK"},
                        tokenizer_flag(),
                        {"--micro-batch", FlagKind::kValue, "rows per forward (default 8)", "B"},
                        {"--seq-len", FlagKind::kValue,
                         "token files: tokens per window (default: the model's context up to "
                         "1024)",
                         "T"},
                        {"--metrics-out", FlagKind::kValue, "write the result as JSON", "FILE"},
                        {"--logits-out", FlagKind::kValue,
                         "write the first micro-batch's input_ids, attention_mask and logits "
                         "(f32, real vocabulary) as safetensors, to compare with another "
                         "implementation",
                         "FILE"},
                        {"--help", FlagKind::kSwitch, "this help"},
                    });
  return f;
}

// Every sequence of every example of `ds`, tokenized, in file order.
Result<std::vector<TokenExample>> dataset_sequences(const JsonlDataset& ds) {
  std::vector<TokenExample> out;
  for (int64_t i = 0; i < ds.size(); ++i) {
    ZT_ASSIGN_OR_RETURN(JsonlExample e, ds.example(i));
    for (TokenExample& t : e.sequences) out.push_back(std::move(t));
  }
  return out;
}

// Whether the first record of a JSON Lines file has a `text` key (and no `input_ids`).
bool jsonl_first_has_text(const std::string& path) {
  auto f = JsonlFile::open(path);
  if (!f || f->size() == 0) return false;
  auto row = f->parse(0);
  return row && row->contains("text") && !row->contains("input_ids");
}

Result<std::vector<TokenExample>> token_file_windows(const std::string& path, int64_t seq,
                                                     int vocab) {
  ZT_ASSIGN_OR_RETURN(TokenFile file, TokenFile::open(path));
  std::vector<TokenExample> out;
  std::vector<uint32_t> buf(static_cast<size_t>(seq));
  for (int64_t at = 0; at + 2 <= file.num_tokens(); at += seq) {
    const int64_t n = std::min(seq, file.num_tokens() - at);
    buf.resize(static_cast<size_t>(n));
    file.read_tokens(at, buf);
    TokenExample e;
    for (int64_t i = 0; i < n; ++i) {
      if (buf[i] >= static_cast<uint32_t>(vocab)) {
        return invalid_argument("token file '{}': token {} at position {} is outside the model's "
                                "vocabulary [0, {})",
                                path, buf[i], at + i, vocab);
      }
      e.input_ids.push_back(static_cast<int32_t>(buf[i]));
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) return invalid_argument("token file '{}' has fewer than 2 tokens", path);
  return out;
}

// The logits of one batch as transformers returns them (B, T, vocab), with the inputs that made
// them, for tools/fixtures/hf/check_export.py-style comparisons.
Status logits_write(const std::string& path, nn::Transformer& model, nn::Context ctx,
                    const tasks::LmBatch& b) {
  const std::vector<float> all =
      tasks::lm_forward(model, std::move(ctx), b, tasks::LmOutput::kLogits).to_floats();
  const int64_t V = model.transformer_config().vocab_size;
  const int64_t Vp = static_cast<int64_t>(all.size()) / (b.B * b.T);
  std::vector<float> logits(static_cast<size_t>(b.B * b.T * V));
  for (int64_t i = 0; i < b.B * b.T; ++i) {
    std::copy(all.begin() + i * Vp, all.begin() + i * Vp + V, logits.begin() + i * V);
  }
  auto tensor = [](std::string name, DType dtype, std::vector<int64_t> shape, const void* data) {
    ckpt::TensorToWrite w;
    w.name = std::move(name);
    w.dtype = dtype;
    w.shape = std::move(shape);
    w.data = data;
    return w;
  };
  std::vector<ckpt::TensorToWrite> t = {
      tensor("input_ids", DType::i32, {b.B, b.T}, b.input_ids.data()),
      tensor("attention_mask", DType::i32, {b.B, b.T}, b.attention_mask.data()),
      tensor("logits", DType::f32, {b.B, b.T, V}, logits.data())};
  if (model.transformer_config().type_vocab > 0) {
    t.push_back(tensor("token_type_ids", DType::i32, {b.B, b.T}, b.token_type_ids.data()));
  }
  return ckpt::safetensors_write(path, t, {{"format", "pt"}}, "logits file").status();
}

}  // namespace

int cmd_eval(const Args& args) {
  auto parsed = parse_command("zt eval", kUsage, flags(), args);
  if (!parsed) return fail(parsed.status());
  if (!*parsed) return 0;  // --help
  const ParsedArgs& a = **parsed;
  auto data = a.get("--data");
  if (!data) return fail(invalid_argument("zt eval needs --data FILE"));
  auto micro = parse_int("--micro-batch", a.get("--micro-batch").value_or("8"), 1);
  if (!micro) return fail(micro.status());
  auto m = inference_model_open(a, "zt eval");
  if (!m) return fail(m.status());
  const nn::TransformerConfig& c = m->config();
  nn::Task task = c.task;
  const bool sft = a.get("--task") == std::optional<std::string>("sft");
  const bool reward = a.get("--task") == std::optional<std::string>("reward");
  if (c.task == nn::Task::kReward || reward) {
    // A reward model: pairwise loss, accuracy and mean scores over prompt/chosen/rejected pairs.
    if (c.task != nn::Task::kReward) {
      return fail(invalid_argument("--task reward: the model {} has no reward (value) head",
                                   *a.get("--model")));
    }
    if (!reward) {
      return fail(invalid_argument("--model {} is a reward model: evaluate it with --task reward "
                                   "on prompt/chosen/rejected JSON Lines",
                                   *a.get("--model")));
    }
    auto tok = model_tokenizer(a, m->choice, c.vocab_size);
    std::shared_ptr<const Tokenizer> tokenizer;
    if (tok) {
      tokenizer = *tok;
    } else if (a.has("--tokenizer")) {
      return fail(tok.status());
    }
    auto seq = parse_int("--seq-len", a.get("--seq-len").value_or(std::to_string(c.max_positions)), 2);
    if (!seq) return fail(seq.status());
    tasks::RewardOptions ro;
    ro.seq_len = *seq;
    ro.micro_batch = 1;  // every pair counted (a batch of B drops a last partial batch)
    ro.shuffle = false;
    ro.vocab_size = c.vocab_size;
    ro.eos_id = model_eos_id(m->choice.source_dir);
    auto rd = tasks::RewardData::open(*data, tokenizer, ro);
    if (!rd) return fail(rd.status());
    auto mt = tasks::reward_eval(m->model(), m->weights->context(), *rd, 0);
    if (!mt) return fail(mt.status());
    std::printf("loss %.6f  accuracy %.4f  chosen score %.4f  rejected score %.4f  over %lld "
                "pair(s)\n",
                mt->loss, mt->accuracy, mt->chosen_score, mt->rejected_score,
                static_cast<long long>(mt->pairs));
    if (auto out = a.get("--metrics-out")) {
      const nlohmann::json j = {{"model", *a.get("--model")}, {"data", *data},
                                {"task", "reward"},           {"loss", mt->loss},
                                {"accuracy", mt->accuracy},   {"chosen_score", mt->chosen_score},
                                {"rejected_score", mt->rejected_score}, {"pairs", mt->pairs}};
      if (Status s = file_write_atomic(*out, j.dump(2) + "\n", "eval metrics"); !s.is_ok()) {
        return fail(s);
      }
    }
    return 0;
  }
  if (auto t = a.get("--task"); t && !sft) {
    if (*t != "causal" && *t != "mlm") {
      return fail(invalid_argument("--task must be causal, mlm, sft or reward, got '{}'", *t));
    }
    task = *t == "causal" ? nn::Task::kCausalLM : nn::Task::kMaskedLM;
    if (task != c.task) {
      return fail(invalid_argument("--task {}: the model {} is a {} model", *t, *a.get("--model"),
                                   c.task == nn::Task::kCausalLM ? "causal" : "masked-LM"));
    }
  }
  Result<std::vector<TokenExample>> examples = invalid_argument("");
  if (sft) {
    // Prompt/response records as zt train --task sft makes them: the loss over the response
    // and eos tokens (tasks/sft.h), every example counted.
    if (c.task != nn::Task::kCausalLM) {
      return fail(invalid_argument("--task sft: the model {} is a masked-LM model", *a.get("--model")));
    }
    auto tok = model_tokenizer(a, m->choice, c.vocab_size);
    std::shared_ptr<const Tokenizer> tokenizer;
    if (tok) {
      tokenizer = *tok;
    } else if (a.has("--tokenizer")) {
      return fail(tok.status());
    }
    auto seq = parse_int("--seq-len", a.get("--seq-len").value_or(std::to_string(c.max_positions)), 2);
    if (!seq) return fail(seq.status());
    JsonlDatasetOptions o;
    o.seq_len = *seq;
    o.order = SampleOrder::kSequential;
    o.vocab_size = c.vocab_size;
    o.eos_id = model_eos_id(m->choice.source_dir);
    auto ds = JsonlDataset::open(*data, tokenizer, o);
    if (!ds) return fail(ds.status());
    examples = dataset_sequences(*ds);
    task = nn::Task::kCausalLM;
  } else if (jsonl_looks_like(*data) && jsonl_first_has_text(*data)) {
    // `text` records through the tokenizer, as transformers evaluates tokenizer(text): the ids
    // with the tokenizer's own special tokens, labels = inputs, no end-of-text appended.
    if (task == nn::Task::kMaskedLM) {
      return fail(invalid_argument(
          "{}: `text` records carry no labels for masked-LM evaluation; give `input_ids` with "
          "`labels`, or evaluate during training with zt train --task mlm --eval-data {}",
          *data, *data));
    }
    auto tok = model_tokenizer(a, m->choice, c.vocab_size);
    if (!tok) return fail(tok.status());
    auto seq = parse_int("--seq-len", a.get("--seq-len").value_or(std::to_string(c.max_positions)), 2);
    if (!seq) return fail(seq.status());
    JsonlDatasetOptions o;
    o.format = JsonlFormat::kText;
    o.seq_len = *seq;
    o.text_eos = false;
    o.order = SampleOrder::kSequential;
    o.vocab_size = c.vocab_size;
    auto ds = JsonlDataset::open(*data, *tok, o);
    if (!ds) return fail(ds.status());
    if (ds->truncated() > 0) {
      ZT_LOG_WARN("{}: {} record(s) longer than --seq-len {} were cut from the right", *data,
                  ds->truncated(), *seq);
    }
    examples = dataset_sequences(*ds);
  } else if (jsonl_looks_like(*data)) {
    examples = jsonl_examples_read(*data, c.vocab_size);
  } else {
    auto seq = parse_int("--seq-len",
                         a.get("--seq-len").value_or(std::to_string(
                             std::min<int64_t>(c.max_positions, 1024))),
                         2);
    if (!seq) return fail(seq.status());
    examples = token_file_windows(*data, *seq, c.vocab_size);
  }
  if (!examples) return fail(examples.status());
  if (task == nn::Task::kMaskedLM) {
    for (size_t i = 0; i < examples->size(); ++i) {
      if ((*examples)[i].labels.empty()) {
        return fail(invalid_argument("{}: example {} has no 'labels': masked-LM evaluation "
                                     "counts the labelled positions only",
                                     *data, i + 1));
      }
    }
  }
  for (size_t i = 0; i < examples->size(); ++i) {
    if (static_cast<int64_t>((*examples)[i].input_ids.size()) > c.max_positions) {
      return fail(invalid_argument("{}: example {} has {} tokens, more than the model's {} "
                                   "positions",
                                   *data, i + 1, (*examples)[i].input_ids.size(), c.max_positions));
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  tasks::LossSum total;
  const auto batches = tasks::lm_batches(*examples, *micro, task);
  auto last_report = t0;
  // Masked LM: the share of counted positions whose most likely token is the label.
  int64_t correct = 0;
  const bool accuracy = task == nn::Task::kMaskedLM;
  for (size_t i = 0; i < batches.size(); ++i) {
    tasks::lm_loss_accumulate(m->model(), m->weights->context(), batches[i], total);
    if (accuracy) {
      const tasks::LmBatch& b = batches[i];
      const std::vector<float> logits =
          tasks::lm_forward(m->model(), m->weights->context(), b, tasks::LmOutput::kLogits)
              .to_floats();
      const int64_t Vp = static_cast<int64_t>(logits.size()) / (b.B * b.T);
      for (int64_t p = 0; p < b.B * b.T; ++p) {
        if (b.targets[p] < 0) continue;
        const float* row = logits.data() + p * Vp;
        int64_t best = 0;
        for (int64_t v = 1; v < c.vocab_size; ++v) best = row[v] > row[best] ? v : best;
        correct += best == b.targets[p];
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report > std::chrono::seconds(5) && i + 1 < batches.size()) {
      last_report = now;
      std::fprintf(stderr, "eval: batch %zu/%zu, loss so far %.4f over %lld tokens\n", i + 1,
                   batches.size(), total.mean(), static_cast<long long>(total.count));
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (total.count == 0) return fail(invalid_argument("{}: no position has a label to count", *data));
  const double loss = total.mean(), ppl = std::exp(loss);
  const double acc = static_cast<double>(correct) / static_cast<double>(total.count);
  std::printf("loss %.6f  perplexity %.4f  over %lld tokens in %zu example(s)", loss, ppl,
              static_cast<long long>(total.count), examples->size());
  if (accuracy) std::printf("  masked-token accuracy %.4f", acc);
  std::printf("\n");
  std::fprintf(stderr, "evaluated in %.2f s\n", secs);
  if (auto path = a.get("--logits-out")) {
    if (Status s = logits_write(*path, m->model(), m->weights->context(), batches[0]); !s.is_ok()) {
      return fail(s);
    }
  }
  if (auto out = a.get("--metrics-out")) {
    nlohmann::json j = {{"model", *a.get("--model")},
                              {"data", *data},
                              {"task", sft ? "sft" : task == nn::Task::kCausalLM ? "causal" : "mlm"},
                              {"loss", loss},
                              {"perplexity", ppl},
                              {"tokens", total.count},
                              {"examples", examples->size()}};
    if (accuracy) j["accuracy"] = acc;
    if (Status s = file_write_atomic(*out, j.dump(2) + "\n", "eval metrics"); !s.is_ok()) {
      return fail(s);
    }
  }
  return 0;
}

}  // namespace zt::cli
