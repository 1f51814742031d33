// JSON Lines datasets (jsonl_dataset.h): the mapped file and its line index, the record
// formats and their tokenization, and the per-epoch order, sharding, padding and packing.
#include "zt/data/jsonl_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "zt/core/assert.h"
#include "zt/core/file_io.h"
#include "zt/core/json_limits.h"

namespace zt {
namespace {

constexpr int32_t kIgnore = -100;

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

// The key whose string holds byte `offset` of a JSON object's text (a light scan of strings
// and nesting, enough for a message), or "" when the byte is not in a top-level value.
std::string key_at(std::string_view line, size_t offset) {
  std::string key, last_string;
  int depth = 0;
  bool in_string = false, escape = false;
  size_t string_start = 0;
  for (size_t i = 0; i < line.size() && i <= offset; ++i) {
    const char c = line[i];
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
        last_string.assign(line.substr(string_start, i - string_start));
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      string_start = i + 1;
    } else if (c == ':' && depth == 1) {
      key = last_string;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return depth >= 1 ? key : "";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// JsonlFile

Result<JsonlFile> JsonlFile::open(const std::string& path) {
  ZT_RETURN_IF_ERROR(input_file_check(path, "JSON Lines file"));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("JSON Lines file '{}' does not exist", path);
    return io_error("cannot open JSON Lines file '{}': {}", path, errno_text());
  }
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return io_error("cannot stat JSON Lines file '{}': {}", path, errno_text());
  }
  if (st.st_size == 0) {
    return invalid_argument("JSON Lines file '{}' is empty; expected one JSON object per line",
                            path);
  }
  JsonlFile f;
  f.path_ = path;
  void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    return io_error("cannot memory-map JSON Lines file '{}' ({} bytes): {}", path, st.st_size,
                    errno_text());
  }
  f.map_ = map;
  f.map_bytes_ = static_cast<size_t>(st.st_size);
  ZT_RETURN_IF_ERROR(f.index());
  return f;
}

Result<JsonlFile> JsonlFile::from_memory(std::string bytes, const std::string& name) {
  JsonlFile f;
  f.path_ = name;
  f.owned_ = std::move(bytes);
  ZT_RETURN_IF_ERROR(f.index());
  return f;
}

JsonlFile::JsonlFile(JsonlFile&& other) noexcept {
  *this = std::move(other);
}

JsonlFile& JsonlFile::operator=(JsonlFile&& other) noexcept {
  if (this == &other) return *this;
  release();
  path_ = std::move(other.path_);
  map_ = std::exchange(other.map_, nullptr);
  map_bytes_ = std::exchange(other.map_bytes_, 0);
  owned_ = std::move(other.owned_);
  starts_ = std::move(other.starts_);
  blank_runs_ = std::move(other.blank_runs_);
  return *this;
}

JsonlFile::~JsonlFile() {
  release();
}

void JsonlFile::release() {
  if (map_ != nullptr) {
    ZT_ASSERT(::munmap(map_, map_bytes_) == 0, "munmap '{}': {}", path_, errno_text());
  }
  map_ = nullptr;
  map_bytes_ = 0;
}

std::string_view JsonlFile::bytes() const {
  if (map_ != nullptr) return {static_cast<const char*>(map_), map_bytes_};
  return owned_;
}

// One pass over the bytes with memchr; only offsets are kept.
Status JsonlFile::index() {
  const std::string_view all = bytes();
  size_t start = all.starts_with("\xEF\xBB\xBF") ? 3 : 0;  // a byte-order mark
  int64_t line = 0, blanks = 0;
  while (start < all.size()) {
    ++line;
    const void* nl = std::memchr(all.data() + start, '\n', all.size() - start);
    const size_t end =
        nl ? static_cast<size_t>(static_cast<const char*>(nl) - all.data()) : all.size();
    if (is_blank(all.substr(start, end - start))) {
      ++blanks;
    } else {
      if (blanks > 0 && (blank_runs_.empty() || blank_runs_.back().second != blanks)) {
        blank_runs_.emplace_back(size(), blanks);
      }
      starts_.push_back(start);
    }
    start = end + 1;
  }
  if (starts_.empty()) {
    return invalid_argument(
        "JSON Lines file '{}' has no records ({} blank lines); expected one JSON object per line",
        path_, line);
  }
  return Status::ok();
}

int64_t JsonlFile::line_number(int64_t i) const {
  ZT_ASSERT(i >= 0 && i < size(), "line {} of {} in '{}'", i, size(), path_);
  // The last run starting at or before i.
  auto it = std::upper_bound(blank_runs_.begin(), blank_runs_.end(), i,
                             [](int64_t v, const auto& run) { return v < run.first; });
  const int64_t blanks = it == blank_runs_.begin() ? 0 : std::prev(it)->second;
  return i + 1 + blanks;
}

std::string JsonlFile::location(int64_t i) const {
  return fmt::format("{}:{}", path_, line_number(i));
}

std::string_view JsonlFile::text(int64_t i) const {
  ZT_ASSERT(i >= 0 && i < size(), "line {} of {} in '{}'", i, size(), path_);
  const std::string_view all = bytes();
  const size_t start = starts_[static_cast<size_t>(i)];
  const void* nl = std::memchr(all.data() + start, '\n', all.size() - start);
  size_t end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - all.data()) : all.size();
  if (end > start && all[end - 1] == '\r') --end;
  return all.substr(start, end - start);
}

Result<nlohmann::json> JsonlFile::parse(int64_t i) const {
  const std::string where = location(i);
  const std::string_view line = text(i);
  if (std::optional<size_t> bad = utf8_invalid_offset(line)) {
    const std::string key = key_at(line, *bad);
    return invalid_argument("{}: not a JSON object (invalid UTF-8 at byte offset {} of the line{})",
                            where, *bad, key.empty() ? "" : ", in '" + key + "'");
  }
  if (!json_nesting_check(line, where).is_ok()) {
    return invalid_argument("{}: not a JSON object (nested more than {} levels deep)", where,
                            kJsonMaxDepth);
  }
  nlohmann::json row;
  try {
    row = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("{}: not a JSON object (not valid JSON: {})", where, e.what());
  }
  if (!row.is_object()) {
    return invalid_argument("{}: not a JSON object (found a JSON {})", where, row.type_name());
  }
  return row;
}

// ---------------------------------------------------------------------------------------------
// Records

namespace {

Result<std::vector<int32_t>> int_array(const nlohmann::json& row, const char* key,
                                       const std::string& where, size_t length, int64_t lo,
                                       int64_t hi, std::optional<int64_t> also_ok) {
  const nlohmann::json& a = row[key];
  if (!a.is_array()) {
    return invalid_argument("{}: '{}' must be an array of integers, found {}", where, key,
                            a.type_name());
  }
  if (length != 0 && a.size() != length) {
    return invalid_argument("{}: '{}' has {} values but input_ids has {}", where, key, a.size(),
                            length);
  }
  std::vector<int32_t> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number_integer()) {
      return invalid_argument("{}: '{}'[{}] is not an integer", where, key, i);
    }
    // An unsigned value past int64 reads as negative here, so it is refused with the rest.
    const int64_t v = a[i].get<int64_t>();
    if ((v < lo || v >= hi) && v != also_ok) {
      return invalid_argument("{}: '{}'[{}] = {} is outside [{}, {})", where, key, i, a[i].dump(),
                              lo, hi);
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

const JsonlFormatInfo& format_info(JsonlFormat f) {
  for (const JsonlFormatInfo& info : kJsonlFormats) {
    if (info.format == f) return info;
  }
  ZT_ASSERT(false, "JsonlFormat {} missing from kJsonlFormats", static_cast<int>(f));
  return kJsonlFormats[0];
}

std::string format_keys(JsonlFormat f) {
  std::string s;
  for (const char* k : format_info(f).keys) {
    if (k != nullptr) s += (s.empty() ? "'" : " + '") + std::string(k) + "'";
  }
  return s;
}

// The first format (in kJsonlFormats' order) whose keys `row` has.
std::optional<JsonlFormat> format_detect(const nlohmann::json& row) {
  for (const JsonlFormatInfo& info : kJsonlFormats) {
    if (info.format == JsonlFormat::kAuto) continue;
    bool all = true;
    for (const char* k : info.keys) all = all && (k == nullptr || row.contains(k));
    if (all) return info.format;
  }
  return std::nullopt;
}

Result<std::string_view> string_field(const nlohmann::json& row, const char* key,
                                      const std::string& where, JsonlFormat f) {
  auto it = row.find(key);
  if (it == row.end()) {
    return invalid_argument("{}: no '{}' (format '{}' needs {})", where, key, jsonl_format_name(f),
                            format_keys(f));
  }
  if (!it->is_string()) {
    return invalid_argument("{}: '{}' must be a string, found {}", where, key, it->type_name());
  }
  const std::string& s = it->get_ref<const std::string&>();
  // The JSON parser already refuses invalid UTF-8; this keeps the tokenizer's contract local.
  if (std::optional<size_t> bad = utf8_invalid_offset(s)) {
    return invalid_argument("{}: '{}' is not valid UTF-8 (at byte offset {} of its value)", where,
                            key, *bad);
  }
  return std::string_view(s);
}

}  // namespace

Result<TokenExample> jsonl_tokens_read(const nlohmann::json& row, const std::string& where,
                                       int64_t vocab_size) {
  const int64_t hi = vocab_size > 0 ? vocab_size : (int64_t{1} << 31) - 1;
  if (!row.contains("input_ids")) return invalid_argument("{}: no 'input_ids'", where);
  TokenExample e;
  ZT_ASSIGN_OR_RETURN(e.input_ids, int_array(row, "input_ids", where, 0, 0, hi, std::nullopt));
  if (e.input_ids.empty()) return invalid_argument("{}: 'input_ids' is empty", where);
  const size_t n = e.input_ids.size();
  if (row.contains("labels")) {
    ZT_ASSIGN_OR_RETURN(e.labels, int_array(row, "labels", where, n, 0, hi, kIgnore));
  }
  if (row.contains("attention_mask")) {
    ZT_ASSIGN_OR_RETURN(e.attention_mask,
                        int_array(row, "attention_mask", where, n, 0, 2, std::nullopt));
  }
  if (row.contains("token_type_ids")) {
    ZT_ASSIGN_OR_RETURN(e.token_type_ids, int_array(row, "token_type_ids", where, n, 0,
                                                    int64_t{1} << 16, std::nullopt));
  }
  return e;
}

const char* jsonl_format_name(JsonlFormat f) {
  return format_info(f).name;
}

Result<JsonlFormat> jsonl_format_parse(std::string_view name) {
  std::string names;
  for (const JsonlFormatInfo& info : kJsonlFormats) {
    if (name == info.name) return info.format;
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  }
  return invalid_argument("unknown JSON Lines format '{}'; expected one of: {}", name, names);
}

// ---------------------------------------------------------------------------------------------
// JsonlDataset

// One epoch's rows for this rank (kPad: one example a row) and the batch count every rank
// agrees on; kept for the last epoch asked for, so a batch costs no pass over the dataset.
struct JsonlDataset::Plan {
  std::mutex mu;
  int64_t epoch = -1;
  std::vector<std::vector<int64_t>> rows;
  int64_t num_batches = 0;
  std::vector<int64_t> epoch_ends;  // batch_at: batches before the end of epoch 0, 1, ...
};

JsonlDataset::JsonlDataset(JsonlDataset&&) noexcept = default;
JsonlDataset& JsonlDataset::operator=(JsonlDataset&&) noexcept = default;
JsonlDataset::~JsonlDataset() = default;

Result<JsonlDataset> JsonlDataset::open(const std::string& path,
                                        std::shared_ptr<const Tokenizer> tokenizer,
                                        const JsonlDatasetOptions& options) {
  ZT_ASSIGN_OR_RETURN(JsonlFile file, JsonlFile::open(path));
  return create(std::move(file), std::move(tokenizer), options);
}

Result<JsonlDataset> JsonlDataset::create(JsonlFile file,
                                          std::shared_ptr<const Tokenizer> tokenizer,
                                          const JsonlDatasetOptions& options) {
  const std::string& path = file.path();
  if (options.seq_len < 1 || options.seq_len > (int64_t{1} << 30)) {
    return invalid_argument("JSON Lines dataset '{}': seq_len must be in [1, 2^30], got {}", path,
                            options.seq_len);
  }
  if (options.batch_size < 1) {
    return invalid_argument("JSON Lines dataset '{}': batch_size must be >= 1, got {}", path,
                            options.batch_size);
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument("JSON Lines dataset '{}': rank {} is outside world size {}", path,
                            options.rank, options.world_size);
  }
  JsonlDataset d;
  d.tokenizer_ = std::move(tokenizer);
  d.options_ = options;
  d.format_ = options.format;
  d.plan_ = std::make_unique<Plan>();
  if (d.tokenizer_ && d.tokenizer_->special_ids().eos) {
    d.eos_id_ = d.tokenizer_->special_ids().eos;
  } else {
    d.eos_id_ = options.eos_id;
  }
  if (d.tokenizer_ && d.tokenizer_->special_ids().pad) {
    d.pad_id_ = *d.tokenizer_->special_ids().pad;
  } else {
    d.pad_id_ = d.eos_id_.value_or(0);
  }
  d.vocab_size_ = options.vocab_size > 0 ? options.vocab_size
                  : d.tokenizer_         ? d.tokenizer_->vocab_size()
                                         : 0;
  d.file_ = std::move(file);

  // Every record once: its format, its length, whether it is usable.
  for (int64_t i = 0; i < d.file_.size(); ++i) {
    Result<JsonlExample> e = [&]() -> Result<JsonlExample> {
      ZT_ASSIGN_OR_RETURN(nlohmann::json row, d.file_.parse(i));
      if (d.format_ == JsonlFormat::kAuto) {
        std::optional<JsonlFormat> f = format_detect(row);
        if (!f) {
          std::string keys;
          for (const auto& [k, v] : row.items()) keys += (keys.empty() ? "'" : ", '") + k + "'";
          return invalid_argument(
              "{}: cannot tell the record format from its keys ({}); expected 'prompt' + "
              "'response', 'prompt' + 'chosen' [+ 'rejected'], 'text' or 'input_ids'",
              d.file_.location(i), keys.empty() ? "none" : keys);
        }
        d.format_ = *f;
      }
      return d.convert(row, i);
    }();
    if (!e.is_ok()) {
      if (options.bad_records == BadRecords::kFail) return e.status();
      if (d.skipped_++ == 0) d.first_skipped_ = e.status().message();
      continue;
    }
    d.records_.push_back(i);
    d.lengths_.push_back(static_cast<int32_t>(e->sequences[0].input_ids.size()));
    d.truncated_ += e->truncated ? 1 : 0;
  }
  if (d.records_.empty()) {
    return invalid_argument(
        "JSON Lines dataset '{}': no usable records ({} bad lines skipped; "
        "the first: {})",
        path, d.skipped_, d.first_skipped_);
  }
  if (d.format_ == JsonlFormat::kPairs && options.layout == RowLayout::kPack) {
    return invalid_argument(
        "JSON Lines dataset '{}': pairs (prompt + chosen + rejected) cannot be packed; use "
        "padded rows, or format 'prompt_chosen' for fine-tuning on the chosen responses",
        path);
  }
  return d;
}

// The format's tokenization (docs/data.md): prompt ++ response ++ [eos] with the prompt masked;
// text ++ [eos] (text alone with its special tokens when text_eos is off); pre-tokenized records
// as they are. Then truncation to seq_len.
Result<JsonlExample> JsonlDataset::convert(const nlohmann::json& row, int64_t line_index) const {
  const std::string where = file_.location(line_index);
  JsonlExample out;
  out.line = file_.line_number(line_index);
  if (format_ == JsonlFormat::kTokens) {
    ZT_ASSIGN_OR_RETURN(TokenExample t, jsonl_tokens_read(row, where, vocab_size_));
    if (t.labels.empty()) t.labels = t.input_ids;
    out.sequences.push_back(std::move(t));
  } else {
    if (!tokenizer_) {
      return invalid_argument("{}: format '{}' needs a tokenizer", where,
                              jsonl_format_name(format_));
    }
    const bool needs_eos = format_ != JsonlFormat::kText || options_.text_eos;
    if (needs_eos && !eos_id_) {
      return invalid_argument(
          "{}: the tokenizer ({}) has no end-of-text token; name one (the eos id option)", where,
          tokenizer_->describe());
    }
    auto encode = [&](std::string_view text, const char* key, bool special,
                      std::vector<int32_t>& ids) -> Status {
      Status s = tokenizer_->encode_append(text, special, ids);
      if (!s.is_ok()) return invalid_argument("{}: '{}': {}", where, key, s.message());
      return Status::ok();
    };
    if (format_ == JsonlFormat::kText) {
      ZT_ASSIGN_OR_RETURN(std::string_view text, string_field(row, "text", where, format_));
      TokenExample t;
      ZT_RETURN_IF_ERROR(encode(text, "text", true, t.input_ids));
      if (options_.text_eos) t.input_ids.push_back(*eos_id_);
      t.labels = t.input_ids;
      out.sequences.push_back(std::move(t));
    } else {
      ZT_ASSIGN_OR_RETURN(std::string_view prompt, string_field(row, "prompt", where, format_));
      std::vector<const char*> answers;
      if (format_ == JsonlFormat::kPromptResponse) answers = {"response"};
      if (format_ == JsonlFormat::kPromptChosen) answers = {"chosen"};
      if (format_ == JsonlFormat::kPairs) answers = {"chosen", "rejected"};
      for (const char* key : answers) {
        ZT_ASSIGN_OR_RETURN(std::string_view answer, string_field(row, key, where, format_));
        TokenExample t;
        ZT_RETURN_IF_ERROR(encode(prompt, "prompt", true, t.input_ids));
        const size_t prompt_len = t.input_ids.size();
        ZT_RETURN_IF_ERROR(encode(answer, key, false, t.input_ids));
        t.input_ids.push_back(*eos_id_);
        t.labels = t.input_ids;
        if (options_.prompt_labels == PromptLabels::kMasked) {
          std::fill_n(t.labels.begin(), prompt_len, kIgnore);
        }
        out.sequences.push_back(std::move(t));
      }
    }
  }
  const auto T = static_cast<size_t>(options_.seq_len);
  for (TokenExample& t : out.sequences) {
    if (t.input_ids.size() <= T) continue;
    out.truncated = true;
    t.input_ids.resize(T);
    t.labels.resize(T);
    if (!t.attention_mask.empty()) t.attention_mask.resize(T);
    if (!t.token_type_ids.empty()) t.token_type_ids.resize(T);
  }
  return out;
}

Result<JsonlExample> JsonlDataset::example(int64_t i) const {
  ZT_ASSERT(i >= 0 && i < size(), "example {} of {} in '{}'", i, size(), file_.path());
  const int64_t line_index = records_[static_cast<size_t>(i)];
  ZT_ASSIGN_OR_RETURN(nlohmann::json row, file_.parse(line_index));
  return convert(row, line_index);
}

int64_t JsonlDataset::line_number(int64_t i) const {
  ZT_ASSERT(i >= 0 && i < size(), "example {} of {} in '{}'", i, size(), file_.path());
  return file_.line_number(records_[static_cast<size_t>(i)]);
}

std::vector<int64_t> JsonlDataset::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(records_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (options_.order == SampleOrder::kRandom) {
    std::mt19937_64 rng(batch_seed(options_.seed, epoch));
    for (size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[random_below(rng, i)]);
    }
  }
  return order;
}

std::vector<int64_t> JsonlDataset::shard(int64_t epoch) const {
  const std::vector<int64_t> order = epoch_order(epoch);
  std::vector<int64_t> mine;
  for (size_t i = static_cast<size_t>(options_.rank); i < order.size();
       i += static_cast<size_t>(options_.world_size)) {
    mine.push_back(order[i]);
  }
  return mine;
}

const JsonlDataset::Plan& JsonlDataset::plan(int64_t epoch) const {
  Plan& p = *plan_;  // the caller holds p.mu
  if (p.epoch == epoch) return p;
  const std::vector<int64_t> order = epoch_order(epoch);
  const auto W = static_cast<size_t>(options_.world_size);
  const auto T = static_cast<int64_t>(options_.seq_len);
  p.rows.clear();
  if (options_.layout == RowLayout::kPad) {
    for (size_t i = static_cast<size_t>(options_.rank); i < order.size(); i += W) {
      p.rows.push_back({order[i]});
    }
    p.num_batches = (size() / options_.world_size) / options_.batch_size;
    p.epoch = epoch;
    return p;
  }
  int64_t fewest_rows = -1;
  // Every rank's packing is counted (lengths only) so that all agree on the batch count.
  for (size_t r = 0; r < W; ++r) {
    std::vector<std::vector<int64_t>> rows;
    int64_t used = T;  // tokens in the current row; T forces a first row
    for (size_t i = r; i < order.size(); i += W) {
      const int64_t len = lengths_[static_cast<size_t>(order[i])];
      if (used + len > T) {
        rows.emplace_back();
        used = 0;
      }
      rows.back().push_back(order[i]);
      used += len;
    }
    const auto n = static_cast<int64_t>(rows.size());
    fewest_rows = fewest_rows < 0 ? n : std::min(fewest_rows, n);
    if (static_cast<int>(r) == options_.rank) p.rows = std::move(rows);
  }
  p.num_batches = fewest_rows / options_.batch_size;
  p.epoch = epoch;
  return p;
}

int64_t JsonlDataset::num_batches(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(plan_->mu);
  return plan(epoch).num_batches;
}

Result<JsonlBatch> JsonlDataset::batch_at(int64_t g) const {
  int64_t epoch = 0, first = 0;
  {
    std::lock_guard<std::mutex> lock(plan_->mu);
    std::vector<int64_t>& ends = plan_->epoch_ends;
    while (ends.empty() || ends.back() <= g) {
      const int64_t n = plan(static_cast<int64_t>(ends.size())).num_batches;
      if (n < 1) {
        return invalid_argument("{}: epoch {} has no whole batch of {} rows on each of {} rank(s)",
                                file_.path(), ends.size(), options_.batch_size,
                                options_.world_size);
      }
      ends.push_back((ends.empty() ? 0 : ends.back()) + n);
    }
    epoch = std::upper_bound(ends.begin(), ends.end(), g) - ends.begin();
    first = epoch == 0 ? 0 : ends[static_cast<size_t>(epoch - 1)];
  }
  return batch(epoch, g - first);
}

// Row `row` of `out` from `examples` laid end to end (one example unless packing). In a packed
// row each example's first label is -100: under the model's shift it would be the target of the
// previous example's last token, which must not learn to predict across the boundary.
Status JsonlDataset::fill_row(JsonlBatch& out, int64_t row,
                              const std::vector<int64_t>& examples) const {
  const int64_t T = out.T;
  std::vector<int32_t> bounds = {0};
  int64_t at = 0;
  for (int64_t idx : examples) {
    ZT_ASSIGN_OR_RETURN(JsonlExample e, example(idx));
    const TokenExample& t = e.sequences[0];
    const auto len = static_cast<int64_t>(t.input_ids.size());
    if (at + len > T || len != lengths_[static_cast<size_t>(idx)]) {
      return invalid_argument("{}:{}: the record changed since the dataset was opened",
                              file_.path(), e.line);
    }
    const int64_t base = row * T + at;
    for (int64_t k = 0; k < len; ++k) {
      out.input_ids[base + k] = t.input_ids[k];
      out.labels[base + k] = t.labels[k];
      out.attention_mask[base + k] = t.attention_mask.empty() ? 1 : t.attention_mask[k];
      out.position_ids[base + k] = static_cast<int32_t>(k);
    }
    if (options_.layout == RowLayout::kPack) out.labels[base] = kIgnore;
    at += len;
    bounds.push_back(static_cast<int32_t>(at));
    out.examples.push_back(idx);
  }
  out.boundaries[static_cast<size_t>(row)] = std::move(bounds);
  return Status::ok();
}

Result<JsonlBatch> JsonlDataset::batch(int64_t epoch, int64_t b) const {
  const int64_t B = options_.batch_size;
  std::vector<std::vector<int64_t>> rows;
  {
    std::lock_guard<std::mutex> lock(plan_->mu);
    const Plan& p = plan(epoch);
    if (b < 0 || b >= p.num_batches) {
      return invalid_argument(
          "JSON Lines dataset '{}': batch {} of epoch {} does not exist ({} batches)", file_.path(),
          b, epoch, p.num_batches);
    }
    rows.assign(p.rows.begin() + b * B, p.rows.begin() + (b + 1) * B);
  }
  JsonlBatch out;
  out.T = options_.seq_len;
  const bool pairs = format_ == JsonlFormat::kPairs;
  out.B = pairs ? 2 * B : B;
  const auto cells = static_cast<size_t>(out.B * out.T);
  out.input_ids.assign(cells, pad_id_);
  out.labels.assign(cells, kIgnore);
  out.attention_mask.assign(cells, 0);
  out.position_ids.assign(cells, 0);
  out.boundaries.resize(static_cast<size_t>(out.B));
  for (int64_t r = 0; r < B; ++r) {
    ZT_RETURN_IF_ERROR(fill_row(out, r, rows[static_cast<size_t>(r)]));
  }
  if (pairs) {
    // DeepSpeed-Chat's reward collator: the B chosen rows, then the B rejected rows.
    for (int64_t r = 0; r < B; ++r) {
      const int64_t idx = rows[static_cast<size_t>(r)][0];
      ZT_ASSIGN_OR_RETURN(JsonlExample e, example(idx));
      const TokenExample& t = e.sequences[1];
      const int64_t base = (B + r) * out.T;
      for (size_t k = 0; k < t.input_ids.size(); ++k) {
        out.input_ids[base + k] = t.input_ids[k];
        out.labels[base + k] = t.labels[k];
        out.attention_mask[base + k] = 1;
        out.position_ids[base + k] = static_cast<int32_t>(k);
      }
      out.boundaries[static_cast<size_t>(B + r)] = {0, static_cast<int32_t>(t.input_ids.size())};
    }
  }
  return out;
}

}  // namespace zt
