// BatchSampler: (tokens, targets) batches of shape (B, T) as i32 host tensors from a TokenFile,
// with targets = tokens shifted by one. A batch row is a window of T+1 consecutive tokens:
// tokens = file[s, s+T), targets = file[s+1, s+T+1).
//
// Windows are numbered globally, so data parallelism is a pure function of (rank, world_size):
// global batch g is made of the W*B windows g*W*B .. (g+1)*W*B - 1, and rank r takes windows
// g*W*B + r*B .. g*W*B + r*B + B - 1. A single process with batch W*B therefore sees exactly the
// rows of all ranks, in rank order; the distributed run and the one-process run are the same
// computation.
//   - Sequential: window w starts at (w mod K) * T, K = floor((N - 1) / T) windows of an N-token
//     file: stride T, so each token is an input exactly once per pass (a window's last target
//     is the next window's first input), as llm.c reads; after the last whole window the walk
//     wraps to the start (a tail shorter than a window is never read).
//   - Random: window w of global batch g starts at a uniform draw from [0, N - T - 1] (every
//     position a whole window fits). The draws of batch g come from std::mt19937_64 seeded
//     with batch_seed(seed, g), W*B draws in window order, each mapped to the range without
//     modulo bias (random_below). Every rank makes the same W*B draws and keeps its B, and
//     batch g depends only on (seed, g): resuming at step g needs no replay.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "zt/core/tensor.h"
#include "zt/data/token_file.h"

namespace zt {

enum class SampleOrder : unsigned char { kSequential, kRandom };

struct BatchSamplerOptions {
  int64_t batch_size = 1;  // B: rows per rank per batch (the micro batch)
  int64_t seq_len = 0;     // T: tokens per row
  SampleOrder order = SampleOrder::kSequential;
  uint64_t seed = 0;  // random order only
  int rank = 0;
  int world_size = 1;
  // When > 0, a token >= vocab_size in a batch is an error naming the file and position (a
  // token file made for another tokenizer). 0 checks only that tokens fit in i32.
  int64_t vocab_size = 0;
};

struct Batch {
  Tensor tokens;      // (B, T) i32, CPU
  Tensor targets;     // (B, T) i32, CPU
  // (B, T) i32, CPU: 1 a real token, 0 padding; undefined when every position is real (token
  // files). Encoders (BERT) must not attend to padding.
  Tensor attention_mask;
  int64_t index = 0;  // the global batch number g
};

class BatchSampler {
 public:
  // Errors: B or T < 1, rank outside [0, world_size), a file with fewer than T+1 tokens.
  static Result<BatchSampler> create(std::shared_ptr<const TokenFile> file,
                                     const BatchSamplerOptions& options);

  // The next global batch (this rank's slice), then advances.
  Result<Batch> next();
  // Global batch `g` without moving the position.
  Result<Batch> batch_at(int64_t g) const;
  // Makes next() return global batch `g` (resuming from a checkpoint at step g).
  void seek(int64_t g);
  int64_t position() const { return position_; }

  // Start offset (in tokens) of global window `w`; batch rows are windows.
  int64_t window_start(int64_t w) const;
  // Sequential order: windows before the walk wraps to the file start.
  int64_t windows_per_epoch() const { return windows_per_epoch_; }
  const BatchSamplerOptions& options() const { return options_; }
  const TokenFile& file() const { return *file_; }

 private:
  BatchSampler() = default;
  // Start offsets of this rank's B rows of global batch g, in row order.
  void row_starts(int64_t g, std::vector<int64_t>& starts) const;

  std::shared_ptr<const TokenFile> file_;
  BatchSamplerOptions options_;
  int64_t windows_per_epoch_ = 0;
  int64_t position_ = 0;
};

// The seed of global batch g's generator: splitmix64 of (seed, g), so nearby batches (and
// nearby user seeds) get unrelated streams.
uint64_t batch_seed(uint64_t seed, int64_t g);
// A uniform integer in [0, n) from `rng`, without modulo bias (rejects the top partial range).
// n must be > 0. Spelled out rather than std::uniform_int_distribution, whose algorithm differs
// between standard libraries: the same seed must give the same data everywhere.
uint64_t random_below(std::mt19937_64& rng, uint64_t n);

}  // namespace zt
