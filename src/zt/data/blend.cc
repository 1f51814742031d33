// BlendSampler (blend.h): the greedy assignment of windows to datasets, replayed per block from
// saved counts, and the copy of each window out of its file.
#include "zt/data/blend.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>

#include "zt/core/assert.h"

namespace zt {

namespace {

// The dataset window w goes to, given the windows each dataset got before w: the largest
// weights[i] * (w + 1) - counts[i], the lowest index on a tie.
size_t greedy_pick(const std::vector<double>& weights, const std::vector<int64_t>& counts,
                   int64_t w) {
  size_t best = 0;
  double best_deficit = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double deficit = weights[i] * static_cast<double>(w + 1) - static_cast<double>(counts[i]);
    if (i == 0 || deficit > best_deficit) {
      best = i;
      best_deficit = deficit;
    }
  }
  return best;
}

}  // namespace

Result<std::vector<BlendSpec>> blend_spec_parse(const std::vector<std::string>& values,
                                                const std::string& flag) {
  const auto check_file = [&](const std::string& path) -> Status {
    std::error_code ec;
    // Only existence: TokenFile::open says what is wrong with a file that is there (a FIFO, a
    // folder, a bad header).
    if (!std::filesystem::exists(path, ec)) return not_found("{}: '{}' does not exist", flag, path);
    return Status::ok();
  };
  if (values.empty()) return invalid_argument("{} needs a token file", flag);
  if (values.size() == 1) {
    ZT_RETURN_IF_ERROR(check_file(values[0]));
    return std::vector<BlendSpec>{{.weight = 1, .path = values[0]}};
  }
  if (values.size() % 2 != 0) {
    return invalid_argument(
        "{}: {} values; give one file, or WEIGHT FILE pairs such as {} 0.7 a.bin 0.3 b.bin", flag,
        values.size(), flag);
  }
  std::vector<BlendSpec> specs;
  for (size_t i = 0; i < values.size(); i += 2) {
    const std::string& w = values[i];
    char* end = nullptr;
    errno = 0;
    const double weight = std::strtod(w.c_str(), &end);
    if (w.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(weight)) {
      return invalid_argument(
          "{}: '{}' is not a weight; give one file, or WEIGHT FILE pairs such as {} 0.7 a.bin "
          "0.3 b.bin",
          flag, w, flag);
    }
    if (!(weight > 0)) {
      return invalid_argument("{}: the weight of '{}' is {}; weights must be positive", flag,
                              values[i + 1], w);
    }
    ZT_RETURN_IF_ERROR(check_file(values[i + 1]));
    specs.push_back({.weight = weight, .path = values[i + 1]});
  }
  return specs;
}

Result<BlendSampler> BlendSampler::create(std::vector<BlendSource> sources,
                                          const BatchSamplerOptions& options) {
  if (sources.empty()) return invalid_argument("blend sampler: no token files");
  if (sources.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return invalid_argument("blend sampler: {} token files are too many", sources.size());
  }
  double total = 0;
  for (const BlendSource& s : sources) {
    ZT_ASSERT(s.file != nullptr, "BlendSampler::create without a token file");
    if (!(s.weight > 0) || !std::isfinite(s.weight)) {
      return invalid_argument("blend sampler: the weight of '{}' is {}; weights must be positive",
                              s.file->path(), s.weight);
    }
    total += s.weight;
  }
  BlendSampler b;
  for (const BlendSource& s : sources) {
    // BatchSampler's checks (B, T, rank, vocabulary, file length) name the file.
    ZT_ASSIGN_OR_RETURN(BatchSampler one, BatchSampler::create(s.file, options));
    b.windows_per_epoch_.push_back(one.windows_per_epoch());
    b.weights_.push_back(s.weight / total);
  }
  b.sources_ = std::move(sources);
  b.options_ = options;
  b.block_counts_.push_back(std::vector<int64_t>(b.sources_.size(), 0));
  return b;
}

void BlendSampler::block_load(int64_t b) const {
  if (b == cached_block_) return;
  std::vector<int64_t> counts;
  // Replay blocks not yet counted, saving the counts at each block start.
  while (static_cast<int64_t>(block_counts_.size()) <= b) {
    counts = block_counts_.back();
    const int64_t first = (static_cast<int64_t>(block_counts_.size()) - 1) * kBlock;
    for (int64_t w = first; w < first + kBlock; ++w) {
      ++counts[greedy_pick(weights_, counts, w)];
    }
    block_counts_.push_back(counts);
  }
  counts = block_counts_[static_cast<size_t>(b)];
  cache_.resize(static_cast<size_t>(kBlock));
  const int64_t first = b * kBlock;
  for (int64_t j = 0; j < kBlock; ++j) {
    const int64_t w = first + j;
    const size_t best = greedy_pick(weights_, counts, w);
    cache_[static_cast<size_t>(j)] = {.dataset = static_cast<int32_t>(best), .index = counts[best]};
    ++counts[best];
  }
  cached_block_ = b;
}

BlendWindow BlendSampler::window_source(int64_t w) const {
  ZT_ASSERT(w >= 0, "negative window {}", w);
  std::lock_guard<std::mutex> lock(*mu_);
  block_load(w / kBlock);
  return cache_[static_cast<size_t>(w % kBlock)];
}

int64_t BlendSampler::dataset_window_start(int32_t dataset, int64_t index) const {
  ZT_ASSERT(dataset >= 0 && dataset < num_datasets(), "dataset {} outside the blend", dataset);
  ZT_ASSERT(index >= 0, "negative window {}", index);
  const int64_t t = options_.seq_len;
  if (options_.order == SampleOrder::kSequential) {
    return (index % windows_per_epoch_[static_cast<size_t>(dataset)]) * t;
  }
  std::mt19937_64 rng(batch_seed(batch_seed(options_.seed, dataset), index));
  const auto positions =
      static_cast<uint64_t>(sources_[static_cast<size_t>(dataset)].file->num_tokens() - t);
  return static_cast<int64_t>(random_below(rng, positions));
}

Result<Batch> BlendSampler::batch_at(int64_t g) const {
  ZT_ASSERT(g >= 0, "negative batch index {}", g);
  const int64_t b = options_.batch_size;
  const int64_t t = options_.seq_len;
  const int64_t first = g * b * options_.world_size + options_.rank * b;  // this rank's first
  Batch batch;
  batch.index = g;
  batch.tokens = Tensor::empty({b, t}, DType::i32);
  batch.targets = Tensor::empty({b, t}, DType::i32);
  int32_t* tokens = batch.tokens.data<int32_t>();
  int32_t* targets = batch.targets.data<int32_t>();
  const uint64_t limit = options_.vocab_size > 0
                             ? static_cast<uint64_t>(options_.vocab_size)
                             : static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) + 1;
  std::vector<uint32_t> window(static_cast<size_t>(t + 1));
  for (int64_t row = 0; row < b; ++row) {
    const BlendWindow src = window_source(first + row);
    const TokenFile& file = *sources_[static_cast<size_t>(src.dataset)].file;
    const int64_t s = dataset_window_start(src.dataset, src.index);
    file.read_tokens(s, window);
    for (int64_t i = 0; i <= t; ++i) {
      if (window[i] >= limit) {
        return invalid_argument(
            "token file '{}': token {} at position {} is outside the vocabulary [0, {}); was "
            "the file made with another tokenizer?",
            file.path(), window[i], s + i, limit);
      }
    }
    for (int64_t i = 0; i < t; ++i) {
      tokens[row * t + i] = static_cast<int32_t>(window[i]);
      targets[row * t + i] = static_cast<int32_t>(window[i + 1]);
    }
  }
  return batch;
}

Result<Batch> BlendSampler::next() {
  Result<Batch> batch = batch_at(position_);
  if (batch.is_ok()) ++position_;
  return batch;
}

void BlendSampler::seek(int64_t g) {
  ZT_ASSERT(g >= 0, "seek to negative batch {}", g);
  position_ = g;
}

}  // namespace zt
