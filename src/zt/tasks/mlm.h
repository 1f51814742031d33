// Masked-language-model pre-training (BERT, HelloDeepSpeed): windows of a token file become
// masked inputs and labels as transformers' DataCollatorForLanguageModeling makes them: each
// position is selected with probability `probability` (never a special token); a selected
// position's label is its token, and its input becomes the mask token (share `mask_share`), a
// uniformly random token (share `random_share`) or stays (the rest); every other label is -100.
// The draws of a window come from its own generator, seeded by (seed, global window number), so
// the masking is the same whatever the number of ranks and however a run is resumed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/data/batch_sampler.h"
#include "zt/data/jsonl_dataset.h"
#include "zt/data/token_file.h"
#include "zt/nn/model.h"
#include "zt/tasks/lm_loss.h"

namespace zt::tasks {

struct MlmOptions {
  double probability = 0.15;
  double mask_share = 0.8;
  double random_share = 0.1;
  int32_t mask_id = -1;
  int64_t vocab_size = 0;
  std::vector<int32_t> never_mask;  // special token ids ([CLS], [SEP], [PAD], ...)
  uint64_t seed = 0;
};

// Errors: shares out of [0, 1] or summing above 1, a mask id outside the vocabulary.
Status mlm_options_check(const MlmOptions& o);

// Masks one window in place: `tokens` become the model's inputs, `labels` (same length) are
// written.
void mlm_mask_window(std::span<int32_t> tokens, std::span<int32_t> labels, uint64_t window,
                     const MlmOptions& o);

// A BatchSampler batch (rank `rank` of `world`, B rows, global batch batch.index) as an MLM
// batch: tokens masked, targets = labels (not shifted: a masked LM predicts position t at t).
void mlm_batch(Batch& batch, int rank, int world, const MlmOptions& o);

struct MlmMetrics {
  double loss = 0;      // mean over the selected positions
  double accuracy = 0;  // share of selected positions whose most likely token is the label
  int64_t positions = 0;
};

// MLM on JSON Lines, as transformers' run_mlm.py --line_by_line makes its batches: each record
// (`text`, tokenized with the tokenizer's special tokens and no eos, or pre-tokenized
// `input_ids`) is one row, truncated to the sequence length and padded (attention mask 0, never
// masked, label -100). A row's real tokens are masked as mlm_mask_window masks a window: in
// training by the row's number in the run ((g * world + rank) * B + row, so each epoch masks
// afresh), in evaluation by the example's index in the file (the same positions every time).
struct MlmTextOptions {
  int64_t seq_len = 0;
  int64_t micro_batch = 1;
  bool skip_bad = false;
  bool shuffle = true;
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
};

class MlmTextData {
 public:
  // Errors: the dataset's (FILE:LINE and the key), prompt/response records (not MLM data), a
  // file with fewer examples than one batch per rank.
  static Result<MlmTextData> open(const std::string& path,
                                  std::shared_ptr<const Tokenizer> tokenizer,
                                  const MlmTextOptions& options, const MlmOptions& mlm);
  // This rank's rows of global batch g: masked tokens, targets (labels, not shifted) and the
  // attention mask, (B, T) i32 on the host.
  Result<Batch> batch_at(int64_t g) const;
  // Evaluation batch b of epoch 0, masked by example index.
  Result<LmBatch> eval_batch(int64_t b) const;
  int64_t batches_per_epoch() const { return dataset_.num_batches(0); }
  const JsonlDataset& dataset() const { return dataset_; }

 private:
  MlmTextData(JsonlDataset d, MlmOptions o) : dataset_(std::move(d)), mlm_(std::move(o)) {}
  JsonlDataset dataset_;
  MlmOptions mlm_;
};

// Whether `path` names JSON Lines (.jsonl or .json, optionally .gz or .zst) rather than a token
// file.
bool is_jsonl_path(const std::string& path);

// Held-out evaluation over `batches` evaluation batches from `next` (masked, targets not
// shifted), in eval mode; `vocab` bounds the argmax (the padded columns are not tokens).
Result<MlmMetrics> mlm_eval_batches(nn::Model& model, nn::Context ctx, int64_t batches,
                                    const std::function<Result<LmBatch>(int64_t)>& next,
                                    int64_t vocab, nn::UnitHooks* hooks = nullptr);

// Held-out evaluation: the first `windows` sequential windows of `seq` tokens of `file`, masked
// as training masks them (the window numbers count from 0 in this file, so every evaluation
// masks the same positions), in eval mode, `micro` rows per forward; `hooks` gathers ZeRO-3
// parameters. `vocab` bounds the argmax (the padded columns are not tokens).
Result<MlmMetrics> mlm_eval(nn::Model& model, nn::Context ctx, const TokenFile& file, int64_t seq,
                            int64_t micro, int64_t windows, int64_t vocab, const MlmOptions& o,
                            nn::UnitHooks* hooks = nullptr);

}  // namespace zt::tasks
