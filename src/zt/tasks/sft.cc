#include "zt/tasks/sft.h"

#include "zt/core/tensor.h"

namespace zt::tasks {

void labels_to_targets(const std::vector<int32_t>& labels, int64_t B, int64_t T,
                       std::vector<int32_t>& targets) {
  targets.assign(static_cast<size_t>(B * T), -100);
  for (int64_t r = 0; r < B; ++r) {
    for (int64_t t = 0; t + 1 < T; ++t) {
      targets[static_cast<size_t>(r * T + t)] = labels[static_cast<size_t>(r * T + t + 1)];
    }
  }
}

Result<SftData> SftData::open(const std::string& path, std::shared_ptr<const Tokenizer> tokenizer,
                              const SftOptions& o) {
  if (tokenizer && o.vocab_size > 0 && tokenizer->vocab_size() > o.vocab_size) {
    return invalid_argument("the tokenizer ({}) makes ids up to {}, but the model's vocabulary has "
                            "{}; they do not belong together",
                            tokenizer->describe(), tokenizer->vocab_size() - 1, o.vocab_size);
  }
  JsonlDatasetOptions d;
  d.seq_len = o.seq_len;
  d.prompt_labels = o.train_on_prompt ? PromptLabels::kTrained : PromptLabels::kMasked;
  d.bad_records = o.skip_bad ? BadRecords::kSkip : BadRecords::kFail;
  d.layout = o.pack ? RowLayout::kPack : RowLayout::kPad;
  d.eos_id = o.eos_id;
  d.vocab_size = o.vocab_size;
  d.batch_size = o.micro_batch;
  d.order = o.shuffle ? SampleOrder::kRandom : SampleOrder::kSequential;
  d.seed = o.seed;
  d.rank = o.rank;
  d.world_size = o.world_size;
  ZT_ASSIGN_OR_RETURN(JsonlDataset ds, JsonlDataset::open(path, std::move(tokenizer), d));
  if (ds.format() == JsonlFormat::kPairs) {
    return invalid_argument("{}: prompt/chosen/rejected records are preference pairs; "
                            "supervised fine-tuning takes prompt/response (or prompt/chosen)",
                            path);
  }
  if (ds.num_batches(0) < 1) {
    return invalid_argument("{}: {} examples do not make one batch of {} rows on each of {} "
                            "rank(s)",
                            path, ds.size(), o.micro_batch, o.world_size);
  }
  return SftData(std::move(ds));
}

Batch host_batch(int64_t B, int64_t T, const std::vector<int32_t>& tokens,
                 const std::vector<int32_t>& targets, int64_t index) {
  Batch out;
  out.index = index;
  out.tokens = Tensor::empty({B, T}, DType::i32, Device::cpu());
  out.targets = Tensor::empty({B, T}, DType::i32, Device::cpu());
  std::copy(tokens.begin(), tokens.end(), out.tokens.data<int32_t>());
  std::copy(targets.begin(), targets.end(), out.targets.data<int32_t>());
  return out;
}

Result<Batch> SftData::batch_at(int64_t g) const {
  ZT_ASSIGN_OR_RETURN(JsonlBatch jb, dataset_.batch_at(g));
  std::vector<int32_t> targets;
  labels_to_targets(jb.labels, jb.B, jb.T, targets);
  return host_batch(jb.B, jb.T, jb.input_ids, targets, g);
}

Result<LmBatch> SftData::eval_batch(int64_t b) const {
  ZT_ASSIGN_OR_RETURN(JsonlBatch jb, dataset_.batch(0, b));
  LmBatch out;
  out.B = jb.B;
  out.T = jb.T;
  out.input_ids = std::move(jb.input_ids);
  labels_to_targets(jb.labels, jb.B, jb.T, out.targets);
  // Right padding under causal attention: no counted position sees a pad, so no mask is needed
  // (and the training forward uses none).
  out.attention_mask.assign(out.input_ids.size(), 1);
  out.token_type_ids.assign(out.input_ids.size(), 0);
  out.padded = false;
  return out;
}

Result<LossSum> sft_eval(nn::Model& model, nn::Context ctx, const SftData& data,
                         int64_t max_batches, nn::UnitHooks* hooks) {
  LossSum sum;
  int64_t n = data.batches_per_epoch();
  if (max_batches > 0) n = std::min(n, max_batches);
  for (int64_t b = 0; b < n; ++b) {
    ZT_ASSIGN_OR_RETURN(LmBatch batch, data.eval_batch(b));
    lm_loss_accumulate(model, ctx, batch, sum, hooks);
  }
  return sum;
}

}  // namespace zt::tasks
