// Reward-model training (DeepSpeed-Chat's step 2) as a data source for the engine, and its
// evaluation. JSON Lines records of prompt/chosen/rejected (data/jsonl_dataset.h's pairs) give
// two sequences each by the SFT rule (prompt ++ response ++ eos); a batch of B pairs is 2B rows,
// the B chosen rows then the B rejected rows, padded on the right. The targets mark where each
// row is scored: -100 everywhere but the row's last real token (its eos unless truncated), whose
// target is that token's id. The model's reward head (nn/models/transformer.h, Task::kReward)
// reads the score there and returns per-position pair losses whose mean over the 2B marked
// positions (the engine's loss) is the mean over pairs of -log sigmoid(r_chosen - r_rejected).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zt/data/batch_sampler.h"
#include "zt/data/jsonl_dataset.h"
#include "zt/data/tokenizer/tokenizer.h"
#include "zt/nn/models/transformer.h"

namespace zt::tasks {

struct RewardOptions {
  int64_t seq_len = 0;      // T
  int64_t micro_batch = 1;  // B: pairs per rank (2B rows)
  bool skip_bad = false;
  uint64_t seed = 0;
  bool shuffle = true;
  int rank = 0;
  int world_size = 1;
  int64_t vocab_size = 0;         // the model's: every id must be below it
  std::optional<int32_t> eos_id;  // when the tokenizer names none (the model config's)
};

class RewardData {
 public:
  // Errors: the dataset's (FILE:LINE and the key), records that are not prompt/chosen/rejected
  // pairs, a tokenizer whose ids the model cannot hold, and fewer pairs than one batch per rank.
  static Result<RewardData> open(const std::string& path,
                                 std::shared_ptr<const Tokenizer> tokenizer,
                                 const RewardOptions& options);

  // This rank's rows of global batch g: tokens (2B, T) and targets (2B, T), i32 on the host.
  Result<Batch> batch_at(int64_t g) const;
  // Batch b of epoch 0 (evaluation's order), with the scored position of each row.
  Result<JsonlBatch> eval_batch(int64_t b) const;
  int64_t batches_per_epoch() const { return dataset_.num_batches(0); }
  const JsonlDataset& dataset() const { return dataset_; }

 private:
  explicit RewardData(JsonlDataset d) : dataset_(std::move(d)) {}
  JsonlDataset dataset_;
};

// Per row of `batch`, the flat position (row * T + t) of its last real token.
std::vector<int64_t> reward_positions(const JsonlBatch& batch);
// The targets that mark them: -100 everywhere but those positions, which hold their token.
std::vector<int32_t> reward_targets(const JsonlBatch& batch);

// A reward model with `causal`'s body: the same config with Task::kReward (the `score` head,
// N(0, init_std)); every body parameter reads what the causal model's read (its weight files,
// or the family's init); the LM head is left out. A model read from a directory keeps its
// config.json keys, with architectures <Family>ForSequenceClassification and num_labels 1.
std::unique_ptr<nn::Transformer> reward_model_from(const nn::Transformer& causal);

// Scores of rows (B, T) host i32 at the given flat positions: an eval-mode forward without
// targets (the head's scores at every position), read where asked.
std::vector<double> reward_scores(nn::Model& model, nn::Context ctx, const Tensor& tokens,
                                  const std::vector<int64_t>& positions,
                                  nn::UnitHooks* hooks = nullptr);

struct RewardMetrics {
  double loss = 0;            // mean over pairs of -log sigmoid(r_chosen - r_rejected)
  double accuracy = 0;        // share of pairs with r_chosen > r_rejected
  double chosen_score = 0;    // mean r_chosen
  double rejected_score = 0;  // mean r_rejected
  int64_t pairs = 0;
};

// -log sigmoid(d), without overflow.
double reward_pair_loss(double chosen, double rejected);

// The metrics over the first `max_batches` batches of `data` (all when <= 0), the model in eval
// mode; `hooks` gathers ZeRO-3 parameters.
Result<RewardMetrics> reward_eval(nn::Model& model, nn::Context ctx, const RewardData& data,
                                  int64_t max_batches, nn::UnitHooks* hooks = nullptr);

}  // namespace zt::tasks
