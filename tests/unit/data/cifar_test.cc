// CIFAR-10 binary reader (src/zt/data/cifar.h): files in the distribution's format are built
// byte by byte here and read back; normalised values are checked against hand-computed ones;
// every malformed file gives a Status naming it; the per-rank indices follow
// torch.utils.data.DistributedSampler's rule, re-derived here from its definition.
#include "zt/data/cifar.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <vector>

#include "common/test_util.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr int kPlane = 32 * 32;

// Sample `id`'s pixel at (channel c, row h, column w): distinct per sample, channel and place,
// so a misplaced plane, row or column shows.
uint8_t pixel_value(int id, int c, int h, int w) {
  return static_cast<uint8_t>((id * 37 + c * 71 + h * 5 + w * 3) % 256);
}

// One record as the distribution stores it: the label byte, then R, G, B planes, row-major.
std::vector<uint8_t> record(int id, uint8_t label) {
  std::vector<uint8_t> r{label};
  for (int c = 0; c < 3; ++c) {
    for (int h = 0; h < 32; ++h) {
      for (int w = 0; w < 32; ++w) r.push_back(pixel_value(id, c, h, w));
    }
  }
  return r;
}

// A file of records for samples ids (label id % 10).
void write_records(const std::string& path, const std::vector<int>& ids) {
  std::vector<uint8_t> bytes;
  for (int id : ids) {
    const std::vector<uint8_t> r = record(id, static_cast<uint8_t>(id % 10));
    bytes.insert(bytes.end(), r.begin(), r.end());
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_raw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// The sample ids a dataset holds, read back through its labels and first pixel.
std::vector<int> ids_of(const CifarDataset& d) {
  std::vector<int> ids;
  for (int64_t i = 0; i < d.size(); ++i) {
    // pixel (0,0,0) = id * 37 mod 256 and label = id mod 10 identify ids < 2560 / gcd: enough
    // here, where every id is below 40.
    const uint8_t p0 = d.pixels(i)[0];
    int id = -1;
    for (int k = 0; k < 40; ++k) {
      if (pixel_value(k, 0, 0, 0) == p0 && k % 10 == d.label(i)) id = k;
    }
    ids.push_back(id);
  }
  return ids;
}

TEST(Cifar, ReadsRecordsAcrossFilesInOrder) {
  TempDir dir;
  write_records(dir.file("a.bin"), {0, 1, 2});
  write_records(dir.file("b.bin"), {13, 14});
  auto d = CifarDataset::open_files({dir.file("a.bin"), dir.file("b.bin")});
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  ASSERT_EQ(d->size(), 5);
  EXPECT_EQ(d->label(0), 0);
  EXPECT_EQ(d->label(3), 3);  // id 13
  EXPECT_EQ(d->label(4), 4);
  const std::vector<uint8_t> expected = record(14, 4);
  const auto px = d->pixels(4);
  EXPECT_TRUE(std::equal(px.begin(), px.end(), expected.begin() + 1));
}

TEST(Cifar, BatchIsChannelPlanarAndNormalisedAsTorchvision) {
  TempDir dir;
  write_records(dir.file("x.bin"), {0, 1, 2, 3});
  auto d = CifarDataset::open(dir.file("x.bin"));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  const std::vector<int64_t> idx{2, 0, 2};  // any order, repeats allowed
  CifarBatch b = d->batch(idx);
  ASSERT_EQ(b.images.shape(), Shape({3, 3, 32, 32}));
  ASSERT_EQ(b.labels.shape(), Shape({3}));
  EXPECT_EQ(b.labels.dtype(), DType::i32);
  const std::vector<double> labels = b.labels.to_doubles();
  EXPECT_EQ(labels, (std::vector<double>{2, 0, 2}));
  const std::vector<float> img = b.images.to_floats();
  for (int j = 0; j < 3; ++j) {
    for (int c = 0; c < 3; ++c) {
      for (int h = 0; h < 32; h += 7) {
        for (int w = 0; w < 32; w += 5) {
          const int v = pixel_value(static_cast<int>(idx[j]), c, h, w);
          // (v / 255 - 0.5) / 0.5 = 2 v / 255 - 1.
          const double expected = 2.0 * v / 255.0 - 1.0;
          EXPECT_NEAR(img[((j * 3 + c) * 32 + h) * 32 + w], expected, 1e-6)
              << "sample " << j << " channel " << c << " (" << h << "," << w << ")";
        }
      }
    }
  }
}

TEST(Cifar, NormalisationEndpointsAndImagenetStatistics) {
  // Bytes 0, 51, 255 in the red plane; ToTensor gives 0, 0.2, 1.
  std::vector<uint8_t> rec(kCifarRecordBytes, 0);
  rec[0] = 9;
  rec[1] = 0;
  rec[2] = 51;
  rec[3] = 255;
  rec[1 + kPlane] = 255;      // green (0,0)
  rec[1 + 2 * kPlane] = 255;  // blue (0,0)
  TempDir dir;
  write_raw(dir.file("one.bin"), rec);
  auto d = CifarDataset::open(dir.file("one.bin"));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  const std::vector<int64_t> idx{0};
  std::vector<float> half = d->batch(idx).images.to_floats();
  EXPECT_EQ(half[0], -1.0f);
  EXPECT_NEAR(half[1], -0.6, 1e-7);
  EXPECT_EQ(half[2], 1.0f);
  std::vector<float> inet = d->batch(idx, kCifarNormalizeImagenet).images.to_floats();
  EXPECT_NEAR(inet[0], (0.0 - 0.485) / 0.229, 1e-6);
  EXPECT_NEAR(inet[2], (1.0 - 0.485) / 0.229, 1e-6);
  EXPECT_NEAR(inet[kPlane], (1.0 - 0.456) / 0.224, 1e-6);
  EXPECT_NEAR(inet[2 * kPlane], (1.0 - 0.406) / 0.225, 1e-6);
  // batch_into writes into given buffers, the same values.
  Tensor images = Tensor::zeros({1, 3, 32, 32}, DType::f32), labels = Tensor::zeros({1}, DType::i32);
  d->batch_into(images, labels, idx, kCifarNormalizeImagenet);
  EXPECT_EQ(images.to_floats(), inet);
  EXPECT_EQ(labels.item(), 9.0);
}

TEST(Cifar, FolderReadsTrainBatchesInNumericOrderAndTestAlone) {
  TempDir dir;
  const fs::path inner = dir.path() / "cifar-10-batches-bin";
  fs::create_directories(inner);
  write_records((inner / "data_batch_2.bin").string(), {20, 21});
  write_records((inner / "data_batch_10.bin").string(), {30});
  write_records((inner / "data_batch_1.bin").string(), {10, 11});
  write_records((inner / "test_batch.bin").string(), {5, 6, 7});
  write_raw((inner / "batches.meta.txt").string(), {'a', '\n'});
  write_raw((inner / "data_batch_x.bin").string(), {1, 2, 3});  // not a batch name: ignored
  for (const fs::path& where : {inner, dir.path()}) {  // the folder, or the one above it
    auto train = CifarDataset::open(where.string(), CifarSplit::kTrain);
    ASSERT_TRUE(train.is_ok()) << train.status().message();
    EXPECT_EQ(ids_of(*train), (std::vector<int>{10, 11, 20, 21, 30}));
    ASSERT_EQ(train->files().size(), 3u);
    auto test = CifarDataset::open(where.string(), CifarSplit::kTest);
    ASSERT_TRUE(test.is_ok()) << test.status().message();
    EXPECT_EQ(ids_of(*test), (std::vector<int>{5, 6, 7}));
  }
}

TEST(Cifar, BadFilesAreErrorsNamingTheFile) {
  TempDir dir;
  // Size not a whole number of records.
  std::vector<uint8_t> two = record(0, 1);
  const std::vector<uint8_t> r2 = record(1, 2);
  two.insert(two.end(), r2.begin(), r2.end());
  std::vector<uint8_t> ragged = two;
  ragged.resize(ragged.size() + 5);
  write_raw(dir.file("ragged.bin"), ragged);
  auto e = CifarDataset::open(dir.file("ragged.bin"));
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find(dir.file("ragged.bin")), std::string::npos);
  EXPECT_NE(e.status().message().find("6151 bytes"), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find("3073-byte records"), std::string::npos);

  // A label above 9 in the second record.
  std::vector<uint8_t> bad_label = two;
  bad_label[kCifarRecordBytes] = 10;
  write_raw(dir.file("label.bin"), bad_label);
  e = CifarDataset::open(dir.file("label.bin"));
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find(dir.file("label.bin")), std::string::npos);
  EXPECT_NE(e.status().message().find("record 1 (byte offset 3073) has label 10"),
            std::string::npos)
      << e.status().message();

  // The same file with label 9 is fine: the bound is inclusive.
  bad_label[kCifarRecordBytes] = 9;
  write_raw(dir.file("label9.bin"), bad_label);
  EXPECT_TRUE(CifarDataset::open(dir.file("label9.bin")).is_ok());

  // CIFAR-100 records (two label bytes) are named as such.
  write_raw(dir.file("c100.bin"), std::vector<uint8_t>(3074 * 2, 0));
  e = CifarDataset::open(dir.file("c100.bin"));
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("CIFAR-100"), std::string::npos) << e.status().message();

  write_raw(dir.file("empty.bin"), {});
  e = CifarDataset::open(dir.file("empty.bin"));
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("empty"), std::string::npos) << e.status().message();

  e = CifarDataset::open(dir.file("missing.bin"));
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find(dir.file("missing.bin")), std::string::npos);

  // A folder without the split's files.
  fs::create_directories(dir.path() / "nothing");
  e = CifarDataset::open((dir.path() / "nothing").string(), CifarSplit::kTrain);
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_NE(e.status().message().find("data_batch_"), std::string::npos);
  e = CifarDataset::open((dir.path() / "nothing").string(), CifarSplit::kTest);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("test_batch.bin"), std::string::npos);

  // One bad file among good ones fails the whole open, naming the bad one.
  write_records(dir.file("good.bin"), {1, 2});
  e = CifarDataset::open_files({dir.file("good.bin"), dir.file("ragged.bin")});
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("ragged.bin"), std::string::npos);
}

TEST(Cifar, TorchRandpermHandDerivation) {
  // std::mt19937 seeded 0 starts 2357136044, 2546248239, 3071714933 (the Mersenne Twister's
  // reference sequence for seed 0, as at::mt19937 produces it).
  std::mt19937 rng(0);
  ASSERT_EQ(rng(), 2357136044u);
  ASSERT_EQ(rng(), 2546248239u);
  ASSERT_EQ(rng(), 3071714933u);
  // randperm(4): i=0 swaps with 0 + 2357136044 % 4 = 0, i=1 with 1 + 2546248239 % 3 = 1,
  // i=2 with 2 + 3071714933 % 2 = 3: [0, 1, 3, 2].
  EXPECT_EQ(torch_randperm(4, 0), (std::vector<int64_t>{0, 1, 3, 2}));
  // Only the seed's low 32 bits count.
  EXPECT_EQ(torch_randperm(4, uint64_t{1} << 32), torch_randperm(4, 0));
  EXPECT_EQ(torch_randperm(0, 5), std::vector<int64_t>{});
  EXPECT_EQ(torch_randperm(1, 5), std::vector<int64_t>{0});
  // A permutation, and another seed gives another one.
  std::vector<int64_t> p = torch_randperm(1000, 7), q = torch_randperm(1000, 8);
  EXPECT_NE(p, q);
  std::sort(p.begin(), p.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(p[static_cast<size_t>(i)], i);
}

// DistributedSampler.__iter__ written out as in torch (list padding, then a strided slice).
std::vector<int64_t> sampler_reference(int64_t n, int W, int r, ShardTail tail,
                                       std::vector<int64_t> indices) {
  const int64_t num_samples =
      (tail == ShardTail::kDrop && n % W != 0) ? (n - W + W - 1) / W : (n + W - 1) / W;
  const int64_t total = num_samples * W;
  if (tail == ShardTail::kPad) {
    const auto pad = static_cast<size_t>(total - n);
    std::vector<int64_t> extra;
    while (extra.size() < pad) extra.insert(extra.end(), indices.begin(), indices.end());
    extra.resize(pad);
    indices.insert(indices.end(), extra.begin(), extra.end());
  } else {
    indices.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  for (int64_t i = r; i < total; i += W) mine.push_back(indices[static_cast<size_t>(i)]);
  return mine;
}

TEST(Cifar, DistributedSamplerMatchesTorchRule) {
  for (int64_t n : {1, 2, 7, 10, 12}) {
    for (int W : {1, 2, 3, 4, 5}) {
      for (ShardTail tail : {ShardTail::kPad, ShardTail::kDrop}) {
        for (SampleOrder order : {SampleOrder::kSequential, SampleOrder::kRandom}) {
          DistributedSamplerOptions o{.order = order, .seed = 3, .world_size = W, .tail = tail};
          std::vector<int64_t> base(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) base[static_cast<size_t>(i)] = i;
          if (order == SampleOrder::kRandom) base = torch_randperm(n, 3 + 2);  // seed + epoch
          std::multiset<int64_t> seen;
          for (int r = 0; r < W; ++r) {
            o.rank = r;
            auto got = distributed_sampler_indices(n, 2, o);
            ASSERT_TRUE(got.is_ok());
            EXPECT_EQ(*got, sampler_reference(n, W, r, tail, base))
                << "n " << n << " W " << W << " rank " << r;
            seen.insert(got->begin(), got->end());
          }
          // Padding covers everything (some twice); dropping loses at most W - 1 samples.
          if (tail == ShardTail::kPad) {
            EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), static_cast<size_t>(n));
          } else {
            EXPECT_EQ(seen.size(), static_cast<size_t>(n / W * W));
          }
        }
      }
    }
  }
}

TEST(Cifar, DistributedSamplerHandExample) {
  // 5 samples, 2 ranks, sequential: padded order 0 1 2 3 4 0; rank 0 takes 0 2 4, rank 1 1 3 0.
  DistributedSamplerOptions o{.order = SampleOrder::kSequential, .rank = 1, .world_size = 2};
  EXPECT_EQ(*distributed_sampler_indices(5, 0, o), (std::vector<int64_t>{1, 3, 0}));
  o.rank = 0;
  EXPECT_EQ(*distributed_sampler_indices(5, 0, o), (std::vector<int64_t>{0, 2, 4}));
  o.tail = ShardTail::kDrop;  // cut to 4: rank 0 takes 0 2
  EXPECT_EQ(*distributed_sampler_indices(5, 0, o), (std::vector<int64_t>{0, 2}));
  // The epoch reseeds the shuffle; a single rank sees the whole permutation.
  DistributedSamplerOptions one{.seed = 10};
  EXPECT_EQ(*distributed_sampler_indices(6, 1, one), torch_randperm(6, 11));
  // Bad rank / world size.
  o.rank = 2;
  EXPECT_FALSE(distributed_sampler_indices(5, 0, o).is_ok());
  o.rank = 0;
  o.world_size = 0;
  EXPECT_FALSE(distributed_sampler_indices(5, 0, o).is_ok());
}

TEST(Cifar, LoaderBatchCount) {
  EXPECT_EQ(loader_num_batches(10, 4, LastBatch::kKeep), 3);
  EXPECT_EQ(loader_num_batches(10, 4, LastBatch::kDrop), 2);
  EXPECT_EQ(loader_num_batches(8, 4, LastBatch::kKeep), 2);
  EXPECT_EQ(loader_num_batches(0, 4, LastBatch::kKeep), 0);
}

}  // namespace
}  // namespace zt
