// Normalizers, pre-tokenizers, post-processors and decoders (components.h).
#include "zt/data/tokenizer/components.h"

#include <nlohmann/json.hpp>

#include "zt/data/tokenizer/models.h"
#include "zt/data/tokenizer/tokenizer.h"
#include "zt/data/tokenizer/regex.h"
#include "zt/data/tokenizer/unicode.h"

namespace zt::tok {
namespace {

using nlohmann::json;
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 ▁

std::string type_of(const json& j) {
  auto t = j.find("type");
  return t != j.end() && t->is_string() ? t->get<std::string>() : std::string();
}

Status unsupported(const std::string& where, const std::string& path, const std::string& kind,
                   const std::string& type, const char* supported) {
  return invalid_argument("{}: {} type '{}' at {} is not supported (supported: {}); the file "
                          "would be encoded differently from the tokenizers library, so it is "
                          "refused",
                          where, kind, type.empty() ? std::string("(none)") : type, path,
                          supported);
}

Result<bool> get_bool(const json& j, const char* key, bool def, const std::string& where,
                      const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) return invalid_argument("{}: {}.{} must be true or false", where, path, key);
  return it->get<bool>();
}

Result<std::string> get_string(const json& j, const char* key, const std::string& where,
                               const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) {
    return invalid_argument("{}: {}.{} must be a string", where, path, key);
  }
  return it->get<std::string>();
}

Result<int64_t> get_int(const json& j, const char* key, int64_t def, const std::string& where,
                        const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number_integer()) return invalid_argument("{}: {}.{} must be an integer", where, path, key);
  return it->get<int64_t>();
}

// A {"String": s} or {"Regex": r} pattern as a compiled regex (a string is matched literally).
Result<std::shared_ptr<const text::Regex>> get_pattern(const json& j, const std::string& where,
                                                       const std::string& path) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) {
    return invalid_argument("{}: {}.pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}",
                            where, path);
  }
  if (auto s = it->find("String"); s != it->end() && s->is_string()) {
    return text::Regex::compile(text::Regex::escape(s->get<std::string>()), where + ": " + path);
  }
  if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    return text::Regex::compile(r->get<std::string>(), where + ": " + path);
  }
  return invalid_argument("{}: {}.pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", where,
                          path);
}

// One char from a JSON string of exactly one character.
Result<char32_t> get_char(const json& j, const char* key, const std::string& where,
                          const std::string& path) {
  ZT_ASSIGN_OR_RETURN(std::string s, get_string(j, key, where, path));
  if (s.empty() || text::utf8_count(s) != 1) {
    return invalid_argument("{}: {}.{} must be one character, got \"{}\"", where, path, key, s);
  }
  size_t len = 0;
  return text::utf8_next(s, 0, &len);
}

// ---------------------------------------------------------------------------------------------
// Normalizers

struct NormSequence final : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> steps;
  Status apply(std::string& s) const override {
    for (const auto& n : steps) ZT_RETURN_IF_ERROR(n->apply(s));
    return Status::ok();
  }
};

struct NormUnicode final : Normalizer {
  text::NormForm form;
  explicit NormUnicode(text::NormForm f) : form(f) {}
  Status apply(std::string& s) const override {
    s = text::normalize(s, form);
    return Status::ok();
  }
};

struct NormLowercase final : Normalizer {
  Status apply(std::string& s) const override {
    s = text::lowercase(s);
    return Status::ok();
  }
};

// Removes every code point for which `drop` holds.
template <typename F>
void filter_chars(std::string& s, F&& drop) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const char32_t c = text::utf8_next(s, i, &len);
    if (!drop(c)) out.append(s, i, len);
    i += len;
  }
  s.swap(out);
}

struct NormStripAccents final : Normalizer {
  Status apply(std::string& s) const override {
    filter_chars(s, [](char32_t c) { return text::is_mark(c); });
    return Status::ok();
  }
};

struct NormStrip final : Normalizer {
  bool left = true, right = true;
  Status apply(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left) {
      while (b < e) {
        size_t len = 0;
        if (!text::is_white_space(text::utf8_next(s, b, &len))) break;
        b += len;
      }
    }
    if (right) {
      while (e > b) {
        size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        size_t len = 0;
        if (!text::is_white_space(text::utf8_next(s, k, &len))) break;
        e = k;
      }
    }
    s = s.substr(b, e - b);
    return Status::ok();
  }
};

struct NormPrepend final : Normalizer {
  std::string prefix;
  Status apply(std::string& s) const override {
    if (!s.empty()) s.insert(0, prefix);
    return Status::ok();
  }
};

struct NormReplace final : Normalizer {
  std::shared_ptr<const text::Regex> pattern;
  std::string content;
  Status apply(std::string& s) const override {
    std::string out;
    size_t prev = 0;
    ZT_RETURN_IF_ERROR(pattern->for_each_match(s, [&](size_t b, size_t e) {
      out.append(s, prev, b - prev);
      out += content;
      prev = e;
    }));
    out.append(s, prev, std::string::npos);
    s.swap(out);
    return Status::ok();
  }
};

struct NormBert final : Normalizer {
  bool clean_text = true, chinese = true, strip_accents = true, lower = true;
  Status apply(std::string& s) const override {
    if (clean_text) {
      std::string out;
      out.reserve(s.size());
      size_t i = 0;
      while (i < s.size()) {
        size_t len = 0;
        const char32_t c = text::utf8_next(s, i, &len);
        const bool ws_control = c == '\t' || c == '\n' || c == '\r';
        if (c == 0 || c == 0xFFFD || (!ws_control && text::is_other(c))) {
          // dropped
        } else if (ws_control || text::is_white_space(c)) {
          out.push_back(' ');
        } else {
          out.append(s, i, len);
        }
        i += len;
      }
      s.swap(out);
    }
    if (chinese) {
      std::string out;
      out.reserve(s.size());
      size_t i = 0;
      while (i < s.size()) {
        size_t len = 0;
        const char32_t c = text::utf8_next(s, i, &len);
        if (text::is_chinese_char(c)) {
          out.push_back(' ');
          out.append(s, i, len);
          out.push_back(' ');
        } else {
          out.append(s, i, len);
        }
        i += len;
      }
      s.swap(out);
    }
    if (strip_accents) {
      s = text::normalize(s, text::NormForm::kNFD);
      filter_chars(s, [](char32_t c) { return text::is_mark_nonspacing(c); });
    }
    if (lower) s = text::lowercase(s);
    return Status::ok();
  }
};

struct NormByteLevel final : Normalizer {
  Status apply(std::string& s) const override {
    std::string out;
    out.reserve(s.size() * 2);
    for (char c : s) out += byte_level_char(static_cast<unsigned char>(c));
    s.swap(out);
    return Status::ok();
  }
};

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

enum class Behavior : unsigned char { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Result<Behavior> get_behavior(const json& j, Behavior def, const std::string& where,
                              const std::string& path) {
  auto it = j.find("behavior");
  if (it == j.end() || it->is_null()) return def;
  const std::string b = it->is_string() ? it->get<std::string>() : std::string();
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return invalid_argument("{}: {}.behavior '{}' is not one of Removed, Isolated, "
                          "MergedWithPrevious, MergedWithNext, Contiguous",
                          where, path, b);
}

struct Span {
  size_t b, e;
  bool match;
};

// The library's NormalizedString::split: `spans` cover the piece in order.
void split_piece(const Piece& p, std::vector<Span>& spans, Behavior behavior,
                 std::vector<Piece>& out) {
  thread_local std::vector<Span> merged;
  merged.clear();
  switch (behavior) {
    case Behavior::kIsolated:
      for (Span& s : spans) merged.push_back({s.b, s.e, false});
      break;
    case Behavior::kRemoved:
      merged = spans;
      break;
    case Behavior::kContiguous: {
      bool prev = false;
      for (const Span& s : spans) {
        if (s.match == prev && !merged.empty()) {
          merged.back().e = s.e;
        } else {
          merged.push_back({s.b, s.e, false});
        }
        prev = s.match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool prev = false;
      for (const Span& s : spans) {
        if (s.match && !prev && !merged.empty()) {
          merged.back().e = s.e;
        } else {
          merged.push_back({s.b, s.e, false});
        }
        prev = s.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !prev && !merged.empty()) {
          merged.back().b = s.b;
        } else {
          merged.push_back({s.b, s.e, false});
        }
        prev = s.match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
  }
  for (const Span& s : merged) {
    if (s.match || s.e == s.b) continue;  // removed, or empty
    out.push_back({p.s.substr(s.b, s.e - s.b), p.first && s.b == 0});
  }
}

// Spans of a per-character predicate: each matching character alone, the runs between them.
template <typename F>
void char_spans(std::string_view s, F&& pred, std::vector<Span>& spans) {
  spans.clear();
  size_t last = 0, i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const char32_t c = text::utf8_next(s, i, &len);
    if (pred(c)) {
      if (last < i) spans.push_back({last, i, false});
      spans.push_back({i, i + len, true});
      last = i + len;
    }
    i += len;
  }
  if (last < s.size()) spans.push_back({last, s.size(), false});
}

Status regex_spans(const text::Regex& re, std::string_view s, bool invert,
                   std::vector<Span>& spans) {
  spans.clear();
  size_t prev = 0;
  ZT_RETURN_IF_ERROR(re.for_each_match(s, [&](size_t b, size_t e) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }));
  if (prev != s.size()) spans.push_back({prev, s.size(), invert});
  return Status::ok();
}

template <typename F>
void split_all_chars(std::vector<Piece>& pieces, F&& pred, Behavior behavior) {
  thread_local std::vector<Piece> out;
  thread_local std::vector<Span> spans;
  out.clear();
  for (const Piece& p : pieces) {
    char_spans(p.s, pred, spans);
    split_piece(p, spans, behavior, out);
  }
  pieces.swap(out);
}

Status split_all_regex(std::vector<Piece>& pieces, const text::Regex& re, bool invert,
                       Behavior behavior) {
  thread_local std::vector<Piece> out;
  thread_local std::vector<Span> spans;
  out.clear();
  for (const Piece& p : pieces) {
    ZT_RETURN_IF_ERROR(regex_spans(re, p.s, invert, spans));
    split_piece(p, spans, behavior, out);
  }
  pieces.swap(out);
  return Status::ok();
}

const text::Regex& gpt2_regex() {
  static const std::shared_ptr<const text::Regex> re =
      text::Regex::compile(
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
          "ByteLevel")
          .value();
  return *re;
}

const text::Regex& whitespace_regex() {
  // Rust's \w: alphabetic, marks, decimal digits, connector punctuation, joiners.
  static const std::shared_ptr<const text::Regex> re =
      text::Regex::compile(
          R"([\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200c}\x{200d}]+|[^\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200c}\x{200d}\s]+)",
          "Whitespace")
          .value();
  return *re;
}

struct PreSequence final : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  Status apply(std::vector<Piece>& pieces, Arena& arena) const override {
    for (const auto& p : steps) ZT_RETURN_IF_ERROR(p->apply(pieces, arena));
    return Status::ok();
  }
};

struct PreByteLevel final : PreTokenizer {
  bool add_prefix_space = false, use_regex = true;
  bool map_bytes = true;  // false when it is the last step and the model maps bytes itself
  Status apply(std::vector<Piece>& pieces, Arena& arena) const override {
    if (add_prefix_space) {
      for (Piece& p : pieces) {
        if (p.s.empty() || p.s[0] != ' ') {
          std::string& s = arena.make();
          s.reserve(p.s.size() + 1);
          s.push_back(' ');
          s.append(p.s);
          p.s = s;
        }
      }
    }
    if (use_regex) ZT_RETURN_IF_ERROR(split_all_regex(pieces, gpt2_regex(), false, Behavior::kIsolated));
    if (map_bytes) {
      for (Piece& p : pieces) {
        std::string& s = arena.make();
        for (char c : p.s) s += byte_level_char(static_cast<unsigned char>(c));
        p.s = s;
      }
    }
    return Status::ok();
  }
};

struct PreSplit final : PreTokenizer {
  std::shared_ptr<const text::Regex> re;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  Status apply(std::vector<Piece>& pieces, Arena&) const override {
    return split_all_regex(pieces, *re, invert, behavior);
  }
};

enum class Prepend : unsigned char { kAlways, kNever, kFirst };

Result<Prepend> get_prepend_scheme(const json& j, const std::string& where, const std::string& path) {
  if (auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
    const std::string v = it->is_string() ? it->get<std::string>() : std::string();
    if (v == "always") return Prepend::kAlways;
    if (v == "never") return Prepend::kNever;
    if (v == "first") return Prepend::kFirst;
    return invalid_argument("{}: {}.prepend_scheme '{}' is not always, never or first", where,
                            path, v);
  }
  // Files from before prepend_scheme: add_prefix_space true means always.
  ZT_ASSIGN_OR_RETURN(bool add, get_bool(j, "add_prefix_space", true, where, path));
  return add ? Prepend::kAlways : Prepend::kNever;
}

struct PreMetaspace final : PreTokenizer {
  std::string replacement;  // UTF-8 of the replacement character
  char32_t replacement_cp = 0x2581;
  Prepend scheme = Prepend::kAlways;
  bool split = true;
  Status apply(std::vector<Piece>& pieces, Arena& arena) const override {
    for (Piece& p : pieces) {
      std::string& s = arena.make();
      const bool starts = p.s.substr(0, 1) == " " ||
                          p.s.substr(0, replacement.size()) == replacement;
      if (!starts && (scheme == Prepend::kAlways || (scheme == Prepend::kFirst && p.first))) {
        s += replacement;
      }
      for (char c : p.s) {
        if (c == ' ') {
          s += replacement;
        } else {
          s.push_back(c);
        }
      }
      p.s = s;
    }
    if (split) {
      const char32_t r = replacement_cp;
      split_all_chars(pieces, [r](char32_t c) { return c == r; }, Behavior::kMergedWithNext);
    }
    return Status::ok();
  }
};

struct PreBert final : PreTokenizer {
  Status apply(std::vector<Piece>& pieces, Arena&) const override {
    split_all_chars(pieces, text::is_white_space, Behavior::kRemoved);
    split_all_chars(pieces, text::is_punctuation, Behavior::kIsolated);
    return Status::ok();
  }
};

struct PreWhitespace final : PreTokenizer {
  Status apply(std::vector<Piece>& pieces, Arena&) const override {
    return split_all_regex(pieces, whitespace_regex(), true, Behavior::kRemoved);
  }
};

struct PreWhitespaceSplit final : PreTokenizer {
  Status apply(std::vector<Piece>& pieces, Arena&) const override {
    split_all_chars(pieces, text::is_white_space, Behavior::kRemoved);
    return Status::ok();
  }
};

struct PreDigits final : PreTokenizer {
  bool individual = false;
  Status apply(std::vector<Piece>& pieces, Arena&) const override {
    split_all_chars(pieces, text::is_numeric,
                    individual ? Behavior::kIsolated : Behavior::kContiguous);
    return Status::ok();
  }
};

struct PrePunctuation final : PreTokenizer {
  Behavior behavior = Behavior::kIsolated;
  Status apply(std::vector<Piece>& pieces, Arena&) const override {
    split_all_chars(pieces, text::is_punctuation, behavior);
    return Status::ok();
  }
};

Result<std::unique_ptr<PreTokenizer>> pre_from_json(const json& j, const std::string& path,
                                                    const std::string& where, bool is_last,
                                                    bool* model_takes_bytes) {
  if (!j.is_object()) return invalid_argument("{}: {} must be an object or null", where, path);
  const std::string type = type_of(j);
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return invalid_argument("{}: {}.pretokenizers must be a list", where, path);
    }
    auto seq = std::make_unique<PreSequence>();
    for (size_t i = 0; i < it->size(); ++i) {
      ZT_ASSIGN_OR_RETURN(auto step, pre_from_json((*it)[i], fmt::format("{}.pretokenizers[{}]", path, i),
                                                   where, is_last && i + 1 == it->size(),
                                                   model_takes_bytes));
      seq->steps.push_back(std::move(step));
    }
    if (it->empty() && is_last) *model_takes_bytes = false;
    return std::unique_ptr<PreTokenizer>(std::move(seq));
  }
  if (is_last && type != "ByteLevel") *model_takes_bytes = false;
  if (type == "ByteLevel") {
    auto p = std::make_unique<PreByteLevel>();
    ZT_ASSIGN_OR_RETURN(p->add_prefix_space, get_bool(j, "add_prefix_space", true, where, path));
    ZT_ASSIGN_OR_RETURN(p->use_regex, get_bool(j, "use_regex", true, where, path));
    p->map_bytes = !(is_last && *model_takes_bytes);
    return std::unique_ptr<PreTokenizer>(std::move(p));
  }
  if (type == "Split") {
    auto p = std::make_unique<PreSplit>();
    ZT_ASSIGN_OR_RETURN(p->re, get_pattern(j, where, path));
    ZT_ASSIGN_OR_RETURN(p->behavior, get_behavior(j, Behavior::kIsolated, where, path));
    ZT_ASSIGN_OR_RETURN(p->invert, get_bool(j, "invert", false, where, path));
    return std::unique_ptr<PreTokenizer>(std::move(p));
  }
  if (type == "Metaspace") {
    auto p = std::make_unique<PreMetaspace>();
    ZT_ASSIGN_OR_RETURN(p->replacement_cp, get_char(j, "replacement", where, path));
    text::utf8_append(p->replacement, p->replacement_cp);
    ZT_ASSIGN_OR_RETURN(p->scheme, get_prepend_scheme(j, where, path));
    ZT_ASSIGN_OR_RETURN(p->split, get_bool(j, "split", true, where, path));
    return std::unique_ptr<PreTokenizer>(std::move(p));
  }
  if (type == "BertPreTokenizer") return std::unique_ptr<PreTokenizer>(new PreBert());
  if (type == "Whitespace") return std::unique_ptr<PreTokenizer>(new PreWhitespace());
  if (type == "WhitespaceSplit") return std::unique_ptr<PreTokenizer>(new PreWhitespaceSplit());
  if (type == "Digits") {
    auto p = std::make_unique<PreDigits>();
    ZT_ASSIGN_OR_RETURN(p->individual, get_bool(j, "individual_digits", false, where, path));
    return std::unique_ptr<PreTokenizer>(std::move(p));
  }
  if (type == "Punctuation") {
    auto p = std::make_unique<PrePunctuation>();
    ZT_ASSIGN_OR_RETURN(p->behavior, get_behavior(j, Behavior::kIsolated, where, path));
    return std::unique_ptr<PreTokenizer>(std::move(p));
  }
  return unsupported(where, path, "pre-tokenizer", type,
                     "ByteLevel, Split, Metaspace, BertPreTokenizer, Whitespace, "
                     "WhitespaceSplit, Digits, Punctuation, Sequence");
}

// ---------------------------------------------------------------------------------------------
// Post-processors

struct PostIds final : PostProcessor {  // prefix ids ++ sequence ++ suffix ids
  std::vector<int32_t> prefix, suffix;
  void single(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), prefix.begin(), prefix.end());
    ids.insert(ids.end(), suffix.begin(), suffix.end());
  }
};

struct PostSequence final : PostProcessor {
  std::vector<std::unique_ptr<PostProcessor>> steps;
  void single(std::vector<int32_t>& ids) const override {
    for (const auto& s : steps) s->single(ids);
  }
};

Result<int32_t> token_pair_id(const json& j, const char* key, const std::string& where,
                              const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
    return invalid_argument("{}: {}.{} must be [\"token\", id]", where, path, key);
  }
  return (*it)[1].get<int32_t>();
}

Result<std::unique_ptr<PostProcessor>> template_from_json(const json& j, const std::string& path,
                                                          const std::string& where) {
  auto specials = j.find("special_tokens");
  auto ids_of = [&](const std::string& name) -> Result<std::vector<int32_t>> {
    if (specials == j.end() || !specials->is_object() || !specials->contains(name)) {
      return invalid_argument("{}: {}.single uses the special token '{}', which its "
                              "special_tokens does not define",
                              where, path, name);
    }
    const json& e = (*specials)[name];
    auto ids = e.find("ids");
    if (ids == e.end() || !ids->is_array()) {
      return invalid_argument("{}: {}.special_tokens[\"{}\"].ids must be a list", where, path, name);
    }
    std::vector<int32_t> out;
    for (const json& v : *ids) {
      if (!v.is_number_integer()) {
        return invalid_argument("{}: {}.special_tokens[\"{}\"].ids must be integers", where, path,
                                name);
      }
      out.push_back(v.get<int32_t>());
    }
    return out;
  };
  auto p = std::make_unique<PostIds>();
  auto single = j.find("single");
  if (single == j.end()) return invalid_argument("{}: {}.single is missing", where, path);
  bool seen_sequence = false;
  auto add_special = [&](const std::string& name) -> Status {
    ZT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ids_of(name));
    auto& dst = seen_sequence ? p->suffix : p->prefix;
    dst.insert(dst.end(), ids.begin(), ids.end());
    return Status::ok();
  };
  if (single->is_string()) {  // "[CLS] $A [SEP]"
    const std::string s = single->get<std::string>();
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && s[i] == ' ') ++i;
      size_t e = s.find(' ', i);
      if (e == std::string::npos) e = s.size();
      if (e > i) {
        std::string piece = s.substr(i, e - i);
        if (piece[0] == '$') {
          seen_sequence = true;
        } else {
          if (auto colon = piece.rfind(':'); colon != std::string::npos && colon > 0) {
            piece.resize(colon);
          }
          ZT_RETURN_IF_ERROR(add_special(piece));
        }
      }
      i = e;
    }
  } else if (single->is_array()) {
    for (const json& item : *single) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
      } else if (auto st = item.find("SpecialToken"); st != item.end() && st->contains("id") &&
                                                      (*st)["id"].is_string()) {
        ZT_RETURN_IF_ERROR(add_special((*st)["id"].get<std::string>()));
      } else {
        return invalid_argument("{}: {}.single has an item that is neither Sequence nor "
                                "SpecialToken",
                                where, path);
      }
    }
  } else {
    return invalid_argument("{}: {}.single must be a list or a string", where, path);
  }
  return std::unique_ptr<PostProcessor>(std::move(p));
}

Result<std::unique_ptr<PostProcessor>> post_from_json(const json& j, const std::string& path,
                                                      const std::string& where) {
  if (!j.is_object()) return invalid_argument("{}: {} must be an object or null", where, path);
  const std::string type = type_of(j);
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) {
      return invalid_argument("{}: {}.processors must be a list", where, path);
    }
    auto seq = std::make_unique<PostSequence>();
    for (size_t i = 0; i < it->size(); ++i) {
      ZT_ASSIGN_OR_RETURN(auto step, post_from_json((*it)[i], fmt::format("{}.processors[{}]", path, i), where));
      seq->steps.push_back(std::move(step));
    }
    return std::unique_ptr<PostProcessor>(std::move(seq));
  }
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new PostIds());  // offsets only
  if (type == "TemplateProcessing") return template_from_json(j, path, where);
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto p = std::make_unique<PostIds>();
    ZT_ASSIGN_OR_RETURN(int32_t cls, token_pair_id(j, "cls", where, path));
    ZT_ASSIGN_OR_RETURN(int32_t sep, token_pair_id(j, "sep", where, path));
    p->prefix = {cls};
    p->suffix = {sep};
    return std::unique_ptr<PostProcessor>(std::move(p));
  }
  return unsupported(where, path, "post-processor", type,
                     "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence");
}

// ---------------------------------------------------------------------------------------------
// Decoders

struct DecSequence final : Decoder {
  std::vector<std::unique_ptr<Decoder>> steps;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : steps) d->decode_chain(tokens);
  }
};

struct DecByteLevel final : Decoder {
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mine;
      bool ok = true;
      size_t i = 0;
      while (i < t.size()) {
        size_t len = 0;
        const int b = byte_level_byte(text::utf8_next(t, i, &len));
        if (b < 0) {
          ok = false;
          break;
        }
        mine.push_back(static_cast<char>(b));
        i += len;
      }
      bytes += ok ? mine : t;  // a token with another character keeps its own bytes
    }
    tokens.assign(1, text::utf8_lossy(bytes));
  }
};

struct DecMetaspace final : Decoder {
  char32_t replacement = 0x2581;
  Prepend scheme = Prepend::kAlways;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      std::string out;
      size_t k = 0;
      while (k < t.size()) {
        size_t len = 0;
        const char32_t c = text::utf8_next(t, k, &len);
        if (c == replacement) {
          if (!(i == 0 && scheme != Prepend::kNever)) out.push_back(' ');
        } else {
          out.append(t, k, len);
        }
        k += len;
      }
      tokens[i] = std::move(out);
    }
  }
};

struct DecByteFallback final : Decoder {
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (!utf8_invalid_offset(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        auto hex = [](char c) {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          return -1;
        };
        const int hi = hex(t[3]), lo = hex(t[4]);
        if (hi >= 0 && lo >= 0) byte = hi * 16 + lo;
      }
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
};

struct DecFuse final : Decoder {
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

struct DecStrip final : Decoder {
  char32_t content = ' ';
  size_t start = 0, stop = 0;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::pair<size_t, size_t>> chars;  // (offset, length)
      size_t i = 0;
      std::vector<char32_t> cps;
      while (i < t.size()) {
        size_t len = 0;
        cps.push_back(text::utf8_next(t, i, &len));
        chars.emplace_back(i, len);
        i += len;
      }
      size_t start_cut = 0;
      for (size_t k = 0; k < start && k < cps.size(); ++k) {
        if (cps[k] != content) break;
        start_cut = k + 1;
      }
      size_t stop_cut = cps.size();
      for (size_t k = 0; k < stop && k < cps.size(); ++k) {
        const size_t idx = cps.size() - k - 1;
        if (cps[idx] != content) break;
        stop_cut = idx;
      }
      if (stop_cut <= start_cut) {
        t.clear();
      } else {
        const size_t b = chars[start_cut].first;
        const size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
        t = t.substr(b, e - b);
      }
    }
  }
};

struct DecReplace final : Decoder {
  std::shared_ptr<const text::Regex> pattern;
  std::string content;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      size_t prev = 0;
      const Status st = pattern->for_each_match(t, [&](size_t b, size_t e) {
        out.append(t, prev, b - prev);
        out += content;
        prev = e;
      });
      if (!st.is_ok()) continue;  // keep the token as it is
      out.append(t, prev, std::string::npos);
      t.swap(out);
    }
  }
};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t prev = 0, pos;
  while ((pos = s.find(from, prev)) != std::string::npos) {
    out.append(s, prev, pos - prev);
    out += to;
    prev = pos + from.size();
  }
  out.append(s, prev, std::string::npos);
  s.swap(out);
}

struct DecWordPiece final : Decoder {
  std::string prefix = "##";
  bool cleanup = true;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix.size(), prefix) == 0) {
          t.erase(0, prefix.size());
        } else {
          t = std::string(" ") + t;
        }
      }
      if (cleanup) {
        static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
            {" .", "."},    {" ?", "?"},     {" !", "!"},           {" ,", ","},
            {" ' ", "'"},   {" n't", "n't"}, {" 'm", "'m"},         {" do not", " don't"},
            {" 's", "'s"},  {" 've", "'ve"}, {" 're", "'re"}};
        for (const auto& [from, to] : kRules) replace_all(t, from, to);
      }
    }
  }
};

struct DecBpe final : Decoder {
  std::string suffix = "</w>";
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      replace_all(tokens[i], suffix, i + 1 == tokens.size() ? "" : " ");
    }
  }
};

Result<std::unique_ptr<Decoder>> dec_from_json(const json& j, const std::string& path,
                                               const std::string& where) {
  if (!j.is_object()) return invalid_argument("{}: {} must be an object or null", where, path);
  const std::string type = type_of(j);
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) {
      return invalid_argument("{}: {}.decoders must be a list", where, path);
    }
    auto seq = std::make_unique<DecSequence>();
    for (size_t i = 0; i < it->size(); ++i) {
      ZT_ASSIGN_OR_RETURN(auto step, dec_from_json((*it)[i], fmt::format("{}.decoders[{}]", path, i), where));
      seq->steps.push_back(std::move(step));
    }
    return std::unique_ptr<Decoder>(std::move(seq));
  }
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new DecByteLevel());
  if (type == "Metaspace") {
    auto d = std::make_unique<DecMetaspace>();
    ZT_ASSIGN_OR_RETURN(d->replacement, get_char(j, "replacement", where, path));
    ZT_ASSIGN_OR_RETURN(d->scheme, get_prepend_scheme(j, where, path));
    return std::unique_ptr<Decoder>(std::move(d));
  }
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new DecByteFallback());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new DecFuse());
  if (type == "Strip") {
    auto d = std::make_unique<DecStrip>();
    ZT_ASSIGN_OR_RETURN(d->content, get_char(j, "content", where, path));
    ZT_ASSIGN_OR_RETURN(int64_t start, get_int(j, "start", 0, where, path));
    ZT_ASSIGN_OR_RETURN(int64_t stop, get_int(j, "stop", 0, where, path));
    if (start < 0 || stop < 0) return invalid_argument("{}: {}.start/stop must be >= 0", where, path);
    d->start = static_cast<size_t>(start);
    d->stop = static_cast<size_t>(stop);
    return std::unique_ptr<Decoder>(std::move(d));
  }
  if (type == "Replace") {
    auto d = std::make_unique<DecReplace>();
    ZT_ASSIGN_OR_RETURN(d->pattern, get_pattern(j, where, path));
    ZT_ASSIGN_OR_RETURN(d->content, get_string(j, "content", where, path));
    return std::unique_ptr<Decoder>(std::move(d));
  }
  if (type == "WordPiece") {
    auto d = std::make_unique<DecWordPiece>();
    if (j.contains("prefix")) {
      ZT_ASSIGN_OR_RETURN(d->prefix, get_string(j, "prefix", where, path));
    }
    ZT_ASSIGN_OR_RETURN(d->cleanup, get_bool(j, "cleanup", true, where, path));
    return std::unique_ptr<Decoder>(std::move(d));
  }
  if (type == "BPEDecoder") {
    auto d = std::make_unique<DecBpe>();
    if (j.contains("suffix")) {
      ZT_ASSIGN_OR_RETURN(d->suffix, get_string(j, "suffix", where, path));
    }
    return std::unique_ptr<Decoder>(std::move(d));
  }
  return unsupported(where, path, "decoder", type,
                     "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, WordPiece, "
                     "BPEDecoder, Sequence");
}

Result<std::unique_ptr<Normalizer>> norm_from_json(const json& j, const std::string& path,
                                                   const std::string& where) {
  if (!j.is_object()) return invalid_argument("{}: {} must be an object or null", where, path);
  const std::string type = type_of(j);
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) {
      return invalid_argument("{}: {}.normalizers must be a list", where, path);
    }
    auto seq = std::make_unique<NormSequence>();
    for (size_t i = 0; i < it->size(); ++i) {
      ZT_ASSIGN_OR_RETURN(auto step, norm_from_json((*it)[i], fmt::format("{}.normalizers[{}]", path, i), where));
      seq->steps.push_back(std::move(step));
    }
    return std::unique_ptr<Normalizer>(std::move(seq));
  }
  if (type == "NFC") return std::unique_ptr<Normalizer>(new NormUnicode(text::NormForm::kNFC));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new NormUnicode(text::NormForm::kNFD));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new NormUnicode(text::NormForm::kNFKC));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new NormUnicode(text::NormForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new NormLowercase());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new NormStripAccents());
  if (type == "Strip") {
    auto n = std::make_unique<NormStrip>();
    ZT_ASSIGN_OR_RETURN(n->left, get_bool(j, "strip_left", true, where, path));
    ZT_ASSIGN_OR_RETURN(n->right, get_bool(j, "strip_right", true, where, path));
    return std::unique_ptr<Normalizer>(std::move(n));
  }
  if (type == "Prepend") {
    auto n = std::make_unique<NormPrepend>();
    ZT_ASSIGN_OR_RETURN(n->prefix, get_string(j, "prepend", where, path));
    return std::unique_ptr<Normalizer>(std::move(n));
  }
  if (type == "Replace") {
    auto n = std::make_unique<NormReplace>();
    ZT_ASSIGN_OR_RETURN(n->pattern, get_pattern(j, where, path));
    ZT_ASSIGN_OR_RETURN(n->content, get_string(j, "content", where, path));
    return std::unique_ptr<Normalizer>(std::move(n));
  }
  if (type == "BertNormalizer") {
    auto n = std::make_unique<NormBert>();
    ZT_ASSIGN_OR_RETURN(n->clean_text, get_bool(j, "clean_text", true, where, path));
    ZT_ASSIGN_OR_RETURN(n->chinese, get_bool(j, "handle_chinese_chars", true, where, path));
    ZT_ASSIGN_OR_RETURN(n->lower, get_bool(j, "lowercase", true, where, path));
    ZT_ASSIGN_OR_RETURN(n->strip_accents, get_bool(j, "strip_accents", n->lower, where, path));
    return std::unique_ptr<Normalizer>(std::move(n));
  }
  if (type == "ByteLevel") return std::unique_ptr<Normalizer>(new NormByteLevel());
  return unsupported(where, path, "normalizer", type,
                     "BertNormalizer, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, "
                     "Prepend, Replace, ByteLevel, Sequence");
}

}  // namespace

Result<std::unique_ptr<Normalizer>> normalizer_from_json(const json& j, const std::string& path,
                                                         const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  return norm_from_json(j, path, where);
}

Result<std::unique_ptr<PreTokenizer>> pre_tokenizer_from_json(const json& j,
                                                              const std::string& path,
                                                              const std::string& where,
                                                              bool* model_takes_bytes) {
  if (j.is_null()) {
    *model_takes_bytes = false;
    return std::unique_ptr<PreTokenizer>();
  }
  return pre_from_json(j, path, where, true, model_takes_bytes);
}

Result<std::unique_ptr<PostProcessor>> post_processor_from_json(const json& j,
                                                                const std::string& path,
                                                                const std::string& where) {
  if (j.is_null()) return std::unique_ptr<PostProcessor>();
  return post_from_json(j, path, where);
}

Result<std::unique_ptr<Decoder>> decoder_from_json(const json& j, const std::string& path,
                                                   const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  return dec_from_json(j, path, where);
}

}  // namespace zt::tok
