// `zt data prepare` (src/zt/data/prepare.h): a temp folder of text files, symlinks and
// sub-folders is prepared and the token file compared with the concatenation built here by hand
// from the documented rules (sorted files, EOT between files, symlinks to included files
// skipped).
#include "zt/data/prepare.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include "common/test_util.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <zlib.h>
#include <zstd.h>

#include <nlohmann/json.hpp>

#include "zt/data/token_file.h"
#include "zt/data/tokenizer/byte_tokenizer.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

std::vector<int32_t> read_token_file(const std::string& path) {
  Result<TokenFile> f = TokenFile::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  if (!f.is_ok()) return {};
  std::vector<int32_t> out;
  for (int64_t i = 0; i < f->num_tokens(); ++i) out.push_back(static_cast<int32_t>(f->token(i)));
  return out;
}

// Bytes of each text as tokens, EOT between them.
std::vector<int32_t> expected_tokens(const std::vector<std::string>& texts) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i > 0) out.push_back(ByteTokenizer::kEot);
    for (unsigned char c : texts[i]) out.push_back(c);
  }
  return out;
}

// corpus/{a.txt, b.txt, sub/c.txt, sub/empty.txt} plus links: to a file inside (skipped), to a
// file outside (read), to a folder (not entered), dangling (ignored).
struct Corpus {
  TempDir dir;
  std::string root = dir.file("corpus");
  Corpus() {
    write_text(root + "/b.txt", "bee");
    write_text(root + "/a.txt", "ay");
    write_text(root + "/sub/c.txt", "sea\xFF");
    write_text(root + "/sub/empty.txt", "");
    write_text(dir.file("outside.txt"), "out");
    fs::create_symlink("a.txt", root + "/link_a");
    fs::create_symlink("../outside.txt", root + "/link_out");
    fs::create_directory_symlink("sub", root + "/link_dir");
    fs::create_symlink("nowhere", root + "/dangling");
  }
};

TEST(DataPrepare, FolderIsSortedRecursiveWithLinksToIncludedFilesSkipped) {
  Corpus c;
  const std::string out = c.dir.file("out/train.bin");
  std::vector<int64_t> progress_bytes;
  Result<PrepareSummary> s = data_prepare(
      {c.root}, out, {.workers = 3, .batch_bytes = 4, .on_progress = [&](const PrepareProgress& p) {
                        EXPECT_EQ(p.num_files, 5);
                        if (!progress_bytes.empty()) {
                          EXPECT_GE(p.bytes, progress_bytes.back());
                        }
                        progress_bytes.push_back(p.bytes);
                      }});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const std::vector<std::string> want_files = {c.root + "/a.txt", c.root + "/b.txt",
                                               c.root + "/link_out", c.root + "/sub/c.txt",
                                               c.root + "/sub/empty.txt"};
  EXPECT_EQ(s->files, want_files);
  ASSERT_FALSE(progress_bytes.empty());
  EXPECT_EQ(progress_bytes.back(), 12);
  EXPECT_EQ(s->bytes, 12);
  EXPECT_EQ(s->text_bytes, 12);
  EXPECT_EQ(s->documents, 5);
  EXPECT_EQ(s->tokens, 16);
  EXPECT_EQ(s->skipped, 0);
  EXPECT_EQ(s->tokenizer, "bytes");
  EXPECT_EQ(read_token_file(out), expected_tokens({"ay", "bee", "out", "sea\xFF", ""}));
}

TEST(DataPrepare, ExplicitFileFirstThenFolderWithoutDuplicates) {
  Corpus c;
  const std::string out = c.dir.file("x.bin");
  Result<PrepareSummary> s = data_prepare({c.dir.file("outside.txt"), c.root + "/sub"}, out);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(read_token_file(out), expected_tokens({"out", "sea\xFF", ""}));

  // outside.txt is included first; the folder's link to it is then a duplicate.
  s = data_prepare({c.dir.file("outside.txt"), c.root}, out);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(read_token_file(out), expected_tokens({"out", "ay", "bee", "sea\xFF", ""}));
}

TEST(DataPrepare, OutputInsideInputFolderIsNotReadBack) {
  Corpus c;
  const std::string out = c.root + "/tokens.bin";
  ASSERT_TRUE(data_prepare({c.root}, out).is_ok());
  const std::vector<int32_t> first = read_token_file(out);
  Result<PrepareSummary> again = data_prepare({c.root}, out);
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(again->files.size(), 5u);
  EXPECT_EQ(read_token_file(out), first);
  EXPECT_EQ(first, expected_tokens({"ay", "bee", "out", "sea\xFF", ""}));
}

TEST(DataPrepare, ErrorsNameTheInputAndLeaveNoOutput) {
  Corpus c;
  const std::string out = c.dir.file("never.bin");
  Result<PrepareSummary> s = data_prepare({c.root, c.dir.file("missing.txt")}, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find(c.dir.file("missing.txt")), std::string::npos);

  s = data_prepare({c.root + "/sub/empty.txt"}, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("empty"), std::string::npos) << s.status().message();

  s = data_prepare({c.root + "/a.txt"}, c.root + "/a.txt");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("also the output"), std::string::npos);

  fs::create_directories(c.dir.file("hollow/inner"));
  s = data_prepare({c.dir.file("hollow")}, out);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find(c.dir.file("hollow")), std::string::npos);

  EXPECT_FALSE(data_prepare({}, out).is_ok());
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(c.dir.path())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(DefaultCorpus, RegularFilesOnlySortedAndMissingFolderNamed) {
  Corpus c;
  Result<std::vector<std::string>> files = default_corpus_paths(c.root);
  ASSERT_TRUE(files.is_ok()) << files.status().message();
  EXPECT_EQ(*files, (std::vector<std::string>{c.root + "/a.txt", c.root + "/b.txt"}));

  Result<std::vector<std::string>> missing = default_corpus_paths(c.dir.file("gone"));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(c.dir.file("gone")), std::string::npos);
}

TEST(DefaultCorpus, DebianCommonLicensesWhenPresent) {
  const std::string folder(kDefaultCorpusDir);
  if (!fs::is_directory(folder)) GTEST_SKIP() << folder << " is not on this machine";
  Result<std::vector<std::string>> files = default_corpus_paths();
  ASSERT_TRUE(files.is_ok()) << files.status().message();
  EXPECT_TRUE(std::is_sorted(files->begin(), files->end()));
  for (const std::string& f : *files) {
    EXPECT_FALSE(fs::is_symlink(f)) << f;
    EXPECT_TRUE(fs::is_regular_file(f)) << f;
  }
  // Debian ships GPL as a symlink to GPL-3: the text is read once.
  if (fs::is_symlink(folder + "/GPL")) {
    EXPECT_EQ(std::count(files->begin(), files->end(), folder + "/GPL"), 0);
    EXPECT_EQ(std::count(files->begin(), files->end(), folder + "/GPL-3"), 1);
  }
  // Prepared, it holds every byte plus one EOT between files, and starts with the first file.
  TempDir dir;
  Result<PrepareSummary> s = data_prepare(*files, dir.file("licenses.bin"));
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  int64_t bytes = 0;
  for (const std::string& f : *files) bytes += static_cast<int64_t>(fs::file_size(f));
  const auto num_files = static_cast<int64_t>(files->size());
  EXPECT_EQ(s->bytes, bytes);
  EXPECT_EQ(s->tokens, bytes + num_files - 1);
  Result<TokenFile> tf = TokenFile::open(dir.file("licenses.bin"));
  ASSERT_TRUE(tf.is_ok()) << tf.status().message();
  EXPECT_EQ(tf->num_tokens(), bytes + num_files - 1);
  std::ifstream first(files->front(), std::ios::binary);
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(tf->token(i), static_cast<uint32_t>(static_cast<unsigned char>(first.get()))) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Documents, formats, compression, parallel encoding, the validation split, bad documents.

std::string file_contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Documents of every length (empty ones too) from multi-byte UTF-8, quotes, escapes, newlines.
std::vector<std::string> random_documents(int n, uint64_t seed) {
  static const std::vector<std::string> kParts = {
      "hello", " world",           "\n", "\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC", "\"q\"",
      "tab\t", "\xF0\x9F\x98\x80", "\\", "."};
  std::mt19937_64 rng(seed);
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) {
    std::string d;
    const int parts = static_cast<int>(rng() % 14);
    for (int j = 0; j < parts; ++j) d += kParts[rng() % kParts.size()];
    docs.push_back(d);
  }
  return docs;
}

std::string jsonl_of(const std::vector<std::string>& docs, const std::string& key = "text") {
  std::string out;
  for (const std::string& d : docs)
    out += nlohmann::json{{key, d}, {"id", out.size()}}.dump() + "\n";
  return out;
}

// The oracle: each document's bytes as tokens, EOT between documents or after each.
std::vector<int32_t> joined_tokens(const std::vector<std::string>& docs, EosPlacement eos) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (eos == EosPlacement::kBetween && i > 0) out.push_back(ByteTokenizer::kEot);
    for (int32_t t : ByteTokenizer::encode_bytes(docs[i])) out.push_back(t);
    if (eos == EosPlacement::kAfterEach) out.push_back(ByteTokenizer::kEot);
  }
  return out;
}

// gzip in two members (zlib reads concatenated members as one stream).
void write_gzip(const std::string& path, const std::string& text) {
  const size_t half = text.size() / 2;
  for (int m = 0; m < 2; ++m) {
    gzFile f = gzopen(path.c_str(), m == 0 ? "wb" : "ab");
    ASSERT_NE(f, nullptr) << path;
    const std::string part = m == 0 ? text.substr(0, half) : text.substr(half);
    if (!part.empty()) {
      ASSERT_EQ(gzwrite(f, part.data(), static_cast<unsigned>(part.size())),
                static_cast<int>(part.size()));
    }
    ASSERT_EQ(gzclose(f), Z_OK);
  }
}

// zstd in two frames.
void write_zstd(const std::string& path, const std::string& text) {
  std::string out;
  const size_t half = text.size() / 2;
  for (const std::string& part : {text.substr(0, half), text.substr(half)}) {
    std::string frame(ZSTD_compressBound(part.size()), '\0');
    const size_t n = ZSTD_compress(frame.data(), frame.size(), part.data(), part.size(), 3);
    ASSERT_EQ(ZSTD_isError(n), 0u);
    out.append(frame.data(), n);
  }
  write_text(path, out);
}

// A tokenizer that encodes like the byte tokenizer but is not it: data_prepare checks UTF-8
// for it and never cuts its documents.
class StrictBytes final : public Tokenizer {
 public:
  explicit StrictBytes(std::optional<int32_t> eos) { ids_.eos = eos; }
  Status encode_append(std::string_view text, bool /*add_special_tokens*/,
                       std::vector<int32_t>& out) const override {
    if (auto bad = utf8_invalid_offset(text)) return invalid_argument("invalid UTF-8 at {}", *bad);
    ByteTokenizer::encode_bytes_append(text, out);
    return Status::ok();
  }
  std::string decode(std::span<const int32_t> ids, bool /*skip*/) const override {
    return ByteTokenizer::decode_bytes(ids);
  }
  int64_t vocab_size() const override { return ByteTokenizer::kVocabSize; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  std::optional<std::string> id_to_token(int32_t) const override { return std::nullopt; }
  bool is_special(int32_t id) const override { return id == ByteTokenizer::kEot; }
  const SpecialTokenIds& special_ids() const override { return ids_; }
  std::string describe() const override { return "strict-bytes"; }

 private:
  SpecialTokenIds ids_;
};

std::string error_of(const Result<PrepareSummary>& r) {
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? std::string() : r.status().message();
}

TEST(DataPrepare, WorkersNeverChangeTheOutput) {
  TempDir dir;
  // JSON Lines: 600 documents over three files; text: 40 files, one document each.
  const std::vector<std::string> docs = random_documents(600, 1);
  std::vector<std::string> jsonl_inputs;
  for (int f = 0; f < 3; ++f) {
    const std::string path = dir.file("j/" + std::to_string(f) + ".jsonl");
    write_text(path, jsonl_of({docs.begin() + f * 200, docs.begin() + (f + 1) * 200}));
    jsonl_inputs.push_back(path);
  }
  const std::vector<std::string> texts = random_documents(40, 2);
  for (size_t i = 0; i < texts.size(); ++i) {
    write_text(dir.file("t/" + std::string(1, static_cast<char>('a' + i / 10)) +
                        std::to_string(i % 10) + ".txt"),
               texts[i] + std::string(i * 37, 'x'));
  }
  std::vector<std::string> text_docs;
  for (size_t i = 0; i < texts.size(); ++i)
    text_docs.push_back(texts[i] + std::string(i * 37, 'x'));

  for (EosPlacement eos : {EosPlacement::kBetween, EosPlacement::kAfterEach}) {
    for (const std::shared_ptr<const Tokenizer>& tok :
         {std::shared_ptr<const Tokenizer>(),
          std::shared_ptr<const Tokenizer>(std::make_shared<StrictBytes>(256))}) {
      struct Case {
        std::vector<std::string> inputs;
        std::vector<std::string> docs;
      };
      for (const Case& c : {Case{jsonl_inputs, docs}, Case{{dir.file("t")}, text_docs}}) {
        std::string first;
        for (int workers : {1, 2, 4, 7}) {
          for (int64_t batch : {int64_t{50}, int64_t{4} << 20}) {
            const std::string out = dir.file("out.bin");
            Result<PrepareSummary> s = data_prepare(
                c.inputs, out,
                {.tokenizer = tok, .eos = eos, .workers = workers, .batch_bytes = batch});
            ASSERT_TRUE(s.is_ok()) << s.status().message();
            EXPECT_EQ(s->documents, static_cast<int64_t>(c.docs.size()));
            EXPECT_EQ(s->workers, workers);
            const std::string bytes = file_contents(out);
            if (first.empty()) {
              first = bytes;
              EXPECT_EQ(read_token_file(out), joined_tokens(c.docs, eos));
            } else {
              EXPECT_TRUE(bytes == first) << "workers " << workers << ", batch " << batch;
            }
          }
        }
      }
    }
  }
}

TEST(DataPrepare, CompressedInputsGiveThePlainFile) {
  TempDir dir;
  const std::vector<std::string> docs = random_documents(300, 3);
  const std::string jsonl = jsonl_of(docs);
  write_text(dir.file("plain.jsonl"), jsonl);
  write_gzip(dir.file("g.jsonl.gz"), jsonl);
  write_zstd(dir.file("z.jsonl.zst"), jsonl);
  const std::string text = std::string(100000, 'a') + "\xE2\x82\xAC tail";
  write_text(dir.file("plain.txt"), text);
  write_gzip(dir.file("g.txt.gz"), text);
  write_zstd(dir.file("z.TXT.ZST"), text);

  const auto prepared = [&](const std::string& input) {
    const std::string out = dir.file("out_" + fs::path(input).filename().string() + ".bin");
    Result<PrepareSummary> s = data_prepare({dir.file(input)}, out, {.batch_bytes = 4096});
    EXPECT_TRUE(s.is_ok()) << input << ": " << s.status().message();
    return file_contents(out);
  };
  const std::string want_jsonl = prepared("plain.jsonl");
  EXPECT_EQ(want_jsonl.size(), 1024 + 2 * joined_tokens(docs, EosPlacement::kBetween).size());
  EXPECT_TRUE(prepared("g.jsonl.gz") == want_jsonl);
  EXPECT_TRUE(prepared("z.jsonl.zst") == want_jsonl);
  const std::string want_text = prepared("plain.txt");
  EXPECT_EQ(want_text.size(), 1024 + 2 * text.size());
  EXPECT_TRUE(prepared("g.txt.gz") == want_text);
  EXPECT_TRUE(prepared("z.TXT.ZST") == want_text);

  // Truncated streams and a .gz that is not gzip: errors naming the file.
  const std::string gz = file_contents(dir.file("g.txt.gz"));
  write_text(dir.file("cut.txt.gz"), gz.substr(0, gz.size() / 2));
  const std::string zst = file_contents(dir.file("z.TXT.ZST"));
  write_text(dir.file("cut.txt.zst"), zst.substr(0, zst.size() - 7));
  write_text(dir.file("fake.txt.gz"), "plain text");
  for (const char* bad : {"cut.txt.gz", "cut.txt.zst", "fake.txt.gz"}) {
    const std::string out = dir.file("never.bin");
    const std::string e = error_of(data_prepare({dir.file(bad)}, out));
    EXPECT_NE(e.find(dir.file(bad)), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(out)) << bad;
  }
}

TEST(DataPrepare, ValidationSplitTakesEvenlySpreadDocuments) {
  TempDir dir;
  const std::vector<std::string> docs = random_documents(103, 4);
  write_text(dir.file("d.jsonl"), jsonl_of(docs));
  // F = 0.1: documents 9, 19, ..., 99 (every tenth, counted from 1) are validation.
  std::vector<std::string> train, val;
  for (size_t i = 0; i < docs.size(); ++i) ((i + 1) % 10 == 0 ? val : train).push_back(docs[i]);
  ASSERT_EQ(val.size(), 10u);
  for (int workers : {1, 4}) {
    Result<PrepareSummary> s = data_prepare({dir.file("d.jsonl")}, dir.file("train.bin"),
                                            {.eos = EosPlacement::kAfterEach,
                                             .workers = workers,
                                             .val_fraction = 0.1,
                                             .batch_bytes = 100});
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    EXPECT_EQ(s->val_output, dir.file("train_val.bin"));
    EXPECT_EQ(s->documents, 93);
    EXPECT_EQ(s->val_documents, 10);
    EXPECT_EQ(read_token_file(dir.file("train.bin")),
              joined_tokens(train, EosPlacement::kAfterEach));
    EXPECT_EQ(read_token_file(dir.file("train_val.bin")),
              joined_tokens(val, EosPlacement::kAfterEach));
    EXPECT_EQ(s->tokens + s->val_tokens,
              static_cast<int64_t>(joined_tokens(docs, EosPlacement::kAfterEach).size()));
  }
  // An explicit path; F = 0.25 of 8 documents: 3 and 7.
  write_text(dir.file("e.jsonl"), jsonl_of({"0", "1", "2", "3", "4", "5", "6", "7"}));
  Result<PrepareSummary> s =
      data_prepare({dir.file("e.jsonl")}, dir.file("t.bin"),
                   {.val_fraction = 0.25, .val_output = dir.file("v/held_out.bin")});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(read_token_file(dir.file("v/held_out.bin")),
            joined_tokens({"3", "7"}, EosPlacement::kBetween));
  EXPECT_EQ(read_token_file(dir.file("t.bin")),
            joined_tokens({"0", "1", "2", "4", "5", "6"}, EosPlacement::kBetween));

  EXPECT_EQ(data_prepare_val_path("a/train.bin"), "a/train_val.bin");
  EXPECT_EQ(data_prepare_val_path("tokens"), "tokens_val");
  // Too few documents for the fraction, and fractions outside [0, 1).
  std::string e =
      error_of(data_prepare({dir.file("e.jsonl")}, dir.file("x.bin"), {.val_fraction = 0.1}));
  EXPECT_NE(e.find("--val-fraction"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.file("x.bin")));
  EXPECT_FALSE(fs::exists(dir.file("x_val.bin")));
  for (double f : {1.0, -0.1}) {
    e = error_of(data_prepare({dir.file("e.jsonl")}, dir.file("x.bin"), {.val_fraction = f}));
    EXPECT_NE(e.find("[0, 1)"), std::string::npos) << e;
  }
}

TEST(DataPrepare, BadLinesNameFileAndLineOrAreSkippedAndCounted) {
  TempDir dir;
  const std::string out = dir.file("out.bin");
  const auto fails = [&](const std::string& body, const PrepareOptions& opt = {}) {
    write_text(dir.file("bad.jsonl"), body);
    std::string e = error_of(data_prepare({dir.file("bad.jsonl")}, out, opt));
    EXPECT_FALSE(fs::exists(out));
    return e;
  };
  const std::string where3 = dir.file("bad.jsonl") + ":3:";
  // Line numbers count blank lines.
  std::string e = fails("{\"text\": \"ok\"}\n\n{\"text\": \"bad \xFF\"}\n");
  EXPECT_NE(e.find(where3), std::string::npos) << e;
  EXPECT_NE(e.find("UTF-8"), std::string::npos) << e;
  e = fails("{\"text\": \"ok\"}\n\n{\"content\": \"x\"}\n");
  EXPECT_NE(e.find(where3 + " no \"text\" key"), std::string::npos) << e;
  EXPECT_NE(e.find("--text-key"), std::string::npos) << e;
  e = fails("{\"text\": \"ok\"}\n\n{\"text\": \"x\"}\n", {.text_key = "body"});
  EXPECT_NE(e.find(dir.file("bad.jsonl") + ":1: no \"body\" key"), std::string::npos) << e;
  e = fails("{\"text\": \"ok\"}\n\n{\"text\": 5}\n");
  EXPECT_NE(e.find(where3 + " \"text\" is a number, not a string"), std::string::npos) << e;
  e = fails("{\"text\": \"ok\"}\n\n{text: 1}\n");
  EXPECT_NE(e.find(where3), std::string::npos) << e;
  EXPECT_NE(e.find("JSON"), std::string::npos) << e;
  e = fails("{\"text\": \"ok\"}\n\n[1, 2]\n");
  EXPECT_NE(e.find(where3 + " the line is an array, not a JSON object"), std::string::npos) << e;

  // The first bad line in input order is the one reported, whatever the workers.
  std::string many;
  for (int i = 0; i < 500; ++i) many += i == 321 || i == 400 ? "{}\n" : "{\"text\": \"abc\"}\n";
  for (int workers : {1, 5}) {
    e = fails(many, {.workers = workers, .batch_bytes = 64});
    EXPECT_NE(e.find(dir.file("bad.jsonl") + ":322:"), std::string::npos) << e;
  }

  // --skip-bad: every kind dropped and counted, the rest kept in order.
  write_text(dir.file("mixed.jsonl"),
             "{\"body\": \"one\"}\n{\"body\": \"bad \xC0\xAF\"}\n{\"body\": 7}\nnot json\n\n"
             "{\"other\": \"x\"}\n{\"body\": \"two\"}\n[\"body\"]\n{\"body\": \"\"}\n");
  Result<PrepareSummary> s = data_prepare(
      {dir.file("mixed.jsonl")}, out,
      {.text_key = "body", .bad = BadDocuments::kSkip, .workers = 3, .batch_bytes = 8});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->skipped, 5);
  EXPECT_EQ(s->documents, 3);
  EXPECT_EQ(read_token_file(out), joined_tokens({"one", "two", ""}, EosPlacement::kBetween));

  // Everything bad: an error, not an empty file.
  write_text(dir.file("allbad.jsonl"), "{}\n[]\n");
  e = error_of(
      data_prepare({dir.file("allbad.jsonl")}, dir.file("none.bin"), {.bad = BadDocuments::kSkip}));
  EXPECT_NE(e.find("skipped"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.file("none.bin")));
}

TEST(DataPrepare, TextUtf8IsCheckedForTokenizersOtherThanBytes) {
  TempDir dir;
  write_text(dir.file("a.txt"), "fine");
  write_text(dir.file("b.txt"), "abcde\xFFxyz");
  const std::string out = dir.file("out.bin");
  const auto strict = std::make_shared<StrictBytes>(256);
  std::string e =
      error_of(data_prepare({dir.file("a.txt"), dir.file("b.txt")}, out, {.tokenizer = strict}));
  EXPECT_NE(e.find(dir.file("b.txt") + ": invalid UTF-8 at byte offset 5"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(out));
  Result<PrepareSummary> s = data_prepare({dir.file("a.txt"), dir.file("b.txt")}, out,
                                          {.tokenizer = strict, .bad = BadDocuments::kSkip});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->skipped, 1);
  EXPECT_EQ(read_token_file(out), joined_tokens({"fine"}, EosPlacement::kBetween));
  // The byte tokenizer takes any bytes.
  s = data_prepare({dir.file("a.txt"), dir.file("b.txt")}, out);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(read_token_file(out), joined_tokens({"fine", "abcde\xFFxyz"}, EosPlacement::kBetween));
}

TEST(DataPrepare, EmptyInputsAndATokenizerWithoutEosAreErrors) {
  TempDir dir;
  write_text(dir.file("blank.jsonl"), "\n  \n\r\n");
  write_text(dir.file("empty.jsonl.gz"), "");
  const std::string out = dir.file("out.bin");
  std::string e =
      error_of(data_prepare({dir.file("blank.jsonl"), dir.file("empty.jsonl.gz")}, out));
  EXPECT_NE(e.find("empty"), std::string::npos) << e;
  EXPECT_NE(e.find(dir.file("blank.jsonl")), std::string::npos) << e;
  EXPECT_NE(e.find(dir.file("empty.jsonl.gz")), std::string::npos) << e;
  write_text(dir.file("t.txt"), "text");
  e = error_of(data_prepare({dir.file("t.txt")}, out,
                            {.tokenizer = std::make_shared<StrictBytes>(std::nullopt)}));
  EXPECT_NE(e.find("strict-bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("end-of-text"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(out));
}

TEST(DataPrepare, FormatByNameOrForced) {
  TempDir dir;
  const std::string body = "{\"text\": \"a\"}\n{\"text\": \"b\"}\n";
  write_text(dir.file("x.json"), body);
  write_text(dir.file("x.log"), body);
  const std::string out = dir.file("out.bin");
  ASSERT_TRUE(data_prepare({dir.file("x.json"), dir.file("x.log")}, out).is_ok());
  EXPECT_EQ(read_token_file(out), joined_tokens({"a", "b", body}, EosPlacement::kBetween));
  ASSERT_TRUE(data_prepare({dir.file("x.json")}, out, {.format = DocumentFormat::kText}).is_ok());
  EXPECT_EQ(read_token_file(out), joined_tokens({body}, EosPlacement::kBetween));
  ASSERT_TRUE(data_prepare({dir.file("x.log")}, out, {.format = DocumentFormat::kJsonl}).is_ok());
  EXPECT_EQ(read_token_file(out), joined_tokens({"a", "b"}, EosPlacement::kBetween));
}

}  // namespace
}  // namespace zt
