// CIFAR-10 in its binary distribution (cifar-10-binary.tar.gz -> cifar-10-batches-bin/:
// data_batch_1.bin .. data_batch_5.bin, test_batch.bin). Each file is a run of 3073-byte
// records: 1 label byte (0-9), then 3072 pixel bytes, a 32x32 image as three planes (red, green,
// blue), each row-major. The files are read whole into memory (150 MiB for the training set),
// as torchvision's CIFAR10 does, and every record's label is checked once, at open.
//
// Batches are what torchvision's transforms ToTensor() then Normalize(mean, std) make of the
// images: (N, 3, 32, 32) f32 with x = (byte / 255 - mean[c]) / std[c], each step rounded to f32
// as torch computes it, so the values are bit-identical. Labels are (N) i32.
//
// Which samples a rank reads is torch.utils.data.DistributedSampler's rule, reproduced exactly
// (the one DeepSpeed's data loader uses, with its defaults shuffle=True, seed=0,
// drop_last=False) - see distributed_sampler_indices below.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/core/tensor.h"
#include "zt/data/batch_sampler.h"

namespace zt {

inline constexpr int64_t kCifarSide = 32;
inline constexpr int64_t kCifarChannels = 3;
inline constexpr int64_t kCifarClasses = 10;
inline constexpr int64_t kCifarImageBytes = kCifarChannels * kCifarSide * kCifarSide;  // 3072
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;                     // 3073

// Which files a folder stands for: data_batch_<k>.bin in increasing k (train) or
// test_batch.bin (test).
enum class CifarSplit : unsigned char { kTrain, kTest };

// Per-channel (R, G, B) mean and std of torchvision's Normalize, applied after ToTensor's
// division by 255.
struct CifarNormalize {
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};
};
// Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)): values in [-1, 1] (PyTorch's CIFAR-10 tutorial).
inline constexpr CifarNormalize kCifarNormalizeHalf{};
// ImageNet's statistics, which torchvision-model recipes (and DeepSpeed's pipeline example) use.
inline constexpr CifarNormalize kCifarNormalizeImagenet{{0.485f, 0.456f, 0.406f},
                                                        {0.229f, 0.224f, 0.225f}};

struct CifarBatch {
  Tensor images;  // (N, 3, 32, 32) f32, CPU
  Tensor labels;  // (N) i32, CPU
};

class CifarDataset {
 public:
  // `path` is one CIFAR-10 binary file, or a folder holding the split's files (or holding
  // cifar-10-batches-bin/ with them, as the archive unpacks). Errors name the file or folder:
  // missing, not a regular file, empty, a size that is not a whole number of 3073-byte records,
  // a label above 9.
  static Result<CifarDataset> open(const std::string& path, CifarSplit split = CifarSplit::kTrain);
  // These files, concatenated in this order (samples are numbered across them).
  static Result<CifarDataset> open_files(const std::vector<std::string>& paths);

  int64_t size() const { return static_cast<int64_t>(records_.size()) / kCifarRecordBytes; }
  const std::vector<std::string>& files() const { return files_; }
  // Sample i's label (0-9) and its 3072 pixel bytes (R plane, G plane, B plane). 0 <= i < size().
  int32_t label(int64_t i) const;
  std::span<const uint8_t> pixels(int64_t i) const;

  // The samples `indices` (each in [0, size())), in that order, normalised.
  CifarBatch batch(std::span<const int64_t> indices,
                   const CifarNormalize& normalize = kCifarNormalizeHalf) const;
  // The same into existing tensors: images (n, 3, 32, 32) f32 and labels (n) i32, n the number
  // of indices (a training loop reuses its buffers).
  void batch_into(Tensor& images, Tensor& labels, std::span<const int64_t> indices,
                  const CifarNormalize& normalize = kCifarNormalizeHalf) const;

 private:
  CifarDataset() = default;

  std::vector<std::string> files_;
  std::vector<uint8_t> records_;  // every record as stored, files one after another
};

// ---- which samples each data-parallel rank reads: torch.utils.data.DistributedSampler.

// How DistributedSampler evens out a dataset that W does not divide (its drop_last).
enum class ShardTail : unsigned char {
  kPad,   // drop_last=False (the default): the order is extended by its own first elements to
          // ceil(n / W) * W, so every rank gets ceil(n / W) samples and a few appear twice
  kDrop,  // drop_last=True: the order is cut to floor(n / W) * W
};

struct DistributedSamplerOptions {
  SampleOrder order = SampleOrder::kRandom;  // DistributedSampler's shuffle=True
  uint64_t seed = 0;                         // its seed (DeepSpeed leaves it at 0)
  int rank = 0;                              // data-parallel rank and world size
  int world_size = 1;
  ShardTail tail = ShardTail::kPad;
};

// torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on the CPU: the identity
// permutation, then for i = 0 .. n-2 element i swapped with element i + (u % (n - i)), u the
// next 32-bit output of std::mt19937 seeded with the low 32 bits of `seed` (torch's CPU
// generator is that same Mersenne Twister). torch switches to another algorithm at
// n >= 2^32 / 20; so does nothing here: n must be below it (asserted).
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed);

// This rank's sample indices for `epoch` (DistributedSampler.set_epoch), for a dataset of n
// samples, exactly as DistributedSampler.__iter__ yields them:
//   order = torch_randperm(n, seed + epoch) (kRandom) or 0 .. n-1 (kSequential);
//   kPad: m = ceil(n / W), the order extended cyclically to m*W elements;
//   kDrop: m = floor(n / W), the order cut to m*W elements;
//   rank r takes positions r, r + W, r + 2W, ... of it: m indices.
// A single process (W = 1) therefore reads the whole permutation, and the W ranks together read
// it interleaved, not in contiguous blocks. Errors: W < 1, rank outside [0, W), n < 0.
Result<std::vector<int64_t>> distributed_sampler_indices(int64_t n, int64_t epoch,
                                                         const DistributedSamplerOptions& options);

// What torch's DataLoader does with a last batch shorter than B (its drop_last; DeepSpeed's
// dataloader_drop_last, default false).
enum class LastBatch : unsigned char { kKeep, kDrop };
// Batches a DataLoader cuts from `samples` indices: ceil(samples / B) with kKeep (the last one
// short), floor(samples / B) with kDrop. Batch b is indices [b B, min((b+1) B, samples)).
int64_t loader_num_batches(int64_t samples, int64_t batch_size, LastBatch last);

}  // namespace zt
