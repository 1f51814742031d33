// BatchSampler (src/zt/data/batch_sampler.h): batch rows checked against window starts computed
// here from the documented numbering; per-rank slices against the single-process batch; random
// windows against the file contents and for uniform coverage of every legal start.
#include "zt/data/batch_sampler.h"

#include <gtest/gtest.h>

#include "common/test_util.h"
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace zt {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// Writes `tokens` with the llm.c writer and maps it.
std::shared_ptr<const TokenFile> make_file(const TempDir& dir, const std::string& name,
                                           const std::vector<int32_t>& tokens, int64_t vocab) {
  const std::string path = dir.file(name);
  Status s = token_file_write(path, tokens, vocab);
  EXPECT_TRUE(s.is_ok()) << s.message();
  Result<TokenFile> f = TokenFile::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  return std::make_shared<const TokenFile>(std::move(f).value());
}

// A file whose tokens are a scrambled function of position, so a row can only match if it was
// read from the right place of the file.
std::vector<int32_t> scrambled_tokens(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919 + 13) % 65521);
  return v;
}

std::vector<int32_t> row(const Tensor& t, int64_t r) {
  const int32_t* p = t.data<int32_t>() + r * t.size(1);
  return {p, p + t.size(1)};
}

BatchSampler make_sampler(std::shared_ptr<const TokenFile> file, const BatchSamplerOptions& o) {
  Result<BatchSampler> s = BatchSampler::create(std::move(file), o);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return std::move(s).value();
}

TEST(BatchSampler, SequentialWindowsWalkTheFileAndWrap) {
  TempDir dir;
  const int64_t n = 37, b = 3, t = 5;
  const std::vector<int32_t> data = scrambled_tokens(n);
  auto file = make_file(dir, "seq.bin", data, 65521);
  BatchSampler s = make_sampler(file, {.batch_size = b, .seq_len = t});
  // Whole windows of T+1 tokens with stride T: starts 0, 5, ..., 30 (30 + 5 = 35 <= 36).
  const int64_t windows = 7;
  EXPECT_EQ(s.windows_per_epoch(), windows);
  for (int64_t g = 0; g < 6; ++g) {  // 18 rows: wraps twice past window 6
    Result<Batch> batch = s.next();
    ASSERT_TRUE(batch.is_ok()) << batch.status().message();
    EXPECT_EQ(batch->index, g);
    ASSERT_EQ(batch->tokens.shape(), Shape({b, t}));
    ASSERT_EQ(batch->targets.shape(), Shape({b, t}));
    EXPECT_EQ(batch->tokens.dtype(), DType::i32);
    for (int64_t r = 0; r < b; ++r) {
      const int64_t start = ((g * b + r) % windows) * t;
      const std::vector<int32_t> want_tokens(data.begin() + start, data.begin() + start + t);
      const std::vector<int32_t> want_targets(data.begin() + start + 1,
                                              data.begin() + start + t + 1);
      EXPECT_EQ(row(batch->tokens, r), want_tokens) << "g=" << g << " r=" << r;
      EXPECT_EQ(row(batch->targets, r), want_targets) << "g=" << g << " r=" << r;
    }
  }
  EXPECT_EQ(s.position(), 6);
}

// The rows of ranks 0..W-1 (batch B each), stacked in rank order, equal the rows of one
// process with batch W*B, for every batch.
void expect_ranks_union_is_single_process(SampleOrder order) {
  TempDir dir;
  const int64_t n = 1000, b = 2, t = 7;
  const int world = 3;
  auto file = make_file(dir, "data.bin", scrambled_tokens(n), 65521);
  BatchSampler single =
      make_sampler(file, {.batch_size = world * b, .seq_len = t, .order = order, .seed = 1234});
  std::vector<BatchSampler> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(make_sampler(file, {.batch_size = b,
                                        .seq_len = t,
                                        .order = order,
                                        .seed = 1234,
                                        .rank = r,
                                        .world_size = world}));
  }
  std::set<std::vector<int32_t>> distinct_rows;
  for (int64_t g = 0; g < 30; ++g) {  // 180 rows > 142 windows: sequential wraps
    Result<Batch> whole = single.next();
    ASSERT_TRUE(whole.is_ok());
    for (int r = 0; r < world; ++r) {
      Result<Batch> part = ranks[r].next();
      ASSERT_TRUE(part.is_ok());
      for (int64_t i = 0; i < b; ++i) {
        EXPECT_EQ(row(part->tokens, i), row(whole->tokens, r * b + i)) << g << " " << r;
        EXPECT_EQ(row(part->targets, i), row(whole->targets, r * b + i)) << g << " " << r;
        distinct_rows.insert(row(part->tokens, i));
      }
    }
  }
  // Ranks read different data (not all the same window).
  EXPECT_GT(distinct_rows.size(), 100u);
}

TEST(BatchSampler, RankSlicesUnionIsSingleProcessBatchSequential) {
  expect_ranks_union_is_single_process(SampleOrder::kSequential);
}

TEST(BatchSampler, RankSlicesUnionIsSingleProcessBatchRandom) {
  expect_ranks_union_is_single_process(SampleOrder::kRandom);
}

TEST(BatchSampler, RandomWindowsAreFileWindowsCoveringEveryStartUniformly) {
  TempDir dir;
  // Token i = i, so a row's first token is its start.
  const int64_t n = 20, t = 4, b = 8;
  std::vector<int32_t> data(n);
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<int32_t>(i);
  auto file = make_file(dir, "iota.bin", data, 257);
  BatchSampler s =
      make_sampler(file, {.batch_size = b, .seq_len = t, .order = SampleOrder::kRandom, .seed = 7});
  const int64_t positions = n - t;  // starts 0..15: start + T is the last target, <= N-1
  std::map<int32_t, int64_t> counts;
  const int64_t batches = 2000;
  for (int64_t g = 0; g < batches; ++g) {
    Result<Batch> batch = s.next();
    ASSERT_TRUE(batch.is_ok());
    for (int64_t r = 0; r < b; ++r) {
      const std::vector<int32_t> tok = row(batch->tokens, r);
      const std::vector<int32_t> tgt = row(batch->targets, r);
      const int32_t start = tok[0];
      ASSERT_GE(start, 0);
      ASSERT_LT(start, positions);
      for (int64_t i = 0; i < t; ++i) {
        ASSERT_EQ(tok[i], start + i);
        ASSERT_EQ(tgt[i], start + i + 1);
      }
      ++counts[start];
    }
  }
  // Every legal start is drawn (both ends included), none outside, and the counts pass a
  // chi-square test: 15 degrees of freedom, 99.9th percentile 37.7.
  ASSERT_EQ(static_cast<int64_t>(counts.size()), positions);
  const double expected = static_cast<double>(batches * b) / static_cast<double>(positions);
  double chi2 = 0;
  for (const auto& [start, c] : counts) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 37.7);
}

TEST(BatchSampler, RandomOrderIsDeterministicPerSeedAndResumable) {
  TempDir dir;
  auto file = make_file(dir, "data.bin", scrambled_tokens(5000), 65521);
  const BatchSamplerOptions o{
      .batch_size = 4, .seq_len = 16, .order = SampleOrder::kRandom, .seed = 99};
  BatchSampler a = make_sampler(file, o);
  BatchSampler same = make_sampler(file, o);
  BatchSamplerOptions o2 = o;
  o2.seed = 100;
  BatchSampler other = make_sampler(file, o2);
  std::vector<std::vector<int32_t>> a_rows;
  int differing = 0;
  for (int g = 0; g < 10; ++g) {
    Batch x = a.next().value();
    Batch y = same.next().value();
    Batch z = other.next().value();
    EXPECT_EQ(x.tokens.to_doubles(), y.tokens.to_doubles());
    differing += x.tokens.to_doubles() != z.tokens.to_doubles();
    a_rows.push_back(row(x.tokens, 0));
  }
  EXPECT_EQ(differing, 10);
  // A fresh sampler that seeks to batch 6 continues exactly as the one that ran there.
  BatchSampler resumed = make_sampler(file, o);
  resumed.seek(6);
  for (int g = 6; g < 10; ++g) EXPECT_EQ(row(resumed.next()->tokens, 0), a_rows[g]) << g;
  EXPECT_EQ(row(a.batch_at(3)->tokens, 0), a_rows[3]);
}

TEST(BatchSampler, WindowStartMatchesBatchRows) {
  TempDir dir;
  std::vector<int32_t> data(300);
  for (int i = 0; i < 300; ++i) data[i] = i;
  auto file = make_file(dir, "iota.bin", data, 1000);
  for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kRandom}) {
    BatchSampler s = make_sampler(
        file,
        {.batch_size = 3, .seq_len = 9, .order = order, .seed = 5, .rank = 1, .world_size = 2});
    for (int64_t g = 0; g < 5; ++g) {
      Batch batch = s.batch_at(g).value();
      for (int64_t r = 0; r < 3; ++r) {
        // Rank 1 of 2 holds global windows g*6 + 3 + r.
        EXPECT_EQ(row(batch.tokens, r)[0], s.window_start(g * 6 + 3 + r)) << g << " " << r;
      }
    }
  }
}

TEST(BatchSampler, ErrorsNameFileAndValues) {
  TempDir dir;
  auto file = make_file(dir, "tiny.bin", {1, 2, 3, 4, 5}, 257);
  Result<BatchSampler> s = BatchSampler::create(file, {.batch_size = 1, .seq_len = 5});
  ASSERT_FALSE(s.is_ok());
  const std::string& m = s.status().message();
  EXPECT_NE(m.find(file->path()), std::string::npos) << m;
  EXPECT_NE(m.find("5 tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("T=5"), std::string::npos) << m;
  // T = 4 needs exactly 5 tokens: allowed, one window.
  EXPECT_TRUE(BatchSampler::create(file, {.batch_size = 1, .seq_len = 4}).is_ok());

  EXPECT_FALSE(BatchSampler::create(file, {.batch_size = 0, .seq_len = 2}).is_ok());
  EXPECT_FALSE(
      BatchSampler::create(file, {.batch_size = 1, .seq_len = 2, .rank = 2, .world_size = 2})
          .is_ok());

  // A token beyond the model's vocabulary is reported with its position.
  auto wide = make_file(dir, "wide.bin", {1, 2, 300, 4, 5}, 1000);
  BatchSampler v = make_sampler(wide, {.batch_size = 1, .seq_len = 4, .vocab_size = 257});
  Result<Batch> batch = v.next();
  ASSERT_FALSE(batch.is_ok());
  EXPECT_NE(batch.status().message().find(wide->path()), std::string::npos);
  EXPECT_NE(batch.status().message().find("token 300 at position 2"), std::string::npos)
      << batch.status().message();
  EXPECT_EQ(v.position(), 0) << "a failed batch must not advance";
}

}  // namespace
}  // namespace zt
