// A tokenizer.json run as the `tokenizers` library runs it (hf_tokenizer.h).
#include "zt/data/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "zt/core/file_io.h"
#include "zt/core/json_limits.h"
#include "zt/core/log.h"
#include "zt/data/tokenizer/components.h"
#include "zt/data/tokenizer/models.h"
#include "zt/data/tokenizer/unicode.h"

namespace zt {

using nlohmann::json;

namespace {

struct AddedToken {
  std::string content;
  std::string match;  // what is searched for: the content, or its normalized form
  int32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// Added tokens matched leftmost-longest (the library's Aho-Corasick search), by first byte.
class AddedMatcher {
 public:
  void add(const AddedToken* t) {
    if (t->match.empty()) return;
    by_first_[static_cast<unsigned char>(t->match[0])].push_back(t);
  }
  void finish() {
    for (auto& v : by_first_) {
      std::stable_sort(v.begin(), v.end(), [](const AddedToken* a, const AddedToken* b) {
        return a->match.size() > b->match.size();
      });
    }
  }
  bool empty() const {
    for (const auto& v : by_first_) {
      if (!v.empty()) return false;
    }
    return true;
  }
  // The longest token starting at s[i], or nullptr.
  const AddedToken* at(std::string_view s, size_t i) const {
    for (const AddedToken* t : by_first_[static_cast<unsigned char>(s[i])]) {
      if (s.compare(i, t->match.size(), t->match) == 0) return t;
    }
    return nullptr;
  }

 private:
  std::array<std::vector<const AddedToken*>, 256> by_first_;
};

// A Rust regex \w character (alphanumeric, mark, connector punctuation, joiner).
bool is_word_char(char32_t c) {
  if (c < 0x80) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  if (c == 0x200C || c == 0x200D) return true;
  const int k = text::category(c);
  return (k >= 1 && k <= 10) || k == 12;  // L*, M*, Nd, Nl, Pc (utf8proc numbering)
}

char32_t last_char(std::string_view s) {
  size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  size_t len = 0;
  return text::utf8_next(s, k, &len);
}

// A segment of the input: text still to tokenize, or an added token's id.
struct Segment {
  std::string_view s;
  int32_t id = -1;  // >= 0: an added token
  bool first = false;
};

// The library's AddedVocabulary::find_matches over `s`.
void split_added(const AddedMatcher& m, std::string_view s, bool first,
                 std::vector<Segment>& out) {
  size_t start_offset = 0, i = 0;
  const size_t n = s.size();
  while (i < n) {
    const AddedToken* t = m.at(s, i);
    if (t == nullptr) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + t->match.size();
    i = stop;  // the search goes on after this match, whether it is kept or not
    if (t->single_word) {
      const bool start_space = start == 0 || !is_word_char(last_char(s.substr(0, start)));
      bool stop_space = stop == n;
      if (!stop_space) {
        size_t len = 0;
        stop_space = !is_word_char(text::utf8_next(s, stop, &len));
      }
      if (!start_space || !stop_space) continue;
    }
    if (t->lstrip) {
      size_t b = start;
      while (b > 0) {
        size_t k = b - 1;
        while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        size_t len = 0;
        if (!text::is_white_space(text::utf8_next(s, k, &len))) break;
        b = k;
      }
      start = std::max(b, start_offset);
    }
    if (t->rstrip) {
      while (stop < n) {
        size_t len = 0;
        if (!text::is_white_space(text::utf8_next(s, stop, &len))) break;
        stop += len;
      }
      i = std::max(i, stop);
    }
    if (start_offset < start) {
      out.push_back({s.substr(start_offset, start - start_offset), -1, first && start_offset == 0});
    }
    out.push_back({s.substr(start, stop - start), t->id, false});
    start_offset = stop;
  }
  if (start_offset < n) {
    out.push_back({s.substr(start_offset), -1, first && start_offset == 0});
  }
}

}  // namespace

struct HfTokenizer::Impl {
  std::string path;
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tok::Model> model;
  std::unique_ptr<tok::PostProcessor> post_processor;
  std::unique_ptr<tok::Decoder> decoder;
  bool model_takes_bytes = false;
  std::vector<AddedToken> added;           // in file order
  std::unordered_map<int32_t, size_t> added_by_id;
  tok::Vocab added_by_content;
  std::unordered_set<std::string> special_contents;
  AddedMatcher raw_matcher, normalized_matcher;
  SpecialTokenIds specials;
  int64_t vocab_size = 0;
  std::string model_type;

  Status encode(std::string_view text, bool add_special, std::vector<int32_t>& out) const;
  Status encode_text(std::string_view s, bool first, std::vector<int32_t>& out) const;
};

Status HfTokenizer::Impl::encode_text(std::string_view s, bool first,
                                      std::vector<int32_t>& out) const {
  thread_local tok::Arena arena;
  thread_local std::vector<tok::Piece> pieces;
  arena.reset();
  pieces.clear();
  pieces.push_back({s, first});
  if (pre_tokenizer) ZT_RETURN_IF_ERROR(pre_tokenizer->apply(pieces, arena));
  for (const tok::Piece& p : pieces) {
    if (!p.s.empty()) model->tokenize(p.s, model_takes_bytes, out);
  }
  return Status::ok();
}

Status HfTokenizer::Impl::encode(std::string_view text, bool add_special,
                                 std::vector<int32_t>& out) const {
  if (auto bad = utf8_invalid_offset(text)) {
    return invalid_argument("the text is not valid UTF-8 (byte {} of {}); tokenizer.json "
                            "tokenizers take Unicode text",
                            *bad, text.size());
  }
  const size_t begin = out.size();
  thread_local std::vector<Segment> raw_segments, norm_segments;
  raw_segments.clear();
  if (raw_matcher.empty()) {
    if (!text.empty()) raw_segments.push_back({text, -1, true});
  } else {
    split_added(raw_matcher, text, true, raw_segments);
  }
  std::string normalized;
  for (const Segment& seg : raw_segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    std::string_view piece = seg.s;
    if (normalizer) {
      normalized.assign(seg.s);
      ZT_RETURN_IF_ERROR(normalizer->apply(normalized));
      piece = normalized;
    }
    if (piece.empty()) continue;
    if (normalized_matcher.empty()) {
      ZT_RETURN_IF_ERROR(encode_text(piece, seg.first, out));
      continue;
    }
    norm_segments.clear();
    split_added(normalized_matcher, piece, seg.first, norm_segments);
    for (const Segment& ns : norm_segments) {
      if (ns.id >= 0) {
        out.push_back(ns.id);
      } else {
        ZT_RETURN_IF_ERROR(encode_text(ns.s, ns.first, out));
      }
    }
  }
  if (add_special && post_processor) {
    thread_local std::vector<int32_t> ids;
    ids.assign(out.begin() + static_cast<std::ptrdiff_t>(begin), out.end());
    post_processor->single(ids);
    out.resize(begin);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return Status::ok();
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

Status HfTokenizer::encode_append(std::string_view text, bool add_special_tokens,
                                  std::vector<int32_t>& out) const {
  return impl_->encode(text, add_special_tokens, out);
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
      const AddedToken& t = impl_->added[it->second];
      if (skip_special_tokens && t.special) continue;
      tokens.push_back(t.normalized ? t.match : t.content);
      continue;
    }
    if (const std::string* t = impl_->model->id_to_token(id)) {
      // The library skips by content: a model token spelled like a special added token too.
      if (skip_special_tokens && impl_->special_contents.count(*t) != 0) continue;
      tokens.push_back(*t);
    } else {
      tokens.emplace_back("\xEF\xBF\xBD");  // an id outside the vocabulary
    }
  }
  if (!impl_->decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i != 0) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  impl_->decoder->decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

int64_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) {
    return it->second;
  }
  return impl_->model->token_to_id(token);
}

std::optional<std::string> HfTokenizer::id_to_token(int32_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
    return impl_->added[it->second].content;
  }
  if (const std::string* t = impl_->model->id_to_token(id)) return *t;
  return std::nullopt;
}

bool HfTokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

const SpecialTokenIds& HfTokenizer::special_ids() const { return impl_->specials; }

std::string HfTokenizer::describe() const {
  return fmt::format("{} tokenizer ({} ids) from {}", impl_->model_type, impl_->vocab_size,
                     impl_->path);
}

namespace {

// A special token named in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> config_token(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    if (auto c = it->find("content"); c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

Result<std::shared_ptr<const HfTokenizer>> HfTokenizer::from_json(std::string_view text,
                                                                  const std::string& where,
                                                                  std::string_view config_json) {
  ZT_ASSIGN_OR_RETURN(json j, json_parse_checked(text, where));
  if (!j.is_object()) return invalid_argument("{}: a tokenizer.json is a JSON object", where);
  auto impl = std::make_unique<Impl>();
  impl->path = where;
  auto get = [&](const char* key) -> const json& {
    static const json kNull;
    auto it = j.find(key);
    return it == j.end() ? kNull : *it;
  };
  if (!j.contains("model")) return invalid_argument("{}: no \"model\" (is this a tokenizer.json?)", where);
  ZT_ASSIGN_OR_RETURN(impl->model, tok::model_from_json(j["model"], where));
  impl->model_type = j["model"].value("type", std::string("BPE"));
  ZT_ASSIGN_OR_RETURN(impl->normalizer, tok::normalizer_from_json(get("normalizer"), "normalizer", where));
  impl->model_takes_bytes = impl->model->supports_raw_bytes();
  ZT_ASSIGN_OR_RETURN(impl->pre_tokenizer,
                      tok::pre_tokenizer_from_json(get("pre_tokenizer"), "pre_tokenizer", where,
                                                   &impl->model_takes_bytes));
  ZT_ASSIGN_OR_RETURN(impl->post_processor,
                      tok::post_processor_from_json(get("post_processor"), "post_processor", where));
  ZT_ASSIGN_OR_RETURN(impl->decoder, tok::decoder_from_json(get("decoder"), "decoder", where));
  for (const char* key : {"truncation", "padding"}) {
    if (!get(key).is_null()) {
      ZT_LOG_WARN("{}: \"{}\" is set in the file; ZeroTrain encodes whole texts and sizes "
                  "sequences with --seq-len, so it is ignored",
                  where, key);
    }
  }
  // Added tokens.
  int64_t max_id = impl->model->vocab_size() - 1;
  if (const json& added = get("added_tokens"); !added.is_null()) {
    if (!added.is_array()) return invalid_argument("{}: added_tokens must be a list", where);
    impl->added.reserve(added.size());
    for (size_t i = 0; i < added.size(); ++i) {
      const json& a = added[i];
      if (!a.is_object() || !a.contains("content") || !a["content"].is_string() ||
          !a.contains("id") || !a["id"].is_number_integer()) {
        return invalid_argument("{}: added_tokens[{}] needs a string \"content\" and an integer "
                                "\"id\"",
                                where, i);
      }
      AddedToken t;
      t.content = a["content"].get<std::string>();
      const int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id >= (int64_t{1} << 24)) {
        return invalid_argument("{}: added_tokens[{}].id = {} is out of range", where, i, id);
      }
      t.id = static_cast<int32_t>(id);
      t.special = a.value("special", false);
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.normalized = a.value("normalized", !t.special);
      if (t.content.empty()) continue;  // the library ignores empty tokens
      if (utf8_invalid_offset(t.content)) {
        return invalid_argument("{}: added_tokens[{}] is not valid UTF-8", where, i);
      }
      t.match = t.content;
      if (t.normalized && impl->normalizer) ZT_RETURN_IF_ERROR(impl->normalizer->apply(t.match));
      max_id = std::max<int64_t>(max_id, id);
      impl->added.push_back(std::move(t));
    }
  }
  for (size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& t = impl->added[i];
    impl->added_by_id[t.id] = i;
    impl->added_by_content[t.content] = t.id;
    if (t.special) impl->special_contents.insert(t.content);
  }
  // The matchers point into impl->added, which no longer changes.
  for (const AddedToken& t : impl->added) {
    (t.normalized ? impl->normalized_matcher : impl->raw_matcher).add(&t);
  }
  impl->raw_matcher.finish();
  impl->normalized_matcher.finish();
  impl->vocab_size = max_id + 1;

  // Special tokens: tokenizer_config.json, else the usual names.
  json cfg;
  if (!config_json.empty()) {
    auto parsed = json_parse_checked(config_json, "tokenizer_config.json");
    if (parsed && parsed->is_object()) cfg = std::move(*parsed);
  }
  auto id_of = [&](const std::string& t) -> std::optional<int32_t> {
    if (auto it = impl->added_by_content.find(t); it != impl->added_by_content.end()) return it->second;
    return impl->model->token_to_id(t);
  };
  auto pick = [&](const char* key, std::initializer_list<const char*> names) -> std::optional<int32_t> {
    if (cfg.is_object() && cfg.contains(key)) {
      // Named there (a null means the model has none).
      if (auto t = config_token(cfg, key)) return id_of(*t);
      return std::nullopt;
    }
    for (const char* n : names) {
      if (auto id = id_of(n)) return id;
    }
    return std::nullopt;
  };
  impl->specials.eos = pick("eos_token", {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>",
                                          "[SEP]"});
  impl->specials.bos = pick("bos_token", {"<|begin_of_text|>", "<s>", "<bos>", "[CLS]"});
  impl->specials.pad = pick("pad_token", {"<pad>", "[PAD]", "<|pad|>"});
  impl->specials.unk = pick("unk_token", {"<unk>", "[UNK]", "<|unk|>"});
  if (!impl->specials.unk) impl->specials.unk = impl->model->unk_id();
  return std::shared_ptr<const HfTokenizer>(new HfTokenizer(std::move(impl)));
}

Result<std::shared_ptr<const HfTokenizer>> HfTokenizer::load(const std::string& path) {
  ZT_ASSIGN_OR_RETURN(std::string text, file_read_all(path, "tokenizer.json", int64_t{1} << 31));
  std::string config;
  std::error_code ec;
  const auto cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(cfg_path, ec)) {
    auto c = file_read_all(cfg_path.string(), "tokenizer_config.json", int64_t{1} << 26);
    if (c) config = std::move(*c);
  }
  return from_json(text, path, config);
}

}  // namespace zt
