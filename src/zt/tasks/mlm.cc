#include "zt/tasks/mlm.h"

#include <algorithm>
#include <random>

namespace zt::tasks {
namespace {
// A uniform double in [0, 1) from 53 bits, spelled out (std::generate_canonical differs between
// standard libraries; the masking must be the same everywhere).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
}  // namespace

Status mlm_options_check(const MlmOptions& o) {
  for (double v : {o.probability, o.mask_share, o.random_share}) {
    if (!(v >= 0.0 && v <= 1.0)) {
      return invalid_argument("--mlm-probability, --mask-share and --random-share must lie in "
                              "[0, 1]; got {}",
                              v);
    }
  }
  if (o.mask_share + o.random_share > 1.0 + 1e-12) {
    return invalid_argument("--mask-share {} + --random-share {} is more than 1", o.mask_share,
                            o.random_share);
  }
  if (o.mask_id < 0 || o.mask_id >= o.vocab_size) {
    return invalid_argument("the mask token id {} is outside the model's vocabulary of {}; name it "
                            "with --mask-id or a tokenizer that has [MASK] or <mask>",
                            o.mask_id, o.vocab_size);
  }
  return Status::ok();
}

void mlm_mask_window(std::span<int32_t> tokens, std::span<int32_t> labels, uint64_t window,
                     const MlmOptions& o) {
  std::mt19937_64 rng(batch_seed(o.seed ^ 0x6d6c6d5f6d61736bull, static_cast<int64_t>(window)));
  for (size_t t = 0; t < tokens.size(); ++t) {
    // The same draws per position whatever is chosen: a window's masking depends on (seed,
    // window) alone.
    const double select = uniform01(rng), kind = uniform01(rng);
    const uint64_t random_token = random_below(rng, static_cast<uint64_t>(o.vocab_size));
    const bool special = std::find(o.never_mask.begin(), o.never_mask.end(), tokens[t]) !=
                         o.never_mask.end();
    if (special || select >= o.probability) {
      labels[t] = -100;
      continue;
    }
    labels[t] = tokens[t];
    if (kind < o.mask_share) {
      tokens[t] = o.mask_id;
    } else if (kind < o.mask_share + o.random_share) {
      tokens[t] = static_cast<int32_t>(random_token);
    }
  }
}

void mlm_batch(Batch& batch, int rank, int world, const MlmOptions& o) {
  const int64_t B = batch.tokens.size(0), T = batch.tokens.size(1);
  int32_t* x = batch.tokens.data<int32_t>();
  int32_t* y = batch.targets.data<int32_t>();
  for (int64_t i = 0; i < B; ++i) {
    const uint64_t window = static_cast<uint64_t>((batch.index * world + rank) * B + i);
    mlm_mask_window({x + i * T, static_cast<size_t>(T)}, {y + i * T, static_cast<size_t>(T)},
                    window, o);
  }
}

}  // namespace zt::tasks
