// BlendSampler: batches drawn from several token files in fixed proportions, Megatron-LM's
// "--data-path 0.7 a 0.3 b" (`zt train --data 0.7 a.bin 0.3 b.bin`). Same API and the same
// window numbering as BatchSampler (batch_sampler.h): global batch g is the W*B windows
// g*W*B .. (g+1)*W*B - 1 and rank r takes its B of them, so one process with batch W*B sees
// exactly the rows of all W ranks, in rank order.
//
// Which file a window comes from: weights are normalized to sum 1, and window w goes to the
// dataset i maximizing weights[i] * (w + 1) - count_i(w), count_i(w) being the windows before w
// given to i; ties go to the lowest index (Megatron's build_blending_indices, greedy
// largest-deficit). After n windows every dataset has weights[i] * n windows, give or take about
// one (the error is bounded by a small constant, never growing with n). The
// assignment is a pure function of w: it is replayed from counts saved every kBlock windows, so
// batch_at(g) and seek(g) need no history, and reading forward costs O(datasets) per window.
// (The comparison is in doubles: the same binary gives the same assignment on every rank.)
//
// Which window of that file: the k-th window given to dataset i is that dataset's k-th window:
//   - sequential: starts at (k mod K_i) * T, K_i = floor((N_i - 1) / T), as BatchSampler walks
//     one file;
//   - random: a uniform start in [0, N_i - T - 1] drawn (random_below) from std::mt19937_64
//     seeded with batch_seed(batch_seed(seed, i), k): a pure function of (seed, i, k).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/data/batch_sampler.h"
#include "zt/data/token_file.h"

namespace zt {

// One file of a blend as the user wrote it.
struct BlendSpec {
  double weight = 1;  // positive; normalized over the blend
  std::string path;
};

// Parses `--data`'s values: one path (weight 1), or WEIGHT PATH pairs ("0.7 a.bin 0.3 b.bin").
// Errors name `flag` and the offending value: an odd count, a weight that is not a positive
// finite number, a missing file (what is wrong with a file that exists, TokenFile::open says).
Result<std::vector<BlendSpec>> blend_spec_parse(const std::vector<std::string>& values,
                                                const std::string& flag = "--data");

struct BlendSource {
  std::shared_ptr<const TokenFile> file;
  double weight = 1;
};

// Where a window comes from: dataset `dataset`'s `index`-th window.
struct BlendWindow {
  int32_t dataset = 0;
  int64_t index = 0;
};

class BlendSampler {
 public:
  static constexpr int64_t kBlock = 4096;  // windows between saved counts

  // Errors: no source, a weight that is not positive and finite, those of BatchSampler::create
  // (B or T < 1, bad rank, a file with fewer than T+1 tokens: the file is named).
  static Result<BlendSampler> create(std::vector<BlendSource> sources,
                                     const BatchSamplerOptions& options);

  BlendSampler(BlendSampler&& other) noexcept = default;
  BlendSampler& operator=(BlendSampler&& other) noexcept = default;
  BlendSampler(const BlendSampler&) = delete;
  BlendSampler& operator=(const BlendSampler&) = delete;
  ~BlendSampler() = default;

  Result<Batch> next();
  Result<Batch> batch_at(int64_t g) const;
  void seek(int64_t g);
  int64_t position() const { return position_; }

  // Global window w: its dataset and that dataset's window number.
  BlendWindow window_source(int64_t w) const;
  // Start offset (tokens) of window `index` of dataset `dataset` (rules above).
  int64_t dataset_window_start(int32_t dataset, int64_t index) const;
  const std::vector<double>& weights() const { return weights_; }  // normalized
  int num_datasets() const { return static_cast<int>(sources_.size()); }
  const TokenFile& file(int i) const { return *sources_[static_cast<size_t>(i)].file; }
  const BatchSamplerOptions& options() const { return options_; }

 private:
  BlendSampler() = default;
  // Fills cache_ with block b's assignment (extending block_counts_ as needed). Caller holds mu_.
  void block_load(int64_t b) const;

  std::vector<BlendSource> sources_;
  std::vector<double> weights_;
  std::vector<int64_t> windows_per_epoch_;
  BatchSamplerOptions options_;
  int64_t position_ = 0;

  // The assignment, a pure function of w; the cache makes sequential reads O(1) per window.
  mutable std::unique_ptr<std::mutex> mu_ = std::make_unique<std::mutex>();
  mutable std::vector<std::vector<int64_t>> block_counts_;  // counts before block b's first window
  mutable int64_t cached_block_ = -1;
  mutable std::vector<BlendWindow> cache_;  // block cached_block_'s windows
};

}  // namespace zt
