// Supervised fine-tuning (DeepSpeed-Chat's step 1) as a data source for the engine: JSON Lines
// records (prompt/response, prompt/chosen, text, or pre-tokenized input_ids + labels; see
// data/jsonl_dataset.h) become (B, T) batches of tokens and next-token targets, with -100 on
// every target that is not counted (the prompt unless train_on_prompt, and padding), so the
// engine's loss is the response's (and its eos's) mean next-token loss, as transformers computes
// it with -100 labels. Batch g of the run is a pure function of g (epochs follow each other,
// each with its own seeded order), so resuming at step g needs no replay.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "zt/data/batch_sampler.h"
#include "zt/data/jsonl_dataset.h"
#include "zt/data/tokenizer/tokenizer.h"
#include "zt/nn/model.h"
#include "zt/tasks/lm_loss.h"

namespace zt::tasks {

struct SftOptions {
  int64_t seq_len = 0;     // T
  int64_t micro_batch = 1; // B, rows per rank
  bool train_on_prompt = false;
  bool pack = false;
  bool skip_bad = false;
  uint64_t seed = 0;
  bool shuffle = true;
  int rank = 0;
  int world_size = 1;
  int64_t vocab_size = 0;  // the model's: every id must be below it
  std::optional<int32_t> eos_id;  // when the tokenizer names none (the model config's)
};

class SftData {
 public:
  // Errors: the dataset's (FILE:LINE and the key), a tokenizer whose ids the model cannot hold,
  // and a file with fewer examples than one batch per rank.
  static Result<SftData> open(const std::string& path, std::shared_ptr<const Tokenizer> tokenizer,
                              const SftOptions& options);

  // This rank's rows of global batch g: tokens (B, T) and targets (B, T), i32 on the host.
  Result<Batch> batch_at(int64_t g) const;
  // As an evaluation batch (zt eval's and lm_loss's layout), batch b of epoch 0.
  Result<LmBatch> eval_batch(int64_t b) const;
  int64_t batches_per_epoch() const { return dataset_.num_batches(0); }
  const JsonlDataset& dataset() const { return dataset_; }

 private:
  explicit SftData(JsonlDataset d) : dataset_(std::move(d)) {}
  JsonlDataset dataset_;
};

// A host batch (B, T) i32 of `tokens` and `targets`, numbered `index`.
Batch host_batch(int64_t B, int64_t T, const std::vector<int32_t>& tokens,
                 const std::vector<int32_t>& targets, int64_t index);

// Next-token targets from labels aligned with the tokens (transformers' convention): target[t]
// = labels[t + 1] within a row, -100 at the row's last position.
void labels_to_targets(const std::vector<int32_t>& labels, int64_t B, int64_t T,
                       std::vector<int32_t>& targets);

// The mean loss over the counted targets of the first `max_batches` batches of `data` (all when
// <= 0), with the model in eval mode; `hooks` gathers ZeRO-3 parameters.
Result<LossSum> sft_eval(nn::Model& model, nn::Context ctx, const SftData& data,
                         int64_t max_batches, nn::UnitHooks* hooks = nullptr);

}  // namespace zt::tasks
