// BlendSampler (src/zt/data/blend.h): token files whose every token says which file and which
// position it is (dataset * kStride + position), so each batch row tells where it was read.
// Proportions are counted from the rows and checked against the weights (every prefix within one
// window of weights[i] * n for these weights: the greedy rule's error does not grow); sequential
// rows against the documented per-dataset walk; per-rank slices against the one-process batch;
// batch_at against next and seek; the --data parser's errors.
#include "zt/data/blend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/test_util.h"

namespace zt {
namespace {

using testing::TempDir;

constexpr int32_t kStride = 10000;

// Dataset d's file: token p = d * kStride + p.
std::shared_ptr<const TokenFile> make_file(const TempDir& dir, int d, int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) tokens[p] = static_cast<int32_t>(d * kStride + p);
  const std::string path = dir.file(fmt::format("d{}.bin", d));
  Status s = token_file_write(path, tokens, 65536);
  EXPECT_TRUE(s.is_ok()) << s.message();
  Result<TokenFile> f = TokenFile::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  return std::make_shared<const TokenFile>(std::move(f).value());
}

struct Row {
  int dataset;
  int64_t start;
  bool operator==(const Row&) const = default;
  bool operator<(const Row& o) const {
    return dataset != o.dataset ? dataset < o.dataset : start < o.start;
  }
};

// The rows of a batch, decoded from their first token; also checks each row is a contiguous
// window with targets shifted by one.
std::vector<Row> rows_of(const Batch& b) {
  const int64_t rows = b.tokens.shape()[0], t = b.tokens.shape()[1];
  const int32_t* tok = b.tokens.data<int32_t>();
  const int32_t* tgt = b.targets.data<int32_t>();
  std::vector<Row> out;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < t; ++i) {
      EXPECT_EQ(tok[r * t + i], tok[r * t] + i) << "row " << r;
      EXPECT_EQ(tgt[r * t + i], tok[r * t] + i + 1) << "row " << r;
    }
    out.push_back({tok[r * t] / kStride, tok[r * t] % kStride});
  }
  return out;
}

std::vector<BlendSource> three_sources(const TempDir& dir) {
  // Weights 7:2:1, given unnormalized.
  return {{make_file(dir, 0, 9001), 7.0},
          {make_file(dir, 1, 5003), 2.0},
          {make_file(dir, 2, 3001), 1.0}};
}

TEST(BlendSampler, ProportionsFollowTheWeightsInEveryPrefix) {
  TempDir dir;
  const int64_t b = 8, t = 4, batches = 1250;  // 10,000 windows
  Result<BlendSampler> s = BlendSampler::create(
      three_sources(dir),
      {.batch_size = b, .seq_len = t, .order = SampleOrder::kRandom, .seed = 5});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const std::vector<double> want = {0.7, 0.2, 0.1};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(s->weights()[i], want[i], 1e-12);
  std::vector<int64_t> count(3, 0);
  int64_t n = 0;
  for (int64_t g = 0; g < batches; ++g) {
    Result<Batch> batch = s->next();
    ASSERT_TRUE(batch.is_ok()) << batch.status().message();
    for (const Row& r : rows_of(*batch)) {
      ASSERT_GE(r.dataset, 0);
      ASSERT_LT(r.dataset, 3);
      // Random order: a start where a whole window (T + 1 tokens) fits.
      ASSERT_LE(r.start + t + 1, s->file(r.dataset).num_tokens());
      ++count[r.dataset];
      ++n;
      for (int i = 0; i < 3; ++i) {
        ASSERT_LE(std::abs(static_cast<double>(count[i]) - want[i] * static_cast<double>(n)), 1.0)
            << "dataset " << i << " after " << n << " windows";
      }
    }
  }
  ASSERT_EQ(n, 10000);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(static_cast<double>(count[i]) / static_cast<double>(n), want[i], 0.01) << i;
  }
}

TEST(BlendSampler, SequentialWalksEachFileInItsOwnOrderAndWraps) {
  TempDir dir;
  const int64_t t = 16;
  // Small files so the walks wrap: K = floor((N - 1) / T) windows per pass.
  std::vector<BlendSource> src = {{make_file(dir, 0, 161), 1.0}, {make_file(dir, 1, 100), 1.0}};
  Result<BlendSampler> s =
      BlendSampler::create(src, {.batch_size = 3, .seq_len = t, .order = SampleOrder::kSequential});
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const int64_t k[2] = {160 / t, 99 / t};  // 10 and 6
  int64_t seen[2] = {0, 0};
  for (int64_t g = 0; g < 40; ++g) {
    Result<Batch> batch = s->next();
    ASSERT_TRUE(batch.is_ok()) << batch.status().message();
    for (const Row& r : rows_of(*batch)) {
      const int d = r.dataset;
      EXPECT_EQ(r.start, (seen[d] % k[d]) * t) << "dataset " << d << " window " << seen[d];
      ++seen[d];
    }
  }
  // Equal weights: ties go to the lower index, so the datasets alternate 0, 1, 0, 1, ...
  EXPECT_EQ(seen[0], 60);
  EXPECT_EQ(seen[1], 60);
  EXPECT_EQ(s->window_source(0).dataset, 0);
  EXPECT_EQ(s->window_source(1).dataset, 1);
  EXPECT_EQ(s->window_source(2).dataset, 0);
}

TEST(BlendSampler, RanksSliceTheOneProcessBatch) {
  TempDir dir;
  for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kRandom}) {
    const int64_t b = 2, w = 3, t = 8;
    Result<BlendSampler> one = BlendSampler::create(
        three_sources(dir), {.batch_size = b * w, .seq_len = t, .order = order, .seed = 11});
    ASSERT_TRUE(one.is_ok()) << one.status().message();
    std::vector<BlendSampler> ranks;
    for (int r = 0; r < w; ++r) {
      Result<BlendSampler> s =
          BlendSampler::create(three_sources(dir), {.batch_size = b,
                                                    .seq_len = t,
                                                    .order = order,
                                                    .seed = 11,
                                                    .rank = r,
                                                    .world_size = static_cast<int>(w)});
      ASSERT_TRUE(s.is_ok()) << s.status().message();
      ranks.push_back(std::move(s).value());
    }
    for (int64_t g = 0; g < 30; ++g) {
      Result<Batch> all = one->next();
      ASSERT_TRUE(all.is_ok());
      const std::vector<Row> want = rows_of(*all);
      std::vector<Row> got;
      for (BlendSampler& s : ranks) {
        Result<Batch> mine = s.next();
        ASSERT_TRUE(mine.is_ok());
        for (const Row& r : rows_of(*mine)) got.push_back(r);
      }
      EXPECT_EQ(got, want) << "batch " << g;
      if (order == SampleOrder::kSequential) {
        // 30 batches of 6 windows never wrap these files: the ranks' windows are all different.
        EXPECT_EQ(std::set<Row>(got.begin(), got.end()).size(), got.size()) << "batch " << g;
      }
    }
  }
}

TEST(BlendSampler, BatchAtMatchesNextAndSeekNeedsNoHistory) {
  TempDir dir;
  const BatchSamplerOptions opt{
      .batch_size = 5, .seq_len = 4, .order = SampleOrder::kRandom, .seed = 3};
  Result<BlendSampler> walk = BlendSampler::create(three_sources(dir), opt);
  ASSERT_TRUE(walk.is_ok());
  std::vector<std::vector<Row>> seq;
  for (int64_t g = 0; g < 2000; ++g) {  // 10,000 windows: three blocks of the cache
    Result<Batch> batch = walk->next();
    ASSERT_TRUE(batch.is_ok());
    seq.push_back(rows_of(*batch));
  }
  EXPECT_EQ(walk->position(), 2000);
  // A fresh sampler, asked out of order (the far end first, then backwards).
  Result<BlendSampler> fresh = BlendSampler::create(three_sources(dir), opt);
  ASSERT_TRUE(fresh.is_ok());
  for (int64_t g : {1999, 1000, 3, 1640, 0, 819, 820}) {
    Result<Batch> batch = fresh->batch_at(g);
    ASSERT_TRUE(batch.is_ok());
    EXPECT_EQ(batch->index, g);
    EXPECT_EQ(rows_of(*batch), seq[g]) << "batch " << g;
  }
  EXPECT_EQ(fresh->position(), 0);
  fresh->seek(1234);
  for (int64_t g = 1234; g < 1240; ++g) {
    Result<Batch> batch = fresh->next();
    ASSERT_TRUE(batch.is_ok());
    EXPECT_EQ(rows_of(*batch), seq[g]) << "batch " << g;
  }
  // Another seed draws other windows (same datasets: the assignment does not use the seed).
  BatchSamplerOptions other = opt;
  other.seed = 4;
  Result<BlendSampler> s4 = BlendSampler::create(three_sources(dir), other);
  ASSERT_TRUE(s4.is_ok());
  Result<Batch> b4 = s4->batch_at(7);
  ASSERT_TRUE(b4.is_ok());
  EXPECT_NE(rows_of(*b4), seq[7]);
}

TEST(BlendSampler, ErrorsNameTheFile) {
  TempDir dir;
  std::vector<BlendSource> src = {{make_file(dir, 0, 100), 1.0}, {make_file(dir, 1, 8), 1.0}};
  Result<BlendSampler> s = BlendSampler::create(src, {.batch_size = 1, .seq_len = 8});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find(dir.file("d1.bin")), std::string::npos)
      << s.status().message();
  src[1].weight = 0;
  s = BlendSampler::create(src, {.batch_size = 1, .seq_len = 4});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("positive"), std::string::npos) << s.status().message();
  EXPECT_FALSE(BlendSampler::create({}, {.batch_size = 1, .seq_len = 4}).is_ok());
}

TEST(BlendSpecParse, OneFileOrWeightFilePairs) {
  TempDir dir;
  const std::string a = dir.file("a.bin"), b = dir.file("b.bin");
  std::ofstream(a) << "x";
  std::ofstream(b) << "y";
  Result<std::vector<BlendSpec>> one = blend_spec_parse({a});
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].path, a);

  Result<std::vector<BlendSpec>> two = blend_spec_parse({"0.7", a, "3e-1", b});
  ASSERT_TRUE(two.is_ok()) << two.status().message();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].weight, 0.7);
  EXPECT_EQ((*two)[1].weight, 0.3);
  EXPECT_EQ((*two)[1].path, b);

  const auto error_of = [](const std::vector<std::string>& v) {
    Result<std::vector<BlendSpec>> r = blend_spec_parse(v, "--data");
    EXPECT_FALSE(r.is_ok());
    return r.is_ok() ? std::string() : r.status().message();
  };
  std::string e = error_of({"0.7", a, "0.3"});
  EXPECT_NE(e.find("--data"), std::string::npos) << e;
  EXPECT_NE(e.find("WEIGHT FILE"), std::string::npos) << e;
  e = error_of({a, b});
  EXPECT_NE(e.find(fmt::format("'{}' is not a weight", a)), std::string::npos) << e;
  e = error_of({"-0.5", a, "1", b});
  EXPECT_NE(e.find("positive"), std::string::npos) << e;
  EXPECT_NE(e.find(a), std::string::npos) << e;
  e = error_of({"0", a, "1", b});
  EXPECT_NE(e.find("positive"), std::string::npos) << e;
  e = error_of({"nan", a, "1", b});
  EXPECT_NE(e.find("not a weight"), std::string::npos) << e;
  e = error_of({"0.5", a, "0.5", dir.file("gone.bin")});
  EXPECT_NE(e.find(dir.file("gone.bin")), std::string::npos) << e;
  e = error_of({dir.file("gone.bin")});
  EXPECT_NE(e.find(dir.file("gone.bin")), std::string::npos) << e;
}

}  // namespace
}  // namespace zt
