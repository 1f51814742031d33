// `zt data prepare` (prepare.h): input expansion and the pipeline (inputs read through
// compressed_input.h): one reader thread cuts the inputs into batches of pieces, worker threads
// encode batches, the calling thread writes the results in batch order (so the output never
// depends on the number of workers).
#include "zt/data/prepare.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <thread>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "zt/core/assert.h"
#include "zt/core/json_limits.h"
#include "zt/core/log.h"
#include "zt/data/compressed_input.h"
#include "zt/data/token_file.h"
#include "zt/data/tokenizer/byte_tokenizer.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// Input expansion.

// The identity of a file for de-duplication: its canonical path (symlinks resolved), or the
// lexical absolute path when it does not exist yet (the output).
std::string file_identity(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  if (ec) c = fs::absolute(p, ec).lexically_normal();
  return c.string();
}

// Appends the files under `folder` (rules in prepare.h) to `files`, skipping identities already
// in `seen` and the outputs, and recording the new ones.
Status expand_folder(const std::string& folder, const std::set<std::string>& output_ids,
                     std::set<std::string>& seen, std::vector<std::string>& files) {
  std::vector<fs::path> regular;
  std::vector<fs::path> links;
  std::error_code ec;
  fs::recursive_directory_iterator it(folder, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& e = *it;
    std::error_code st_ec;
    if (e.is_symlink(st_ec)) {
      links.push_back(e.path());
    } else if (e.is_regular_file(st_ec)) {
      regular.push_back(e.path());
    }
    // Sockets, fifos, devices: not text; skipped.
  }
  if (ec) return io_error("reading input folder '{}': {}", folder, ec.message());

  // Real files claim their identities first, so a symlink sorting before its target
  // (GPL -> GPL-3) is the one dropped, whatever the order.
  std::sort(regular.begin(), regular.end());
  std::sort(links.begin(), links.end());
  std::vector<fs::path> chosen;
  for (const fs::path& p : regular) {
    const std::string id = file_identity(p);
    if (output_ids.count(id) != 0) continue;
    if (seen.insert(id).second) chosen.push_back(p);
  }
  for (const fs::path& p : links) {
    std::error_code st_ec;
    if (!fs::is_regular_file(p, st_ec)) continue;  // dangling, or a link to a folder
    const std::string id = file_identity(p);
    if (output_ids.count(id) != 0) continue;
    if (seen.insert(id).second) chosen.push_back(p);
  }
  std::sort(chosen.begin(), chosen.end());
  for (const fs::path& p : chosen) files.push_back(p.string());
  return Status::ok();
}

Result<std::vector<std::string>> expand_inputs(const std::vector<std::string>& inputs,
                                               const std::vector<std::string>& outputs) {
  if (inputs.empty()) return invalid_argument("data prepare: no input files or folders given");
  std::set<std::string> output_ids;
  for (const std::string& o : outputs) output_ids.insert(file_identity(o));
  std::set<std::string> seen;
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);  // follows symlinks
    if (ec || !fs::exists(st)) {
      return not_found("data prepare: input '{}' does not exist", input);
    }
    if (fs::is_regular_file(st)) {
      const std::string id = file_identity(input);
      if (output_ids.count(id) != 0) {
        return invalid_argument(
            "data prepare: input '{}' is also the output file; choose "
            "another output path",
            input);
      }
      seen.insert(id);
      files.push_back(input);
    } else if (fs::is_directory(st)) {
      ZT_RETURN_IF_ERROR(expand_folder(input, output_ids, seen, files));
    } else {
      return invalid_argument("data prepare: input '{}' is neither a regular file nor a folder",
                              input);
    }
  }
  if (files.empty()) {
    return invalid_argument("data prepare: the inputs ({}) contain no regular files",
                            fmt::join(inputs, ", "));
  }
  return files;
}

// "a, b, c and 7 more": file lists in error messages.
std::string files_named(const std::vector<std::string>& files) {
  constexpr size_t kShown = 3;
  if (files.size() <= kShown) return fmt::format("{}", fmt::join(files, ", "));
  return fmt::format("{}, ... and {} more", fmt::join(files.begin(), files.begin() + kShown, ", "),
                     files.size() - kShown);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The document format a file's name implies (prepare.h), after its compression suffix.
DocumentFormat format_from_name(const std::string& path) {
  std::string name = input_name_uncompressed(path);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ends_with(name, ".jsonl") || ends_with(name, ".json") || ends_with(name, ".ndjson")) {
    return DocumentFormat::kJsonl;
  }
  return DocumentFormat::kText;
}

// ---------------------------------------------------------------------------------------------
// Batches: what the reader hands the workers, and what they hand the writer.

// A document, or part of one (the byte tokenizer's text files are cut at batch boundaries).
struct Piece {
  size_t offset = 0;  // in WorkBatch::text
  size_t size = 0;
  int32_t file = 0;
  int64_t line = 0;         // jsonl: 1-based line number; text: 0
  int64_t file_offset = 0;  // text: byte offset of the piece in its file
  DocumentFormat format = DocumentFormat::kText;
  bool first = true;  // the document's first piece
  bool last = true;   // the document's last piece
};

struct WorkBatch {
  int64_t seq = 0;
  std::string text;
  std::vector<Piece> pieces;
  int64_t input_bytes = 0;
};

struct PieceResult {
  size_t token_end = 0;  // tokens of the piece end here in EncodedBatch::tokens
  bool skipped = false;  // a bad document, dropped (BadDocuments::kSkip)
};

struct EncodedBatch {
  std::vector<int32_t> tokens;
  std::vector<Piece> pieces;
  std::vector<PieceResult> results;
  int64_t input_bytes = 0;
  int64_t text_bytes = 0;
  Status error;  // the first bad piece (kFail) or a read error: the run stops here
};

struct EncodeContext {
  const Tokenizer* tokenizer = nullptr;
  bool check_utf8 = true;  // false for the byte tokenizer
  const std::vector<std::string>* files = nullptr;
  std::string text_key;
  BadDocuments bad = BadDocuments::kFail;
};

const char* json_type_phrase(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "not a string";
}

// Appends the ids of `text` to `out` through a scratch vector: an encode_append that reserves
// exactly out.size() + n (as ByteTokenizer's does) would reallocate the whole batch for every
// document, quadratic in the batch; vector::insert grows geometrically.
Status encode_into(const Tokenizer& tokenizer, std::string_view text, std::vector<int32_t>& out) {
  thread_local std::vector<int32_t> scratch;
  scratch.clear();
  ZT_RETURN_IF_ERROR(tokenizer.encode_append(text, false, scratch));
  out.insert(out.end(), scratch.begin(), scratch.end());
  if (scratch.capacity() > (size_t{64} << 20)) scratch = std::vector<int32_t>();  // one huge doc
  return Status::ok();
}

// Appends the tokens of one piece; a bad document is a Status naming FILE:LINE or the offset.
Status encode_piece(const EncodeContext& c, std::string_view text, const Piece& p,
                    std::vector<int32_t>& out, int64_t& text_bytes) {
  const std::string& path = (*c.files)[static_cast<size_t>(p.file)];
  if (p.format == DocumentFormat::kJsonl) {
    const std::string where = fmt::format("{}:{}", path, p.line);
    if (std::optional<size_t> bad = utf8_invalid_offset(text)) {
      return invalid_argument(
          "{}: invalid UTF-8 at byte {} of the line (JSON Lines must be UTF-8); --skip-bad drops "
          "such lines",
          where, *bad);
    }
    ZT_ASSIGN_OR_RETURN(nlohmann::json row, json_parse_checked(text, where));
    if (!row.is_object()) {
      return invalid_argument("{}: the line is {}, not a JSON object with a \"{}\" string", where,
                              json_type_phrase(row), c.text_key);
    }
    auto it = row.find(c.text_key);
    if (it == row.end()) {
      return invalid_argument(
          "{}: no \"{}\" key; --text-key names the field that holds the document", where,
          c.text_key);
    }
    if (!it->is_string()) {
      return invalid_argument("{}: \"{}\" is {}, not a string", where, c.text_key,
                              json_type_phrase(*it));
    }
    const std::string& doc = it->get_ref<const std::string&>();
    if (Status s = encode_into(*c.tokenizer, doc, out); !s.is_ok()) {
      return invalid_argument("{}: {}", where, s.message());
    }
    text_bytes += static_cast<int64_t>(doc.size());
    return Status::ok();
  }
  if (c.check_utf8) {
    if (std::optional<size_t> bad = utf8_invalid_offset(text)) {
      return invalid_argument(
          "{}: invalid UTF-8 at byte offset {}; only the byte tokenizer takes text that is not "
          "UTF-8 (--skip-bad drops such files)",
          path, p.file_offset + static_cast<int64_t>(*bad));
    }
  }
  if (Status s = encode_into(*c.tokenizer, text, out); !s.is_ok()) {
    return invalid_argument("{}: {}", path, s.message());
  }
  text_bytes += static_cast<int64_t>(text.size());
  return Status::ok();
}

EncodedBatch encode_batch(const EncodeContext& c, WorkBatch&& b) {
  EncodedBatch e;
  e.pieces = std::move(b.pieces);
  e.input_bytes = b.input_bytes;
  e.tokens.reserve(b.text.size() / 3 + 16);
  e.results.reserve(e.pieces.size());
  for (const Piece& p : e.pieces) {
    const size_t before = e.tokens.size();
    PieceResult r;
    Status s = encode_piece(c, std::string_view(b.text).substr(p.offset, p.size), p, e.tokens,
                            e.text_bytes);
    if (!s.is_ok()) {
      e.tokens.resize(before);
      if (c.bad == BadDocuments::kFail) {
        e.error = std::move(s);
        return e;
      }
      r.skipped = true;
    }
    r.token_end = e.tokens.size();
    e.results.push_back(r);
  }
  return e;
}

// ---------------------------------------------------------------------------------------------
// The pipeline's queues: reader -> workers (in any order) -> writer (in batch order). At most
// max_in_flight batches exist between the reader's push and the writer's pop.
class Pipeline {
 public:
  explicit Pipeline(int64_t max_in_flight) : max_in_flight_(max_in_flight) {}

  // Reader: queues a batch; blocks while too many are in flight. False once cancelled.
  bool push(WorkBatch&& b) {
    std::unique_lock<std::mutex> lock(mu_);
    space_cv_.wait(lock, [&] { return cancelled_ || produced_ - written_ < max_in_flight_; });
    if (cancelled_) return false;
    b.seq = produced_++;
    queue_.push_back(std::move(b));
    work_cv_.notify_one();
    return true;
  }
  // Reader: no more batches; a read error takes the next place in order.
  void reader_finish(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.is_ok()) {
      EncodedBatch e;
      e.error = std::move(s);
      done_.emplace(produced_++, std::move(e));
    }
    reader_done_ = true;
    work_cv_.notify_all();
    done_cv_.notify_all();
  }
  // Worker: the next batch to encode, or nullopt when there is none left.
  std::optional<WorkBatch> take() {
    std::unique_lock<std::mutex> lock(mu_);
    work_cv_.wait(lock, [&] { return cancelled_ || reader_done_ || !queue_.empty(); });
    if (cancelled_ || queue_.empty()) return std::nullopt;
    WorkBatch b = std::move(queue_.front());
    queue_.pop_front();
    return b;
  }
  void put(int64_t seq, EncodedBatch&& e) {
    std::lock_guard<std::mutex> lock(mu_);
    done_.emplace(seq, std::move(e));
    done_cv_.notify_all();
  }
  // Writer: the next batch in order, or nullopt after the last.
  std::optional<EncodedBatch> pop() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] {
      return cancelled_ || done_.count(written_) != 0 || (reader_done_ && written_ == produced_);
    });
    auto it = done_.find(written_);
    if (cancelled_ || it == done_.end()) return std::nullopt;
    EncodedBatch e = std::move(it->second);
    done_.erase(it);
    ++written_;
    space_cv_.notify_all();
    return e;
  }
  void cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    space_cv_.notify_all();
    work_cv_.notify_all();
    done_cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable space_cv_, work_cv_, done_cv_;
  std::deque<WorkBatch> queue_;
  std::map<int64_t, EncodedBatch> done_;
  int64_t max_in_flight_;
  int64_t produced_ = 0;
  int64_t written_ = 0;
  bool reader_done_ = false;
  bool cancelled_ = false;
};

// The reader: files in order, cut into batches of about batch_bytes of text. `split_text`: a
// text document may be cut into pieces at batch boundaries (the byte tokenizer only).
class BatchReader {
 public:
  BatchReader(const std::vector<std::string>& files, const std::vector<DocumentFormat>& formats,
              int64_t batch_bytes, bool split_text, Pipeline& pipe)
      : files_(files),
        formats_(formats),
        batch_bytes_(static_cast<size_t>(std::max<int64_t>(batch_bytes, 1))),
        split_text_(split_text),
        pipe_(pipe) {}

  Status run() {
    for (size_t i = 0; i < files_.size(); ++i) {
      Result<std::unique_ptr<InputStream>> in = input_stream_open(files_[i]);
      if (!in.is_ok()) return in.status().with_context("data prepare: ");
      const auto file = static_cast<int32_t>(i);
      Status s =
          formats_[i] == DocumentFormat::kJsonl ? read_lines(**in, file) : read_text(**in, file);
      if (!s.is_ok()) return s.with_context("data prepare: ");
      if (cancelled_) return Status::ok();
    }
    if (!batch_.pieces.empty()) emit();
    return Status::ok();
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 20;

  void emit() {
    if (!pipe_.push(std::move(batch_))) cancelled_ = true;
    batch_ = WorkBatch();
    batch_.text.reserve(std::min(batch_bytes_, size_t{64} << 20) + kChunk);
  }

  // One document per file; with split_text_, pieces at batch boundaries.
  Status read_text(InputStream& in, int32_t file) {
    Piece p{.offset = batch_.text.size(), .file = file};
    for (;;) {
      const size_t old = batch_.text.size();
      batch_.text.resize(old + kChunk);
      Result<size_t> got = in.read(batch_.text.data() + old, kChunk);
      batch_.text.resize(old + (got.is_ok() ? *got : 0));
      if (!got.is_ok()) return got.status();
      if (*got == 0) break;
      batch_.input_bytes += static_cast<int64_t>(*got);
      if (split_text_ && batch_.text.size() >= batch_bytes_) {
        p.size = batch_.text.size() - p.offset;
        p.last = false;
        batch_.pieces.push_back(p);
        emit();
        if (cancelled_) return Status::ok();
        p = Piece{.offset = 0,
                  .file = file,
                  .file_offset = p.file_offset + static_cast<int64_t>(p.size),
                  .first = false};
      }
    }
    p.size = batch_.text.size() - p.offset;
    p.last = true;
    batch_.pieces.push_back(p);
    if (batch_.text.size() >= batch_bytes_) emit();
    return Status::ok();
  }

  // One document per non-blank line.
  Status read_lines(InputStream& in, int32_t file) {
    std::string buf;
    size_t start = 0;    // first byte of buf not yet consumed
    size_t scanned = 0;  // buf[start, scanned) holds no newline
    int64_t line = 0;
    bool eof = false;
    while (!eof && !cancelled_) {
      if (start > 0) {
        buf.erase(0, start);
        scanned -= start;
        start = 0;
      }
      const size_t old = buf.size();
      buf.resize(old + kChunk);
      Result<size_t> got = in.read(buf.data() + old, kChunk);
      buf.resize(old + (got.is_ok() ? *got : 0));
      if (!got.is_ok()) return got.status();
      batch_.input_bytes += static_cast<int64_t>(*got);
      eof = *got == 0;
      for (;;) {
        const size_t nl = buf.find('\n', std::max(start, scanned));
        if (nl == std::string::npos && !(eof && start < buf.size())) {
          scanned = buf.size();
          break;
        }
        const size_t end = nl == std::string::npos ? buf.size() : nl;
        add_line(std::string_view(buf).substr(start, end - start), file, ++line);
        start = nl == std::string::npos ? buf.size() : nl + 1;
        scanned = start;
        if (batch_.text.size() >= batch_bytes_) {
          emit();
          if (cancelled_) return Status::ok();
        }
      }
    }
    return Status::ok();
  }

  void add_line(std::string_view body, int32_t file, int64_t line) {
    if (body.find_first_not_of(" \t\r") == std::string_view::npos) return;  // blank
    batch_.pieces.push_back(Piece{.offset = batch_.text.size(),
                                  .size = body.size(),
                                  .file = file,
                                  .line = line,
                                  .format = DocumentFormat::kJsonl});
    batch_.text.append(body);
  }

  const std::vector<std::string>& files_;
  const std::vector<DocumentFormat>& formats_;
  size_t batch_bytes_;
  bool split_text_;
  Pipeline& pipe_;
  WorkBatch batch_;
  bool cancelled_ = false;
};

// One output file and the documents in it. Tokens are gathered per batch and written with one
// append (one write call) per batch, not one per document.
struct Output {
  TokenFileWriter writer;
  int64_t documents = 0;
  std::vector<int32_t> pending = {};

  void add(std::span<const int32_t> tokens) {
    pending.insert(pending.end(), tokens.begin(), tokens.end());
  }
  Status flush() {
    Status s = writer.append(pending);
    pending.clear();
    return s;
  }
  int64_t num_tokens() const { return writer.num_tokens() + static_cast<int64_t>(pending.size()); }
};

// Stops and joins the threads on every way out of data_prepare.
class ThreadsJoin {
 public:
  ThreadsJoin(Pipeline& pipe, std::vector<std::thread>& threads) : pipe_(pipe), threads_(threads) {}
  ~ThreadsJoin() { stop(); }
  ThreadsJoin(const ThreadsJoin&) = delete;
  ThreadsJoin& operator=(const ThreadsJoin&) = delete;
  void stop() {
    pipe_.cancel();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  Pipeline& pipe_;
  std::vector<std::thread>& threads_;
};

}  // namespace

Result<std::vector<std::string>> data_prepare_files(const std::vector<std::string>& inputs,
                                                    const std::string& output) {
  return expand_inputs(inputs, {output});
}

std::string data_prepare_val_path(const std::string& output) {
  const fs::path p(output);
  return (p.parent_path() / (p.stem().string() + "_val" + p.extension().string())).string();
}

Result<PrepareSummary> data_prepare(const std::vector<std::string>& inputs,
                                    const std::string& output, const PrepareOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const Tokenizer> tokenizer = options.tokenizer;
  if (tokenizer == nullptr) tokenizer = std::make_shared<const ByteTokenizer>();
  const std::optional<int32_t> eos = tokenizer->special_ids().eos;
  if (!eos) {
    return invalid_argument(
        "data prepare: tokenizer {} has no end-of-text token, which separates the documents; use "
        "a tokenizer that defines one (eos_token in tokenizer_config.json)",
        tokenizer->describe());
  }
  const double f = options.val_fraction;
  if (!(f >= 0 && f < 1)) {
    return invalid_argument("data prepare: --val-fraction must be in [0, 1), got {}", f);
  }
  if (options.text_key.empty()) return invalid_argument("data prepare: --text-key is empty");

  PrepareSummary summary;
  summary.output = output;
  summary.tokenizer = tokenizer->describe();
  std::vector<std::string> outputs = {output};
  if (f > 0) {
    summary.val_output =
        options.val_output.empty() ? data_prepare_val_path(output) : options.val_output;
    if (file_identity(summary.val_output) == file_identity(output)) {
      return invalid_argument(
          "data prepare: the validation output '{}' is the training output; choose another "
          "--val-output",
          summary.val_output);
    }
    outputs.push_back(summary.val_output);
  }
  ZT_ASSIGN_OR_RETURN(summary.files, expand_inputs(inputs, outputs));
  std::vector<DocumentFormat> formats;
  for (const std::string& path : summary.files) {
    formats.push_back(options.format == DocumentFormat::kAuto ? format_from_name(path)
                                                              : options.format);
  }

  ZT_ASSIGN_OR_RETURN(TokenFileWriter train_writer,
                      TokenFileWriter::create(output, tokenizer->vocab_size()));
  Output train{std::move(train_writer)};
  std::optional<Output> val;
  if (f > 0) {
    ZT_ASSIGN_OR_RETURN(TokenFileWriter val_writer,
                        TokenFileWriter::create(summary.val_output, tokenizer->vocab_size()));
    val.emplace(Output{std::move(val_writer)});
  }

  int workers = options.workers;
  if (workers <= 0) workers = static_cast<int>(std::thread::hardware_concurrency());
  workers = std::max(workers, 1);
  summary.workers = workers;
  const bool is_bytes = dynamic_cast<const ByteTokenizer*>(tokenizer.get()) != nullptr;
  const EncodeContext ctx{.tokenizer = tokenizer.get(),
                          .check_utf8 = !is_bytes,
                          .files = &summary.files,
                          .text_key = options.text_key,
                          .bad = options.bad};

  Pipeline pipe(2 * static_cast<int64_t>(workers));
  BatchReader reader(summary.files, formats, options.batch_bytes, is_bytes, pipe);
  std::vector<std::thread> threads;
  ThreadsJoin join(pipe, threads);
  threads.emplace_back([&] { pipe.reader_finish(reader.run()); });
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      while (std::optional<WorkBatch> b = pipe.take()) {
        const int64_t seq = b->seq;
        pipe.put(seq, encode_batch(ctx, std::move(*b)));
      }
    });
  }

  // The writer: batches in order, each document to its file (prepare.h).
  const int32_t eos_id = *eos;
  int64_t kept = 0;
  Output* dest = nullptr;  // the current document's file
  PrepareProgress progress{.num_files = static_cast<int64_t>(summary.files.size())};
  while (std::optional<EncodedBatch> e = pipe.pop()) {
    if (!e->error.is_ok()) return e->error;
    summary.bytes += e->input_bytes;
    summary.text_bytes += e->text_bytes;
    size_t begin = 0;
    for (size_t j = 0; j < e->pieces.size(); ++j) {
      const Piece& p = e->pieces[j];
      const PieceResult& r = e->results[j];
      const std::span<const int32_t> tokens(e->tokens.data() + begin, r.token_end - begin);
      begin = r.token_end;
      if (r.skipped) {  // only whole documents are ever bad
        ++summary.skipped;
        continue;
      }
      if (p.first) {
        const int64_t i = kept++;
        const bool to_val = val.has_value() && std::floor(static_cast<double>(i + 1) * f) >
                                                   std::floor(static_cast<double>(i) * f);
        dest = to_val ? &*val : &train;
        if (options.eos == EosPlacement::kBetween && dest->documents > 0) {
          dest->add({&eos_id, 1});
        }
      }
      ZT_ASSERT(dest != nullptr, "data prepare: a document continues without a start");
      dest->add(tokens);
      if (p.last) {
        ++dest->documents;
        if (options.eos == EosPlacement::kAfterEach) {
          dest->add({&eos_id, 1});
        }
      }
      progress.file_index = p.file;
    }
    ZT_RETURN_IF_ERROR(train.flush());
    if (val) {
      ZT_RETURN_IF_ERROR(val->flush());
    }
    if (options.on_progress) {
      progress.bytes = summary.bytes;
      progress.documents = kept;
      progress.tokens = train.num_tokens() + (val ? val->num_tokens() : 0);
      progress.skipped = summary.skipped;
      progress.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      options.on_progress(progress);
    }
  }
  join.stop();

  if (kept == 0) {
    if (summary.skipped > 0) {
      return invalid_argument(
          "data prepare: all {} documents of {} were bad and skipped; nothing to write",
          summary.skipped, files_named(summary.files));
    }
    return invalid_argument("data prepare: the input file(s) {} are empty: no documents",
                            files_named(summary.files));
  }
  if (summary.text_bytes == 0) {
    return invalid_argument(
        "data prepare: the {} document(s) in {} are all empty; nothing to write", kept,
        files_named(summary.files));
  }
  if (val && val->documents == 0) {
    return invalid_argument(
        "data prepare: --val-fraction {} selects none of the {} documents (it needs at least "
        "{}); use a larger fraction or more documents",
        f, kept, static_cast<int64_t>(std::ceil(1 / f)));
  }
  summary.documents = train.documents;
  summary.tokens = train.writer.num_tokens();
  if (val) {
    summary.val_documents = val->documents;
    summary.val_tokens = val->writer.num_tokens();
    ZT_RETURN_IF_ERROR(val->writer.finish());
  }
  ZT_RETURN_IF_ERROR(train.writer.finish());
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

Result<std::vector<std::string>> default_corpus_paths(const std::string& folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    return not_found(
        "default corpus folder '{}' is missing (Debian's base-files package provides it); "
        "pass text files or folders to use instead",
        folder);
  }
  std::vector<std::string> files;
  fs::directory_iterator it(folder, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code st_ec;
    if (it->is_symlink(st_ec) || !it->is_regular_file(st_ec)) continue;
    files.push_back(it->path().string());
  }
  if (ec) return io_error("reading default corpus folder '{}': {}", folder, ec.message());
  if (files.empty()) {
    return invalid_argument("default corpus folder '{}' holds no regular files", folder);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace zt
