#include "fuzz_targets.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/checkpoint/hf_weights.h"
#include "zt/checkpoint/unit_layout.h"
#include "zt/nn/hf/hf_config.h"
#include "zt/checkpoint/safetensors.h"
#include "zt/data/jsonl_dataset.h"
#include "zt/data/token_file.h"
#include "zt/data/tokenizer/byte_tokenizer.h"
#include "zt/data/tokenizer/hf_tokenizer.h"
#include "zt/launcher/hostfile.h"
#include "zt/runtime/config.h"

namespace zt::fuzz {
namespace {

std::string_view text(const uint8_t* d, size_t n) {
  return {reinterpret_cast<const char*>(d), n};
}

// Readers that take a path get the bytes in a file of this process's own.
std::string scratch(const std::string& name) {
  static const std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path() / ("zt_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir + "/" + name;
}

void put(const std::string& path, const uint8_t* d, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(d), static_cast<std::streamsize>(n));
}

void config(const uint8_t* d, size_t n) {
  for (int world : {1, 3}) (void)config_parse(text(d, n), "fuzz.json", world);
}

void hostfile(const uint8_t* d, size_t n) {
  (void)launcher::hostfile_parse(text(d, n), "fuzz_hostfile");
}

void token_file(const uint8_t* d, size_t n) {
  const std::string p = scratch("tokens.bin");
  put(p, d, n);
  auto f = TokenFile::open(p);
  if (f.is_ok() && f->num_tokens() > 0) {
    (void)f->token(0);
    (void)f->token(f->num_tokens() - 1);
  }
}

void safetensors(const uint8_t* d, size_t n) {
  const std::string p = scratch("t.safetensors");
  put(p, d, n);
  auto f = ckpt::SafetensorsFile::open(p);
  if (!f.is_ok()) return;
  std::vector<char> buf;
  for (const auto& [name, e] : f->tensors()) {
    const int64_t count = std::min<int64_t>(e.numel, 1024);
    buf.resize(static_cast<size_t>(count) * 8 + 8);
    (void)f->read(name, 0, count, buf.data());
  }
}

void checkpoint_metadata(const uint8_t* d, size_t n) {
  const std::string dir = scratch("ckpt");
  std::filesystem::create_directories(dir);
  put(dir + "/" + ckpt::kModelStatesFile, d, n);
  auto m = ckpt::metadata_read(dir);
  if (m.is_ok()) (void)ckpt::checkpoint_verify(dir, *m);
  put(dir + "/" + ckpt::kLatestFile, d, std::min<size_t>(n, 64));
  (void)ckpt::latest_read(dir);
}

// One unit's record in checkpoint metadata (checkpoint/unit_layout.h) at several tensor-parallel
// sizes, and the element mapping of every split parameter over bounded ranges.
void checkpoint_unit(const uint8_t* d, size_t n) {
  auto j = nlohmann::json::parse(text(d, n), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  for (int tensor : {1, 2, 4}) {
    auto u = ckpt::saved_unit_parse(j, tensor, "fuzz/meta.json");
    if (!u.is_ok()) continue;
    for (const ckpt::SavedParam& p : u->params) {
      if (!p.split) continue;
      const int64_t numel = p.whole_numel();
      (void)p.split->pieces(0, std::min<int64_t>(numel, 4096));
      (void)p.split->pieces(std::max<int64_t>(0, numel - 100), numel);
    }
  }
}

// A model's config.json: the family readers, and the model built when it is small.
void hf_config(const uint8_t* d, size_t n) {
  auto j = nlohmann::json::parse(text(d, n), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  auto c = nn::transformer_config_from_hf(j, "fuzz/config.json");
  if (!c.is_ok()) return;
  const double width = static_cast<double>(std::max(c->hidden, c->embed_dim));
  const double params = (c->n_layer + 2.0) * width *
                        (4.0 * width + 3.0 * static_cast<double>(c->inner) +
                         static_cast<double>(c->padded_vocab_size + c->max_positions));
  if (params < 1e6 && c->max_positions <= 4096) nn::Transformer model(*c);
}

// Weights beside a fixed tiny GPT-2 config: the loader's header, shape and size checks, then
// every parameter's reads.
void hf_weights(const uint8_t* d, size_t n) {
  const std::string dir = scratch("hf");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json", std::ios::trunc)
      << R"({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 4, "n_positions": 3,
            "vocab_size": 5})";
  put(dir + "/model.safetensors", d, n);
  auto m = ckpt::load_hf_model(dir);
  if (!m.is_ok() || !m->has_weights) return;
  std::vector<float> buf;
  for (auto& unit : m->model->units()) {
    for (nn::Param* p : unit->params()) {
      buf.resize(static_cast<size_t>(p->numel()));
      p->source->read(0, p->numel(), buf.data());
    }
  }
}

// A JSON Lines dataset in memory: every line parsed, then the records as examples and batches
// with the byte tokenizer, padded and packed, failing on bad lines and skipping them.
void jsonl(const uint8_t* d, size_t n) {
  static const auto tokenizer = std::make_shared<const ByteTokenizer>();
  auto f = JsonlFile::from_memory(std::string(text(d, n)), "fuzz.jsonl");
  if (!f.is_ok()) return;
  for (int64_t i = 0; i < std::min<int64_t>(f->size(), 64); ++i) {
    (void)f->line_number(i);
    (void)f->parse(i);
  }
  for (RowLayout layout : {RowLayout::kPad, RowLayout::kPack}) {
    for (BadRecords bad : {BadRecords::kFail, BadRecords::kSkip}) {
      auto copy = JsonlFile::from_memory(std::string(text(d, n)), "fuzz.jsonl");
      if (!copy.is_ok()) return;
      auto ds = JsonlDataset::create(
          std::move(*copy), tokenizer,
          {.seq_len = 8, .bad_records = bad, .layout = layout, .batch_size = 2, .seed = 1,
           .rank = 1, .world_size = 2});
      if (!ds.is_ok()) continue;
      for (int64_t i = 0; i < std::min<int64_t>(ds->size(), 16); ++i) (void)ds->example(i);
      for (int64_t b = 0; b < std::min<int64_t>(ds->num_batches(0), 4); ++b) (void)ds->batch(0, b);
    }
  }
}

// A tokenizer.json: loaded, then fixed texts (invalid UTF-8 among them) encoded and decoded.
void tokenizer_json(const uint8_t* d, size_t n) {
  auto t = HfTokenizer::from_json(text(d, n), "fuzz/tokenizer.json");
  if (!t.is_ok()) return;
  static const std::string_view kTexts[] = {
      "", "Hello world", "hello, worlds  he said\n\t", "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C "
      "\xF0\x9F\x98\x80 12345", "<|endoftext|>[CLS] [SEP][UNK]", "\xff\xfe", "ab\xc3(",
      std::string_view("nul\0byte", 8)};
  for (std::string_view s : kTexts) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids;
      if (!(*t)->encode_append(s, special, ids).is_ok()) continue;
      ids.push_back(-1);
      ids.push_back(static_cast<int32_t>((*t)->vocab_size()));
      (void)(*t)->decode(ids, true);
      (void)(*t)->decode(ids, false);
    }
  }
  for (int32_t id : {0, 1, -1, static_cast<int32_t>((*t)->vocab_size())}) {
    if (auto tok = (*t)->id_to_token(id)) (void)(*t)->token_to_id(*tok);
    (void)(*t)->is_special(id);
  }
}

// Seeds: a byte-level BPE (GPT-2's layout: 10 tokens, 2 merges) and a BERT WordPiece.
constexpr const char* kBpeJson = R"({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 10, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                    "use_regex": true},
  "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false,
                     "use_regex": true},
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
              "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false,
            "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "\u0120": 4, "w": 5, "r": 6, "d": 7,
                      "he": 8, "ll": 9},
            "merges": ["h e", "l l"]}})";

constexpr const char* kWordPieceJson = R"({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [
    {"id": 0, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 2, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 3, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                 "strip_accents": null, "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
             {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                       "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
  "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
            "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5,
                      "##s": 6, "he": 7, "##llo": 8, ",": 9}}})";

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> t = {
      {"config", config,
       {R"({"train_batch_size": 8, "gradient_accumulation_steps": 2, "fp16": {"enabled": true, "loss_scale": 0},
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95]}},
            "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 100}},
            "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": "auto"}})",
        R"({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": "auto"}, /* c */ "gradient_clipping": 1.0,})"}},
      {"hostfile", hostfile, {"worker-1 slots=4\nworker-2 slots=4\n# comment\n\n", "localhost slots=8"}},
      {"token_file", token_file,
       {std::string("\xc6\xd7\x33\x01\x01\x00\x00\x00\x04\x00\x00\x00", 12) + std::string(1012, '\0') +
            std::string("\x01\x00\x02\x00\x03\x00\x04\x00", 8),
        std::string("\x01\x00\x02\x00\x03\x00", 6)}},
      {"safetensors", safetensors,
       {std::string("\x40\x00\x00\x00\x00\x00\x00\x00", 8) +
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}         )" +
            std::string(8, '\x01')}},
      {"hf_config", hf_config,
       {R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "hidden_size": 16, "intermediate_size": 24, "vocab_size": 50,
            "max_position_embeddings": 32, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8}})",
        R"({"model_type": "bert", "architectures": ["BertForSequenceClassification"],
            "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 8,
            "intermediate_size": 8, "vocab_size": 20, "id2label": {"0": "a", "1": "b"}})"}},
      {"hf_weights", hf_weights,
       {std::string("\x47\x00\x00\x00\x00\x00\x00\x00", 8) +
        R"({"wte.weight":{"dtype":"F32","shape":[5,4],"data_offsets":[0,80]}}     )" +
        std::string(80, '\x01')}},
      {"checkpoint_metadata", checkpoint_metadata,
       {R"({"format": "zerotrain-checkpoint", "version": 1, "global_steps": 3,
            "files": {"zero_pp_rank_0_mp_rank_00_optim_states.safetensors": {"bytes": 10, "xxh3": "00"}}})"}},
      {"checkpoint_unit", checkpoint_unit,
       {R"({"name": "h.0", "numel": 40, "params": [{"name": "w", "offset": 0, "shape": [2, 3],
            "tensor_parallel": {"whole_shape": [4, 3], "dim": 0, "ranges": [[[0, 1], [2, 3]],
            [[1, 2], [3, 4]]]}}, {"name": "b", "offset": 16, "shape": [5]}, {"name": "o",
            "offset": 32, "shape": [3, 2], "tensor_parallel": {"whole_shape": [3, 4], "dim": 1,
            "ranges": [[[0, 2]], [[2, 4]]]}}]})"}},
      {"jsonl", jsonl,
       {"{\"prompt\": \"Hi\", \"response\": \"there\"}\n\n{\"prompt\": \"a\", \"response\": \"bcdefghij\"}\r\n",
        "{\"prompt\": \"q\", \"chosen\": \"y\", \"rejected\": \"n\"}\n{\"prompt\": \"r\", \"chosen\": \"z\", \"rejected\": \"m\"}",
        "{\"text\": \"one\"}\n{\"text\": \"two\"}\n{\"text\": \"three\"}\n{\"text\": \"four\"}\n",
        "{\"input_ids\": [1, 2, 3], \"labels\": [-100, 2, 3], \"attention_mask\": [1, 1, 0]}\n{\"input_ids\": [256]}\n"}},
      {"tokenizer_json", tokenizer_json, {kBpeJson, kWordPieceJson}},
  };
  return t;
}

}  // namespace zt::fuzz

#ifdef ZT_LIBFUZZER
// libFuzzer: one binary per target, chosen at build time (scripts/fuzz.sh).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const auto& t : zt::fuzz::targets()) {
    if (std::string_view(t.name) == ZT_LIBFUZZER) t.run(data, size);
  }
  return 0;
}
#endif
