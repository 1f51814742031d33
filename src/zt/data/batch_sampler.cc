// BatchSampler (batch_sampler.h): window numbering, the per-batch generator, and the copy of
// T+1-token windows out of the mapped file into (tokens, targets).
#include "zt/data/batch_sampler.h"

#include <limits>

namespace zt {

namespace {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t batch_seed(uint64_t seed, int64_t g) {
  return splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(g));
}

uint64_t random_below(std::mt19937_64& rng, uint64_t n) {
  ZT_ASSERT(n > 0, "random_below(0)");
  // 2^64 mod n: the first `threshold` values would make the low residues one draw more likely.
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

Result<BatchSampler> BatchSampler::create(std::shared_ptr<const TokenFile> file,
                                          const BatchSamplerOptions& options) {
  ZT_ASSERT(file != nullptr, "BatchSampler::create without a token file");
  const std::string& path = file->path();
  if (options.batch_size < 1) {
    return invalid_argument("batch sampler for '{}': batch size must be >= 1, got {}", path,
                            options.batch_size);
  }
  if (options.seq_len < 1) {
    return invalid_argument("batch sampler for '{}': sequence length must be >= 1, got {}", path,
                            options.seq_len);
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument("batch sampler for '{}': rank {} is outside [0, world_size={})", path,
                            options.rank, options.world_size);
  }
  if (options.vocab_size < 0) {
    return invalid_argument("batch sampler for '{}': vocab_size must be >= 0, got {}", path,
                            options.vocab_size);
  }
  const int64_t n = file->num_tokens();
  if (n < options.seq_len + 1) {
    return invalid_argument(
        "token file '{}' has {} tokens, fewer than the {} (sequence length T={} plus one for the "
        "shifted targets) one batch row needs; use a shorter sequence length or more data",
        path, n, options.seq_len + 1, options.seq_len);
  }
  BatchSampler s;
  s.file_ = std::move(file);
  s.options_ = options;
  s.windows_per_epoch_ = (n - 1) / options.seq_len;
  return s;
}

int64_t BatchSampler::window_start(int64_t w) const {
  ZT_ASSERT(w >= 0, "negative window {}", w);
  const int64_t t = options_.seq_len;
  if (options_.order == SampleOrder::kSequential) return (w % windows_per_epoch_) * t;
  const int64_t global_rows = options_.batch_size * options_.world_size;
  std::mt19937_64 rng(batch_seed(options_.seed, w / global_rows));
  const auto positions = static_cast<uint64_t>(file_->num_tokens() - t);  // starts 0..N-T-1
  uint64_t start = 0;
  for (int64_t j = 0; j <= w % global_rows; ++j) start = random_below(rng, positions);
  return static_cast<int64_t>(start);
}

void BatchSampler::row_starts(int64_t g, std::vector<int64_t>& starts) const {
  const int64_t b = options_.batch_size;
  const int64_t global_rows = b * options_.world_size;
  const int64_t first = g * global_rows + options_.rank * b;  // this rank's first window
  starts.resize(static_cast<size_t>(b));
  if (options_.order == SampleOrder::kSequential) {
    for (int64_t i = 0; i < b; ++i) starts[i] = window_start(first + i);
    return;
  }
  // Every rank draws the whole global batch (W*B draws) and keeps its own B.
  std::mt19937_64 rng(batch_seed(options_.seed, g));
  const auto positions = static_cast<uint64_t>(file_->num_tokens() - options_.seq_len);
  const int64_t mine = options_.rank * b;
  for (int64_t j = 0; j < mine + b; ++j) {
    const auto start = static_cast<int64_t>(random_below(rng, positions));
    if (j >= mine) starts[j - mine] = start;
  }
}

Result<Batch> BatchSampler::batch_at(int64_t g) const {
  ZT_ASSERT(g >= 0, "negative batch index {}", g);
  const int64_t b = options_.batch_size;
  const int64_t t = options_.seq_len;
  std::vector<int64_t> starts;
  row_starts(g, starts);

  Batch batch;
  batch.index = g;
  batch.tokens = Tensor::empty({b, t}, DType::i32);
  batch.targets = Tensor::empty({b, t}, DType::i32);
  int32_t* tokens = batch.tokens.data<int32_t>();
  int32_t* targets = batch.targets.data<int32_t>();
  // Tokens are stored unsigned; the model wants i32 ids below its vocabulary.
  const uint64_t limit = options_.vocab_size > 0
                             ? static_cast<uint64_t>(options_.vocab_size)
                             : static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) + 1;
  std::vector<uint32_t> window(static_cast<size_t>(t + 1));
  for (int64_t row = 0; row < b; ++row) {
    const int64_t s = starts[row];
    file_->read_tokens(s, window);
    for (int64_t i = 0; i <= t; ++i) {
      if (window[i] >= limit) {
        return invalid_argument(
            "token file '{}': token {} at position {} is outside the vocabulary [0, {}); was "
            "the file made with another tokenizer?",
            file_->path(), window[i], s + i, limit);
      }
    }
    for (int64_t i = 0; i < t; ++i) {
      tokens[row * t + i] = static_cast<int32_t>(window[i]);
      targets[row * t + i] = static_cast<int32_t>(window[i + 1]);
    }
  }
  return batch;
}

Result<Batch> BatchSampler::next() {
  Result<Batch> batch = batch_at(position_);
  if (batch.is_ok()) ++position_;
  return batch;
}

void BatchSampler::seek(int64_t g) {
  ZT_ASSERT(g >= 0, "seek to negative batch {}", g);
  position_ = g;
}

}  // namespace zt
