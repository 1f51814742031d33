// BPE and WordPiece (models.h).
#include "zt/data/tokenizer/models.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <queue>

#include <nlohmann/json.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "zt/data/tokenizer/unicode.h"

namespace zt::tok {

size_t StringHash::operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }

namespace {

std::atomic<uint64_t> g_next_model_id{1};

struct ByteLevelTables {
  std::array<std::string, 256> chars;
  std::unordered_map<char32_t, int> bytes;
  ByteLevelTables() {
    // GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to
    // U+0100 and up, in byte order.
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = direct[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      text::utf8_append(chars[b], cp);
      bytes[cp] = b;
    }
  }
};

const ByteLevelTables& byte_tables() {
  static const ByteLevelTables t;
  return t;
}

// (left id, right id) -> (rank, merged id), open addressing.
class MergeMap {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, {0, 0});
    mask_ = cap - 1;
  }
  void insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    const uint64_t key = make_key(a, b);
    size_t i = slot(key);
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    keys_[i] = key;
    vals_[i] = {rank, merged};  // a later duplicate replaces an earlier one, as the library's map
  }
  const std::pair<int32_t, int32_t>* find(int32_t a, int32_t b) const {
    const uint64_t key = make_key(a, b);
    size_t i = slot(key);
    while (true) {
      if (keys_[i] == key) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t make_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull >> 17) & mask_; }
  std::vector<uint64_t> keys_;
  std::vector<std::pair<int32_t, int32_t>> vals_;
  size_t mask_ = 0;
};

// A per-thread cache of word -> ids for each model (the library keeps one too).
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};
constexpr size_t kCacheMaxWordBytes = 256;
// Words cached per thread and model; ZT_TOKENIZER_CACHE overrides it (0: no cache), for
// measuring the trade between hits and the cache's share of the last-level CPU cache.
size_t cache_entries() {
  static const size_t n = [] {
    const char* v = std::getenv("ZT_TOKENIZER_CACHE");
    return v != nullptr ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : size_t{262144};
  }();
  return n;
}

WordCache& thread_cache(uint64_t owner) {
  thread_local std::array<WordCache, 4> caches;
  thread_local size_t next_victim = 0;
  for (WordCache& c : caches) {
    if (c.owner == owner) return c;
  }
  WordCache& c = caches[next_victim];
  next_victim = (next_victim + 1) % caches.size();
  c.owner = owner;
  c.map.clear();
  return c;
}

Result<std::optional<std::string>> opt_string(const nlohmann::json& j, const char* key,
                                              const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return invalid_argument("{}: model.{} must be a string or null", where, key);
  return std::optional<std::string>(it->get<std::string>());
}

Result<bool> opt_bool(const nlohmann::json& j, const char* key, bool def, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) return invalid_argument("{}: model.{} must be true or false", where, key);
  return it->get<bool>();
}

Result<Vocab> read_vocab(const nlohmann::json& j, const std::string& where, int64_t* max_id) {
  auto it = j.find("vocab");
  if (it == j.end() || !it->is_object()) {
    return invalid_argument("{}: model.vocab must be an object of token -> id", where);
  }
  Vocab v;
  v.reserve(it->size());
  *max_id = -1;
  for (auto e = it->begin(); e != it->end(); ++e) {
    if (!e.value().is_number_integer()) {
      return invalid_argument("{}: model.vocab[\"{}\"] is not an integer id", where, e.key());
    }
    const int64_t id = e.value().get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 31) - 1) {
      return invalid_argument("{}: model.vocab[\"{}\"] = {} is not a valid id", where, e.key(), id);
    }
    v[e.key()] = static_cast<int32_t>(id);
    *max_id = std::max(*max_id, id);
  }
  if (*max_id + 1 > (int64_t{1} << 24)) {
    return invalid_argument("{}: model.vocab has an id of {}; ids above 16M are not supported",
                            where, *max_id);
  }
  return v;
}

std::vector<std::string> reverse_vocab(const Vocab& v, int64_t max_id) {
  std::vector<std::string> r(static_cast<size_t>(max_id + 1));
  for (const auto& [tok, id] : v) r[id] = tok;
  return r;
}

class Bpe final : public Model {
 public:
  static Result<std::unique_ptr<Model>> from_json(const nlohmann::json& j, const std::string& where) {
    auto m = std::unique_ptr<Bpe>(new Bpe());
    int64_t max_id = -1;
    ZT_ASSIGN_OR_RETURN(m->vocab_, read_vocab(j, where, &max_id));
    m->vocab_r_ = reverse_vocab(m->vocab_, max_id);
    m->vocab_size_ = max_id + 1;
    ZT_ASSIGN_OR_RETURN(m->unk_, opt_string(j, "unk_token", where));
    ZT_ASSIGN_OR_RETURN(auto prefix, opt_string(j, "continuing_subword_prefix", where));
    ZT_ASSIGN_OR_RETURN(auto suffix, opt_string(j, "end_of_word_suffix", where));
    m->prefix_ = prefix.value_or("");
    m->suffix_ = suffix.value_or("");
    ZT_ASSIGN_OR_RETURN(m->fuse_unk_, opt_bool(j, "fuse_unk", false, where));
    ZT_ASSIGN_OR_RETURN(m->byte_fallback_, opt_bool(j, "byte_fallback", false, where));
    ZT_ASSIGN_OR_RETURN(m->ignore_merges_, opt_bool(j, "ignore_merges", false, where));
    if (auto d = j.find("dropout"); d != j.end() && !d->is_null()) {
      if (!d->is_number() || d->get<double>() != 0.0) {
        return invalid_argument(
            "{}: model.dropout = {}: BPE dropout makes every encoding random (a training-time "
            "augmentation); set it to null in the file to encode data",
            where, d->dump());
      }
    }
    auto mit = j.find("merges");
    if (mit == j.end() || !mit->is_array()) {
      return invalid_argument("{}: model.merges must be a list of merges", where);
    }
    m->merges_.reserve(mit->size() + 1);
    std::string merged;
    for (size_t i = 0; i < mit->size(); ++i) {
      const nlohmann::json& e = (*mit)[i];
      std::string a, b;
      if (e.is_string()) {  // "a b" (the older format)
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          return invalid_argument("{}: model.merges[{}] = \"{}\" is not two tokens separated by "
                                  "one space",
                                  where, i, s);
        }
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      } else {
        return invalid_argument("{}: model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]",
                                where, i);
      }
      auto ia = m->vocab_.find(a), ib = m->vocab_.find(b);
      if (ia == m->vocab_.end() || ib == m->vocab_.end()) {
        return invalid_argument("{}: model.merges[{}] names \"{}\", which is not in the vocab",
                                where, i, ia == m->vocab_.end() ? a : b);
      }
      // The merged token is a + b without b's continuing-subword prefix (the library strips
      // that many bytes from b).
      const size_t cut = std::min(m->prefix_.size(), b.size());
      merged = a;
      merged.append(b, cut, std::string::npos);
      auto im = m->vocab_.find(merged);
      if (im == m->vocab_.end()) {
        return invalid_argument("{}: model.merges[{}] makes \"{}\", which is not in the vocab",
                                where, i, merged);
      }
      m->merges_.insert(ia->second, ib->second, static_cast<int32_t>(i), im->second);
    }
    if (m->unk_) {
      auto it = m->vocab_.find(*m->unk_);
      if (it != m->vocab_.end()) m->unk_id_ = it->second;
    }
    // Byte-fallback ids <0x00>..<0xFF>.
    for (int b = 0; b < 256; ++b) {
      const std::string name = fmt::format("<0x{:02X}>", b);
      auto it = m->vocab_.find(name);
      m->fallback_ids_[b] = it == m->vocab_.end() ? -1 : it->second;
    }
    // Raw-byte mode: each byte's ByteLevel character as a token, and the vocabulary in bytes.
    m->raw_ok_ = m->prefix_.empty() && m->suffix_.empty();
    for (int b = 0; b < 256; ++b) {
      auto it = m->vocab_.find(byte_level_char(static_cast<unsigned char>(b)));
      m->byte_ids_[b] = it == m->vocab_.end() ? -1 : it->second;
    }
    if (m->raw_ok_ && m->ignore_merges_) {
      for (const auto& [tok, id] : m->vocab_) {
        std::string bytes;
        bool ok = true;
        for (size_t i = 0; i < tok.size() && ok;) {
          size_t len = 0;
          const int byte = byte_level_byte(text::utf8_next(tok, i, &len));
          if (byte < 0) ok = false;
          bytes.push_back(static_cast<char>(byte));
          i += len;
        }
        if (ok) m->vocab_bytes_.emplace(std::move(bytes), id);
      }
    }
    return std::unique_ptr<Model>(std::move(m));
  }

  void tokenize(std::string_view piece, bool raw_bytes, std::vector<int32_t>& out) const override {
    if (ignore_merges_) {
      const Vocab& v = raw_bytes ? vocab_bytes_ : vocab_;
      if (auto it = v.find(piece); it != v.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cacheable = piece.size() < kCacheMaxWordBytes && cache_entries() > 0;
    WordCache* cache = nullptr;
    if (cacheable) {
      cache = &thread_cache(instance_id() * 2 + (raw_bytes ? 1 : 0));
      if (auto it = cache->map.find(piece); it != cache->map.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    const size_t before = out.size();
    merge_word(piece, raw_bytes, out);
    if (cacheable) {
      if (cache->map.size() >= cache_entries()) cache->map.clear();
      cache->map.emplace(std::string(piece),
                         std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before),
                                              out.end()));
    }
  }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (auto it = vocab_.find(token); it != vocab_.end()) return it->second;
    return std::nullopt;
  }
  const std::string* id_to_token(int32_t id) const override {
    if (id < 0 || id >= vocab_size_ || vocab_r_[id].empty()) return nullptr;
    return &vocab_r_[id];
  }
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> unk_id() const override { return unk_id_; }
  bool supports_raw_bytes() const override { return raw_ok_; }

 private:
  struct Symbol {
    int32_t c;
    int32_t prev;
    int32_t next;
    int32_t len;
  };
  struct Merge {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  struct MergeLater {  // priority_queue's "less": the top is the lowest (rank, pos)
    bool operator()(const Merge& a, const Merge& b) const {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    }
  };

  static void add(std::vector<Symbol>& w, int32_t c, int32_t len) {
    const auto n = static_cast<int32_t>(w.size());
    if (n > 0) w.back().next = n;
    w.push_back({c, n - 1, -1, len});
  }

  void merge_word(std::string_view piece, bool raw_bytes, std::vector<int32_t>& out) const {
    thread_local std::vector<Symbol> w;
    w.clear();
    bool mapped_ok = true;
    if (raw_bytes) {
      for (char ch : piece) {
        const int32_t id = byte_ids_[static_cast<unsigned char>(ch)];
        if (id < 0) {
          mapped_ok = false;
          break;
        }
        add(w, id, 1);
      }
    }
    if (!raw_bytes || !mapped_ok) {
      w.clear();
      if (raw_bytes) {
        // A byte whose character the vocabulary lacks: run the general path on the characters.
        std::string mapped;
        for (char ch : piece) mapped += byte_level_char(static_cast<unsigned char>(ch));
        symbols_from_chars(mapped, w);
      } else {
        symbols_from_chars(piece, w);
      }
    }
    merge_all(w);
    for (const Symbol& s : w) out.push_back(s.c);
  }

  // The library's merge_word: one symbol per character (prefix/suffix added), else byte
  // fallback, else unk (fused when asked), else the character is dropped.
  void symbols_from_chars(std::string_view word, std::vector<Symbol>& w) const {
    bool unk = false;  // an unk (id unk_id_, unk_len bytes) is pending
    int32_t unk_len = 0;
    std::string s;
    size_t i = 0;
    while (i < word.size()) {
      const size_t len = text::utf8_len(static_cast<unsigned char>(word[i]));
      const bool first = i == 0, last = i + len >= word.size();
      s.clear();
      if (!first) s += prefix_;
      s.append(word.substr(i, len));
      if (last) s += suffix_;
      if (auto it = vocab_.find(s); it != vocab_.end()) {
        if (unk) {
          add(w, *unk_id_, unk_len);
          unk = false;
        }
        add(w, it->second, static_cast<int32_t>(len));
      } else {
        bool done = false;
        if (byte_fallback_) {
          bool all = true;
          for (char ch : s) all = all && fallback_ids_[static_cast<unsigned char>(ch)] >= 0;
          if (all) {
            // As the library: the bytes go in before a pending unk.
            for (char ch : s) add(w, fallback_ids_[static_cast<unsigned char>(ch)], 1);
            done = true;
          }
        }
        if (!done && unk_id_) {
          if (unk && fuse_unk_) {
            unk_len += static_cast<int32_t>(len);
          } else {
            if (unk) add(w, *unk_id_, unk_len);
            unk = true;
            unk_len = static_cast<int32_t>(len);
          }
        }
      }
      i += len;
    }
    if (unk) add(w, *unk_id_, unk_len);
  }

  void merge_all(std::vector<Symbol>& w) const {
    if (w.size() < 2) return;
    thread_local std::vector<Merge> heap_storage;
    heap_storage.clear();
    std::priority_queue<Merge, std::vector<Merge>, MergeLater> queue(MergeLater{},
                                                                     std::move(heap_storage));
    for (size_t i = 0; i + 1 < w.size(); ++i) {
      if (const auto* m = merges_.find(w[i].c, w[i + 1].c)) {
        queue.push({m->first, static_cast<int32_t>(i), m->second});
      }
    }
    while (!queue.empty()) {
      const Merge top = queue.top();
      queue.pop();
      Symbol& cur = w[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const int32_t next_pos = cur.next;
      const Symbol right = w[next_pos];
      const auto* m = merges_.find(cur.c, right.c);
      if (m == nullptr || m->second != top.new_id) continue;  // an expired entry
      cur.c = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      w[next_pos].len = 0;
      if (right.next > -1 && right.next < static_cast<int32_t>(w.size())) {
        w[right.next].prev = top.pos;
      }
      if (cur.prev >= 0) {
        if (const auto* pm = merges_.find(w[cur.prev].c, cur.c)) {
          queue.push({pm->first, cur.prev, pm->second});
        }
      }
      if (cur.next >= 0 && cur.next < static_cast<int32_t>(w.size())) {
        if (const auto* nm = merges_.find(cur.c, w[cur.next].c)) {
          queue.push({nm->first, top.pos, nm->second});
        }
      }
    }
    size_t k = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i].len != 0) w[k++] = w[i];
    }
    w.resize(k);
  }

  Vocab vocab_;
  Vocab vocab_bytes_;
  std::vector<std::string> vocab_r_;
  int64_t vocab_size_ = 0;
  MergeMap merges_;
  std::optional<std::string> unk_;
  std::optional<int32_t> unk_id_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false, raw_ok_ = false;
  std::array<int32_t, 256> byte_ids_{};
  std::array<int32_t, 256> fallback_ids_{};
};

class WordPiece final : public Model {
 public:
  static Result<std::unique_ptr<Model>> from_json(const nlohmann::json& j, const std::string& where) {
    auto m = std::unique_ptr<WordPiece>(new WordPiece());
    int64_t max_id = -1;
    ZT_ASSIGN_OR_RETURN(m->vocab_, read_vocab(j, where, &max_id));
    m->vocab_r_ = reverse_vocab(m->vocab_, max_id);
    m->vocab_size_ = max_id + 1;
    ZT_ASSIGN_OR_RETURN(auto unk, opt_string(j, "unk_token", where));
    m->unk_ = unk.value_or("[UNK]");
    ZT_ASSIGN_OR_RETURN(auto prefix, opt_string(j, "continuing_subword_prefix", where));
    m->prefix_ = prefix.value_or("##");
    if (auto it = j.find("max_input_chars_per_word"); it != j.end() && !it->is_null()) {
      if (!it->is_number_unsigned()) {
        return invalid_argument("{}: model.max_input_chars_per_word must be a whole number", where);
      }
      m->max_chars_ = it->get<size_t>();
    }
    auto u = m->vocab_.find(m->unk_);
    if (u == m->vocab_.end()) {
      return invalid_argument("{}: model.unk_token \"{}\" is not in the vocab", where, m->unk_);
    }
    m->unk_id_ = u->second;
    return std::unique_ptr<Model>(std::move(m));
  }

  void tokenize(std::string_view word, bool /*raw_bytes*/, std::vector<int32_t>& out) const override {
    if (text::utf8_count(word) > max_chars_) {
      out.push_back(unk_id_);
      return;
    }
    const size_t before = out.size();
    size_t start = 0;
    std::string sub;
    while (start < word.size()) {
      size_t end = word.size();
      int32_t found = -1;
      while (start < end) {
        sub.clear();
        if (start > 0) sub += prefix_;
        sub.append(word.substr(start, end - start));
        if (auto it = vocab_.find(sub); it != vocab_.end()) {
          found = it->second;
          break;
        }
        // Drop the last character.
        size_t k = end - 1;
        while (k > start && (static_cast<unsigned char>(word[k]) & 0xC0) == 0x80) --k;
        end = k;
      }
      if (found < 0) {
        out.resize(before);
        out.push_back(unk_id_);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (auto it = vocab_.find(token); it != vocab_.end()) return it->second;
    return std::nullopt;
  }
  const std::string* id_to_token(int32_t id) const override {
    if (id < 0 || id >= vocab_size_ || vocab_r_[id].empty()) return nullptr;
    return &vocab_r_[id];
  }
  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> unk_id() const override { return unk_id_; }

 private:
  Vocab vocab_;
  std::vector<std::string> vocab_r_;
  int64_t vocab_size_ = 0;
  std::string unk_, prefix_;
  int32_t unk_id_ = 0;
  size_t max_chars_ = 100;
};

}  // namespace

Model::Model() : instance_id_(g_next_model_id.fetch_add(1)) {}

const std::string& byte_level_char(unsigned char b) { return byte_tables().chars[b]; }

int byte_level_byte(char32_t c) {
  const auto& t = byte_tables().bytes;
  auto it = t.find(c);
  return it == t.end() ? -1 : it->second;
}

Result<std::unique_ptr<Model>> model_from_json(const nlohmann::json& model, const std::string& where) {
  if (!model.is_object()) return invalid_argument("{}: \"model\" must be an object", where);
  std::string type;
  if (auto t = model.find("type"); t != model.end() && t->is_string()) {
    type = t->get<std::string>();
  } else if (model.contains("merges")) {
    type = "BPE";  // files from before the library wrote the type
  } else if (model.contains("max_input_chars_per_word")) {
    type = "WordPiece";
  }
  if (type == "BPE") return Bpe::from_json(model, where);
  if (type == "WordPiece") return WordPiece::from_json(model, where);
  return invalid_argument("{}: model type '{}' is not supported (ZeroTrain reads BPE and WordPiece "
                          "tokenizers; Unigram and WordLevel are not implemented)",
                          where, type.empty() ? std::string("(none)") : type);
}

}  // namespace zt::tok
