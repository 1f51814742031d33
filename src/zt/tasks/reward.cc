#include "zt/tasks/reward.h"

#include <cmath>
#include <map>

#include "zt/core/tensor.h"
#include "zt/tasks/sft.h"
#include "zt/nn/models/family_names.h"

namespace zt::tasks {

Result<RewardData> RewardData::open(const std::string& path,
                                    std::shared_ptr<const Tokenizer> tokenizer,
                                    const RewardOptions& o) {
  if (tokenizer && o.vocab_size > 0 && tokenizer->vocab_size() > o.vocab_size) {
    return invalid_argument(
        "the tokenizer ({}) makes ids up to {}, but the model's vocabulary has "
        "{}; they do not belong together",
        tokenizer->describe(), tokenizer->vocab_size() - 1, o.vocab_size);
  }
  JsonlDatasetOptions d;
  d.format = JsonlFormat::kAuto;
  d.seq_len = o.seq_len;
  d.bad_records = o.skip_bad ? BadRecords::kSkip : BadRecords::kFail;
  d.layout = RowLayout::kPad;
  d.eos_id = o.eos_id;
  d.vocab_size = o.vocab_size;
  d.batch_size = o.micro_batch;
  d.order = o.shuffle ? SampleOrder::kRandom : SampleOrder::kSequential;
  d.seed = o.seed;
  d.rank = o.rank;
  d.world_size = o.world_size;
  ZT_ASSIGN_OR_RETURN(JsonlDataset ds, JsonlDataset::open(path, std::move(tokenizer), d));
  if (ds.format() != JsonlFormat::kPairs) {
    return invalid_argument(
        "{}: a reward model trains on preference pairs: records of 'prompt', "
        "'chosen' and 'rejected', not {} records",
        path, jsonl_format_name(ds.format()));
  }
  if (ds.num_batches(0) < 1) {
    return invalid_argument("{}: {} pairs do not make one batch of {} pairs on each of {} rank(s)",
                            path, ds.size(), o.micro_batch, o.world_size);
  }
  return RewardData(std::move(ds));
}

std::vector<int64_t> reward_positions(const JsonlBatch& batch) {
  std::vector<int64_t> at(static_cast<size_t>(batch.B));
  for (int64_t r = 0; r < batch.B; ++r) {
    const int32_t len = batch.boundaries[static_cast<size_t>(r)].back();
    ZT_ASSERT(len >= 1 && len <= batch.T, "row {} of a reward batch holds {} tokens", r, len);
    at[static_cast<size_t>(r)] = r * batch.T + len - 1;
  }
  return at;
}

std::vector<int32_t> reward_targets(const JsonlBatch& batch) {
  std::vector<int32_t> targets(static_cast<size_t>(batch.B * batch.T), -100);
  for (int64_t p : reward_positions(batch)) {
    targets[static_cast<size_t>(p)] = batch.input_ids[static_cast<size_t>(p)];
  }
  return targets;
}

Result<Batch> RewardData::batch_at(int64_t g) const {
  ZT_ASSIGN_OR_RETURN(JsonlBatch jb, dataset_.batch_at(g));
  return host_batch(jb.B, jb.T, jb.input_ids, reward_targets(jb), g);
}

Result<JsonlBatch> RewardData::eval_batch(int64_t b) const {
  return dataset_.batch(0, b);
}

std::unique_ptr<nn::Transformer> reward_model_from(const nn::Transformer& causal) {
  nn::TransformerConfig c = causal.transformer_config();
  ZT_ASSERT(c.task == nn::Task::kCausalLM, "a reward model from a {} model that is not causal",
            c.model_type);
  c.task = nn::Task::kReward;
  c.num_labels = 1;
  auto out = std::make_unique<nn::Transformer>(c);
  std::map<std::string, std::shared_ptr<const nn::ParamSource>> sources;
  for (const auto& unit : causal.units()) {
    for (nn::Param* p : unit->params()) sources[p->name] = p->source;
  }
  for (const auto& unit : out->units()) {
    for (nn::Param* p : unit->params()) {
      if (auto it = sources.find(p->name); it != sources.end()) p->source = it->second;
    }
  }
  nlohmann::json source = causal.source_config();
  if (source.is_object()) {
    const std::string type = source.value("model_type", c.model_type);
    source["architectures"] = {
        fmt::format("{}ForSequenceClassification", nn::hf_class_prefix(type))};
    source["num_labels"] = 1;
    source["id2label"] = {{"0", "LABEL_0"}};
    source["label2id"] = {{"LABEL_0", 0}};
    out->set_source_config(std::move(source));
  }
  return out;
}

std::vector<double> reward_scores(nn::Model& model, nn::Context ctx, const Tensor& tokens,
                                  const std::vector<int64_t>& positions, nn::UnitHooks* hooks) {
  Tensor ids = ctx.device.is_cpu() ? tokens.clone() : tokens.to(ctx.device, ctx.stream);
  ctx.mode = nn::Mode::kEval;
  ctx.targets = nullptr;
  ctx.attention_mask = nullptr;  // causal: right padding is never read at a real token
  ctx.kv_cache = nullptr;
  const Tensor scores = model.forward(ctx, ids, hooks);
  const std::vector<double> all =
      (ctx.device.is_cpu() ? scores : scores.to(Device::cpu(), ctx.stream)).to_doubles();
  std::vector<double> out;
  out.reserve(positions.size());
  for (int64_t p : positions) out.push_back(all[static_cast<size_t>(p)]);
  return out;
}

double reward_pair_loss(double chosen, double rejected) {
  const double d = chosen - rejected;
  return d > 0 ? std::log1p(std::exp(-d)) : -d + std::log1p(std::exp(d));
}

Result<RewardMetrics> reward_eval(nn::Model& model, nn::Context ctx, const RewardData& data,
                                  int64_t max_batches, nn::UnitHooks* hooks) {
  RewardMetrics m;
  int64_t n = data.batches_per_epoch();
  if (max_batches > 0) n = std::min(n, max_batches);
  double loss = 0, chosen = 0, rejected = 0;
  int64_t right = 0;
  for (int64_t b = 0; b < n; ++b) {
    ZT_ASSIGN_OR_RETURN(JsonlBatch jb, data.eval_batch(b));
    Tensor tokens = Tensor::from_blob(jb.input_ids.data(), {jb.B, jb.T}, DType::i32, Device::cpu());
    const std::vector<double> r = reward_scores(model, ctx, tokens, reward_positions(jb), hooks);
    const int64_t P = jb.B / 2;
    for (int64_t p = 0; p < P; ++p) {
      const double c = r[static_cast<size_t>(p)], j = r[static_cast<size_t>(P + p)];
      loss += reward_pair_loss(c, j);
      chosen += c;
      rejected += j;
      right += c > j ? 1 : 0;
    }
    m.pairs += P;
  }
  if (m.pairs > 0) {
    const auto k = static_cast<double>(m.pairs);
    m.loss = loss / k;
    m.accuracy = static_cast<double>(right) / k;
    m.chosen_score = chosen / k;
    m.rejected_score = rejected / k;
  }
  return m;
}

}  // namespace zt::tasks
