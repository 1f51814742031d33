// Language-model loss as transformers defines it, for evaluation (`zt eval`): causal LM predicts
// labels[t + 1] at position t (labels default to the inputs); masked LM predicts labels[t] at t;
// -100 is not counted; the loss is the mean over every counted position of the whole data set
// (not a mean of batch means), and the perplexity its exponential.
#pragma once

#include <cstdint>
#include <vector>

#include "zt/data/jsonl_examples.h"
#include "zt/nn/models/transformer.h"

namespace zt::tasks {

// One padded batch (B, T), host values: rows shorter than T are padded with id 0, label -100 and
// attention mask 0.
struct LmBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> input_ids, targets, attention_mask, token_type_ids;
  bool padded = false;  // some mask value is 0: attention must see the mask
};

// Groups `examples` into batches of up to `micro_batch` rows in order; targets per `task`.
std::vector<LmBatch> lm_batches(const std::vector<TokenExample>& examples, int64_t micro_batch,
                                nn::Task task);

struct LossSum {
  double sum = 0;
  int64_t count = 0;  // counted positions
  double mean() const { return count > 0 ? sum / static_cast<double>(count) : 0.0; }
};

// Forward of one batch on ctx's device in eval mode, with the padding mask when a row is padded
// and the token types: per-position losses (B*T, accum dtype; 0 where not counted) or the logits
// (B, T, padded vocabulary).
enum class LmOutput : unsigned char { kLosses, kLogits };
// `hooks`: the engine's (ZeRO-3 gathers parameters through them), or null.
Tensor lm_forward(nn::Model& model, nn::Context ctx, const LmBatch& batch, LmOutput output,
                  nn::UnitHooks* hooks = nullptr);

// lm_forward's losses of one batch, added to `into` where counted.
void lm_loss_accumulate(nn::Model& model, nn::Context ctx, const LmBatch& batch, LossSum& into,
                        nn::UnitHooks* hooks = nullptr);

}  // namespace zt::tasks
