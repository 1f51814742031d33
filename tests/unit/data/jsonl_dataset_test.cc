// JSON Lines datasets (src/zt/data/jsonl_dataset.h) with the byte tokenizer as the oracle: its
// ids are the bytes of the text and its eos is 256, so every expected sequence below is written
// out by hand from the record's characters. Also the pre-tokenized reader jsonl_examples.h.
#include "zt/data/jsonl_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "zt/data/jsonl_examples.h"

namespace zt {
namespace {

using testing::TempDir;
using Ids = std::vector<int32_t>;
constexpr int32_t kEos = 256;  // the byte tokenizer's end of text
constexpr int32_t X = -100;

std::shared_ptr<const Tokenizer> bytes_tokenizer() {
  auto t = tokenizer_load("bytes");
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return *t;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// The ids of `s` under the byte tokenizer, written independently of it.
Ids b(const std::string& s) {
  Ids v;
  for (unsigned char c : s) v.push_back(c);
  return v;
}
Ids cat(std::initializer_list<Ids> parts) {
  Ids v;
  for (const Ids& p : parts) v.insert(v.end(), p.begin(), p.end());
  return v;
}
Ids masked(size_t n) {
  return Ids(n, X);
}

Result<JsonlDataset> dataset(const std::string& bytes, JsonlDatasetOptions o,
                             const std::string& name = "d.jsonl") {
  auto f = JsonlFile::from_memory(bytes, name);
  if (!f.is_ok()) return f.status();
  return JsonlDataset::create(std::move(*f), bytes_tokenizer(), o);
}

std::string error_of(const std::string& bytes, JsonlDatasetOptions o) {
  auto d = dataset(bytes, o);
  return d.is_ok() ? "(no error)" : d.status().message();
}

// ---------------------------------------------------------------------------------------------
// JsonlFile

TEST(JsonlFile, IndexesLinesSkippingBlanksWithRealLineNumbers) {
  TempDir dir;
  const std::string p = dir.file("a.jsonl");
  // Line 1 a record, 2 empty, 3 spaces and tabs, 4 a record with CRLF, 5 "\r" only, 6 a record
  // without a final newline.
  write_file(p, "{\"a\":1}\n\n \t \n{\"b\":2}\r\n\r\n{\"c\":3}");
  auto f = JsonlFile::open(p);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->size(), 3);
  EXPECT_EQ(f->line_number(0), 1);
  EXPECT_EQ(f->line_number(1), 4);
  EXPECT_EQ(f->line_number(2), 6);
  EXPECT_EQ(f->text(0), "{\"a\":1}");
  EXPECT_EQ(f->text(1), "{\"b\":2}");  // no '\r'
  EXPECT_EQ(f->text(2), "{\"c\":3}");
  EXPECT_EQ(f->location(2), p + ":6");
  auto row = f->parse(1);
  ASSERT_TRUE(row.is_ok()) << row.status().message();
  EXPECT_EQ((*row)["b"], 2);
}

TEST(JsonlFile, ByteOrderMarkAndBlankRunsBeforeTheFirstRecord) {
  auto f = JsonlFile::from_memory("\xEF\xBB\xBF\n\n{\"a\":1}\n\n\n{\"a\":2}\n{\"a\":3}\n", "m");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->size(), 3);
  EXPECT_EQ(f->line_number(0), 3);
  EXPECT_EQ(f->line_number(1), 6);
  EXPECT_EQ(f->line_number(2), 7);
}

TEST(JsonlFile, EmptyOrBlankFilesAreErrorsNamingTheFile) {
  TempDir dir;
  const std::string empty = dir.file("empty.jsonl"), blank = dir.file("blank.jsonl");
  write_file(empty, "");
  write_file(blank, "\n  \r\n\t\n");
  auto e = JsonlFile::open(empty);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find(empty), std::string::npos) << e.status().message();
  auto bl = JsonlFile::open(blank);
  ASSERT_FALSE(bl.is_ok());
  EXPECT_NE(bl.status().message().find(blank), std::string::npos) << bl.status().message();
  EXPECT_NE(bl.status().message().find("no records"), std::string::npos);
  auto missing = JsonlFile::open(dir.file("nope.jsonl"));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("nope.jsonl"), std::string::npos);
}

TEST(JsonlFile, ParseErrorsNameFileAndLine) {
  auto f = JsonlFile::from_memory("{\"a\":1}\n\n{oops\n[1,2]\n{\"p\":\"x\xff\"}\n", "f.jsonl");
  ASSERT_TRUE(f.is_ok());
  auto bad = f->parse(1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message().rfind("f.jsonl:3: not a JSON object (", 0), 0u)
      << bad.status().message();
  auto arr = f->parse(2);
  ASSERT_FALSE(arr.is_ok());
  EXPECT_EQ(arr.status().message(), "f.jsonl:4: not a JSON object (found a JSON array)");
  auto utf = f->parse(3);
  ASSERT_FALSE(utf.is_ok());
  EXPECT_EQ(utf.status().message(),
            "f.jsonl:5: not a JSON object (invalid UTF-8 at byte offset 7 of the line, in 'p')");
}

// ---------------------------------------------------------------------------------------------
// Formats and labels

TEST(JsonlDataset, PromptResponseMasksThePrompt) {
  auto d = dataset("{\"prompt\": \"ab\", \"response\": \"cd\"}\n", {.seq_len = 16});
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->format(), JsonlFormat::kPromptResponse);
  auto e = d->example(0);
  ASSERT_TRUE(e.is_ok());
  ASSERT_EQ(e->sequences.size(), 1u);
  EXPECT_EQ(e->sequences[0].input_ids, cat({b("ab"), b("cd"), {kEos}}));
  EXPECT_EQ(e->sequences[0].labels, cat({masked(2), b("cd"), {kEos}}));
  EXPECT_EQ(e->line, 1);
  EXPECT_FALSE(e->truncated);

  auto all = dataset("{\"prompt\": \"ab\", \"response\": \"cd\"}\n",
                     {.seq_len = 16, .prompt_labels = PromptLabels::kTrained});
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all->example(0)->sequences[0].labels, cat({b("ab"), b("cd"), {kEos}}));
}

TEST(JsonlDataset, TextChosenPairsAndTokens) {
  auto text = dataset("{\"text\": \"hi!\"}\n", {.seq_len = 16});
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(text->format(), JsonlFormat::kText);
  EXPECT_EQ(text->example(0)->sequences[0].input_ids, cat({b("hi!"), {kEos}}));
  EXPECT_EQ(text->example(0)->sequences[0].labels, cat({b("hi!"), {kEos}}));

  auto chosen = dataset("{\"prompt\": \"q\", \"chosen\": \"yes\"}\n", {.seq_len = 16});
  ASSERT_TRUE(chosen.is_ok());
  EXPECT_EQ(chosen->format(), JsonlFormat::kPromptChosen);
  EXPECT_EQ(chosen->example(0)->sequences[0].labels, cat({masked(1), b("yes"), {kEos}}));

  const std::string pair = "{\"prompt\": \"q\", \"chosen\": \"yes\", \"rejected\": \"no\"}\n";
  auto pairs = dataset(pair, {.seq_len = 16});
  ASSERT_TRUE(pairs.is_ok());
  EXPECT_EQ(pairs->format(), JsonlFormat::kPairs);
  auto e = pairs->example(0);
  ASSERT_EQ(e->sequences.size(), 2u);
  EXPECT_EQ(e->sequences[0].input_ids, cat({b("q"), b("yes"), {kEos}}));
  EXPECT_EQ(e->sequences[1].input_ids, cat({b("q"), b("no"), {kEos}}));
  EXPECT_EQ(e->sequences[1].labels, cat({masked(1), b("no"), {kEos}}));
  // A requested format wins over detection: the same file as SFT on the chosen answer.
  auto sft = dataset(pair, {.format = JsonlFormat::kPromptChosen, .seq_len = 16});
  ASSERT_TRUE(sft.is_ok());
  EXPECT_EQ(sft->example(0)->sequences.size(), 1u);

  auto tokens = dataset(
      "{\"input_ids\": [5, 6, 7]}\n{\"input_ids\": [1, 2], \"labels\": [-100, 2], "
      "\"attention_mask\": [1, 0]}\n",
      {.seq_len = 16});
  ASSERT_TRUE(tokens.is_ok()) << tokens.status().message();
  EXPECT_EQ(tokens->format(), JsonlFormat::kTokens);
  EXPECT_EQ(tokens->example(0)->sequences[0].input_ids, (Ids{5, 6, 7}));
  EXPECT_EQ(tokens->example(0)->sequences[0].labels, (Ids{5, 6, 7}));  // no eos added
  EXPECT_EQ(tokens->example(1)->sequences[0].labels, (Ids{X, 2}));
  EXPECT_EQ(tokens->example(1)->sequences[0].attention_mask, (Ids{1, 0}));
}

TEST(JsonlDataset, EosFromOptionsWhenTheTokenizerHasNone) {
  // Pre-tokenized data needs neither tokenizer nor eos; the pad id falls back to the eos option.
  auto f = JsonlFile::from_memory("{\"input_ids\": [3]}\n", "t.jsonl");
  ASSERT_TRUE(f.is_ok());
  auto d = JsonlDataset::create(std::move(*f), nullptr, {.seq_len = 4, .eos_id = 9});
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->pad_id(), 9);
  auto g = JsonlFile::from_memory("{\"text\": \"a\"}\n", "t.jsonl");
  auto none = JsonlDataset::create(std::move(*g), nullptr, {.seq_len = 4});
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("needs a tokenizer"), std::string::npos);
}

TEST(JsonlDataset, TruncatesFromTheRightAndCounts) {
  auto d = dataset(
      "{\"prompt\": \"abc\", \"response\": \"defg\"}\n{\"prompt\": \"a\", \"response\": \"b\"}\n"
      "{\"prompt\": \"\", \"response\": \"12345\"}\n",
      {.seq_len = 5});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->truncated(), 2);
  auto e = d->example(0);
  EXPECT_TRUE(e->truncated);
  EXPECT_EQ(e->sequences[0].input_ids, b("abcde"));
  EXPECT_EQ(e->sequences[0].labels, cat({masked(3), b("de")}));
  EXPECT_FALSE(d->example(1)->truncated);
  EXPECT_EQ(d->example(2)->sequences[0].input_ids, b("12345"));  // its eos cut off
}

// ---------------------------------------------------------------------------------------------
// Errors and skipping

TEST(JsonlDataset, BadRecordsNameFileLineAndKey) {
  const std::string ok = "{\"prompt\": \"a\", \"response\": \"b\"}\n";
  const JsonlDatasetOptions o{.seq_len = 8};
  EXPECT_EQ(error_of(ok + "\n{\"prompt\": 1, \"response\": \"b\"}\n", o),
            "d.jsonl:3: 'prompt' must be a string, found number");
  EXPECT_EQ(error_of(ok + "{\"prompt\": \"a\"}\n", o),
            "d.jsonl:2: no 'response' (format 'prompt_response' needs 'prompt' + 'response')");
  EXPECT_EQ(error_of(ok + "not json\n", o).rfind("d.jsonl:2: not a JSON object (", 0), 0u);
  EXPECT_EQ(error_of(ok + "{\"prompt\": \"a\", \"response\": \"\xc3(\"}\n", o),
            "d.jsonl:2: not a JSON object (invalid UTF-8 at byte offset 29 of the line, in "
            "'response')");
  EXPECT_EQ(error_of("{\"x\": 1}\n", o),
            "d.jsonl:1: cannot tell the record format from its keys ('x'); expected 'prompt' + "
            "'response', 'prompt' + 'chosen' [+ 'rejected'], 'text' or 'input_ids'");
  EXPECT_EQ(error_of("{\"input_ids\": [1, 300]}\n", o),
            "d.jsonl:1: 'input_ids'[1] = 300 is outside [0, 257)");
  EXPECT_EQ(error_of("{\"input_ids\": [1, 2], \"labels\": [1]}\n", o),
            "d.jsonl:1: 'labels' has 1 values but input_ids has 2");
  EXPECT_EQ(error_of("{\"input_ids\": [1, 2.5]}\n", o),
            "d.jsonl:1: 'input_ids'[1] is not an integer");
  EXPECT_EQ(error_of("{\"input_ids\": \"12\"}\n", o),
            "d.jsonl:1: 'input_ids' must be an array of integers, found string");
  // Only blank lines in memory: the error names the file.
  EXPECT_NE(error_of("\n\n", o).find("d.jsonl"), std::string::npos);
}

TEST(JsonlDataset, SkipBadCountsAndLeavesThemOut) {
  const std::string data =
      "{\"prompt\": \"a\", \"response\": \"b\"}\n"
      "oops\n"
      "{\"prompt\": \"c\"}\n"
      "\n"
      "{\"prompt\": \"e\", \"response\": \"f\"}\r\n"
      "{\"prompt\": [], \"response\": \"f\"}\n"
      "{\"prompt\": \"g\", \"response\": \"h\"}";
  auto d = dataset(data, {.seq_len = 8, .bad_records = BadRecords::kSkip});
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->skipped(), 3);
  EXPECT_EQ(d->first_skipped().rfind("d.jsonl:2: not a JSON object", 0), 0u);
  EXPECT_EQ(d->line_number(0), 1);
  EXPECT_EQ(d->line_number(1), 5);
  EXPECT_EQ(d->line_number(2), 7);
  EXPECT_EQ(d->example(1)->sequences[0].input_ids, cat({b("e"), b("f"), {kEos}}));  // CRLF
  EXPECT_EQ(d->example(2)->sequences[0].input_ids, cat({b("g"), b("h"), {kEos}}));  // no final \n

  auto none = dataset("oops\n[]\n", {.seq_len = 8, .bad_records = BadRecords::kSkip});
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("2 bad lines skipped"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Order, sharding, batches

std::string numbered_texts(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += "{\"text\": \"" + std::string(1, static_cast<char>('a' + i % 26)) + "\"}\n";
  return s;
}

TEST(JsonlDataset, ShuffleIsADeterministicPermutationPerEpoch) {
  auto d = dataset(numbered_texts(50), {.seq_len = 4, .seed = 7});
  auto same = dataset(numbered_texts(50), {.seq_len = 4, .seed = 7});
  auto other = dataset(numbered_texts(50), {.seq_len = 4, .seed = 8});
  ASSERT_TRUE(d.is_ok() && same.is_ok() && other.is_ok());
  const std::vector<int64_t> e0 = d->epoch_order(0), e1 = d->epoch_order(1);
  EXPECT_EQ(e0, same->epoch_order(0));
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, other->epoch_order(0));
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  auto seq = dataset(numbered_texts(5), {.seq_len = 4, .order = SampleOrder::kSequential});
  EXPECT_EQ(seq->epoch_order(3), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(JsonlDataset, ShardsAreDisjointAndCoverTheEpoch) {
  const int W = 3, N = 10;
  std::multiset<int64_t> seen;
  std::vector<int64_t> order;
  for (int r = 0; r < W; ++r) {
    auto d = dataset(numbered_texts(N),
                     {.seq_len = 4, .batch_size = 2, .seed = 3, .rank = r, .world_size = W});
    ASSERT_TRUE(d.is_ok());
    order = d->epoch_order(2);
    const std::vector<int64_t> mine = d->shard(2);
    for (size_t k = 0; k < mine.size(); ++k) {
      EXPECT_EQ(mine[k], order[static_cast<size_t>(r) + k * W]);  // positions r, r+W, ...
      seen.insert(mine[k]);
    }
    // Ranks hold 4, 3, 3 examples; all step floor(3 / 2) = 1 batch.
    EXPECT_EQ(d->num_batches(2), 1);
    auto batch = d->batch(2, 0);
    ASSERT_TRUE(batch.is_ok());
    EXPECT_EQ(batch->examples, (std::vector<int64_t>{mine[0], mine[1]}));
    EXPECT_FALSE(d->batch(2, 1).is_ok());
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(N));
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), static_cast<size_t>(N));
}

TEST(JsonlDataset, PaddedBatch) {
  auto d = dataset(
      "{\"prompt\": \"ab\", \"response\": \"c\"}\n{\"prompt\": \"x\", \"response\": \"yz\"}\n",
      {.seq_len = 6, .batch_size = 2, .order = SampleOrder::kSequential});
  ASSERT_TRUE(d.is_ok());
  ASSERT_EQ(d->num_batches(0), 1);
  auto bt = d->batch(0, 0);
  ASSERT_TRUE(bt.is_ok()) << bt.status().message();
  EXPECT_EQ(bt->B, 2);
  EXPECT_EQ(bt->T, 6);
  const int32_t P = kEos;  // pad: the tokenizer has no pad token, so its eos
  EXPECT_EQ(bt->input_ids, cat({b("abc"), {kEos, P, P}, b("xyz"), {kEos, P, P}}));
  EXPECT_EQ(bt->labels, cat({masked(2), b("c"), {kEos, X, X}, masked(1), b("yz"), {kEos, X, X}}));
  EXPECT_EQ(bt->attention_mask, (Ids{1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(bt->position_ids, (Ids{0, 1, 2, 3, 0, 0, 0, 1, 2, 3, 0, 0}));
  EXPECT_EQ(bt->boundaries, (std::vector<Ids>{{0, 4}, {0, 4}}));
}

TEST(JsonlDataset, PairsBatchChosenRowsThenRejectedRows) {
  auto d = dataset(
      "{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"bb\"}\n"
      "{\"prompt\": \"q\", \"chosen\": \"cc\", \"rejected\": \"d\"}\n",
      {.seq_len = 4, .batch_size = 2, .order = SampleOrder::kSequential});
  ASSERT_TRUE(d.is_ok());
  auto bt = d->batch(0, 0);
  ASSERT_TRUE(bt.is_ok()) << bt.status().message();
  EXPECT_EQ(bt->B, 4);
  EXPECT_EQ(bt->input_ids, cat({b("pa"),
                                {kEos, kEos},
                                b("qcc"),
                                {kEos},  // chosen
                                b("pbb"),
                                {kEos},
                                b("qd"),
                                {kEos, kEos}}));  // rejected
  auto pack = dataset("{\"prompt\": \"p\", \"chosen\": \"a\", \"rejected\": \"b\"}\n",
                      {.seq_len = 4, .layout = RowLayout::kPack});
  EXPECT_FALSE(pack.is_ok());
}

TEST(JsonlDataset, PackingFillsRowsGreedilyWithWholeExamples) {
  // Lengths with eos: 3, 4, 2, 6 (truncated from 8), 1.
  auto d = dataset(
      "{\"text\": \"ab\"}\n{\"text\": \"cde\"}\n{\"text\": \"f\"}\n{\"text\": \"ghijklm\"}\n"
      "{\"text\": \"\"}\n",
      {.seq_len = 6,
       .layout = RowLayout::kPack,
       .batch_size = 3,
       .order = SampleOrder::kSequential});
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->truncated(), 1);
  // In order: [3] + 4 does not fit -> [4, 2] -> 6 alone -> 1 alone; 4 rows, one batch of 3.
  ASSERT_EQ(d->num_batches(0), 1);
  auto bt = d->batch(0, 0);
  ASSERT_TRUE(bt.is_ok()) << bt.status().message();
  EXPECT_EQ(bt->examples, (std::vector<int64_t>{0, 1, 2, 3}));
  const int32_t P = kEos;
  EXPECT_EQ(bt->input_ids, cat({b("ab"),
                                {kEos, P, P, P},  //
                                b("cde"),
                                {kEos},
                                b("f"),
                                {kEos},  //
                                b("ghijkl")}));
  // Each example's first label is -100 (never a target across the boundary); padding -100.
  EXPECT_EQ(bt->labels, cat({{X},
                             b("b"),
                             {kEos, X, X, X},  //
                             {X},
                             b("de"),
                             {kEos},
                             {X},
                             {kEos},  //
                             {X},
                             b("hijkl")}));
  EXPECT_EQ(bt->attention_mask, (Ids{1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(bt->position_ids, (Ids{0, 1, 2, 0, 0, 0, 0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(bt->boundaries, (std::vector<Ids>{{0, 3}, {0, 4, 6}, {0, 6}}));
}

TEST(JsonlDataset, PackedRanksStepTogether) {
  // 13 one-byte texts (length 2 with eos) in rows of 4: two per row.
  for (int r = 0; r < 2; ++r) {
    auto d = dataset(numbered_texts(13), {.seq_len = 4,
                                          .layout = RowLayout::kPack,
                                          .batch_size = 2,
                                          .seed = 1,
                                          .rank = r,
                                          .world_size = 2});
    ASSERT_TRUE(d.is_ok());
    // Rank 0 holds 7 examples (4 rows), rank 1 holds 6 (3 rows): both step 3 / 2 = 1 batch.
    EXPECT_EQ(d->num_batches(0), 1);
    auto bt = d->batch(0, 0);
    ASSERT_TRUE(bt.is_ok());
    const std::vector<int64_t> mine = d->shard(0);
    EXPECT_EQ(bt->examples, (std::vector<int64_t>(mine.begin(), mine.begin() + 4)));
  }
}

TEST(JsonlDataset, OpensAFileFromDisk) {
  TempDir dir;
  const std::string p = dir.file("sft.jsonl");
  write_file(p, "{\"prompt\": \"a\", \"response\": \"b\"}\r\n\r\n{\"prompt\": 2}");
  auto d = JsonlDataset::open(p, bytes_tokenizer(), {.seq_len = 8});
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().message(), p + ":3: 'prompt' must be a string, found number");
}

// ---------------------------------------------------------------------------------------------
// jsonl_examples.h, now on top of JsonlFile

TEST(JsonlExamples, ReadsTokenRowsAsBefore) {
  TempDir dir;
  const std::string p = dir.file("e.jsonl");
  write_file(p,
             "{\"input_ids\": [1, 2, 3], \"token_type_ids\": [0, 0, 1]}\r\n\n"
             "{\"input_ids\": [4], \"labels\": [-100], \"attention_mask\": [1]}");
  auto ex = jsonl_examples_read(p, 10);
  ASSERT_TRUE(ex.is_ok()) << ex.status().message();
  ASSERT_EQ(ex->size(), 2u);
  EXPECT_EQ((*ex)[0].input_ids, (Ids{1, 2, 3}));
  EXPECT_TRUE((*ex)[0].labels.empty());  // not given stays empty here
  EXPECT_EQ((*ex)[0].token_type_ids, (Ids{0, 0, 1}));
  EXPECT_EQ((*ex)[1].labels, (Ids{X}));
  EXPECT_EQ((*ex)[1].attention_mask, (Ids{1}));

  write_file(p, "{\"input_ids\": [1]}\n{\"text\": \"hello\"}\n");
  auto text = jsonl_examples_read(p, 10);
  ASSERT_FALSE(text.is_ok());
  EXPECT_EQ(text.status().message().rfind(p + ":2: 'text' needs a tokenizer", 0), 0u);
  write_file(p, "{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, 10]}\n");
  auto big = jsonl_examples_read(p, 10);
  ASSERT_FALSE(big.is_ok());
  EXPECT_EQ(big.status().message(), p + ":2: 'input_ids'[1] = 10 is outside [0, 10)");
}

}  // namespace
}  // namespace zt
