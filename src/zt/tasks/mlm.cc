#include "zt/tasks/mlm.h"

#include <algorithm>
#include <random>

#include "zt/tasks/lm_loss.h"
#include "zt/tasks/sft.h"

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

Result<MlmMetrics> mlm_eval_batches(nn::Model& model, nn::Context ctx, int64_t batches,
                                    const std::function<Result<LmBatch>(int64_t)>& next,
                                    int64_t vocab, nn::UnitHooks* hooks) {
  MlmMetrics m;
  double sum = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < batches; ++i) {
    ZT_ASSIGN_OR_RETURN(LmBatch b, next(i));
    LossSum ls;
    lm_loss_accumulate(model, ctx, b, ls, hooks);
    sum += ls.sum;
    m.positions += ls.count;
    const std::vector<float> logits = lm_forward(model, ctx, b, LmOutput::kLogits, hooks).to_floats();
    const int64_t Vp = static_cast<int64_t>(logits.size()) / (b.B * b.T);
    for (int64_t p = 0; p < b.B * b.T; ++p) {
      if (b.targets[static_cast<size_t>(p)] < 0) continue;
      const float* row = logits.data() + p * Vp;
      int64_t best = 0;
      for (int64_t v = 1; v < vocab; ++v) best = row[v] > row[best] ? v : best;
      correct += best == b.targets[static_cast<size_t>(p)];
    }
  }
  if (m.positions > 0) {
    m.loss = sum / static_cast<double>(m.positions);
    m.accuracy = static_cast<double>(correct) / static_cast<double>(m.positions);
  }
  return m;
}

Result<MlmMetrics> mlm_eval(nn::Model& model, nn::Context ctx, const TokenFile& file, int64_t seq,
                            int64_t micro, int64_t windows, int64_t vocab, const MlmOptions& o,
                            nn::UnitHooks* hooks) {
  const int64_t available = file.num_tokens() / seq;
  if (available < 1) {
    return invalid_argument("{}: {} tokens do not make one window of {}", file.path(),
                            file.num_tokens(), seq);
  }
  if (windows <= 0 || windows > available) windows = available;
  std::vector<uint32_t> buf(static_cast<size_t>(seq));
  auto next = [&](int64_t i) -> Result<LmBatch> {
    const int64_t first = i * micro;
    const int64_t B = std::min(micro, windows - first);
    LmBatch b;
    b.B = B;
    b.T = seq;
    b.input_ids.resize(static_cast<size_t>(B * seq));
    b.targets.resize(static_cast<size_t>(B * seq));
    b.attention_mask.assign(static_cast<size_t>(B * seq), 1);
    b.token_type_ids.assign(static_cast<size_t>(B * seq), 0);
    for (int64_t r = 0; r < B; ++r) {
      file.read_tokens((first + r) * seq, buf);
      int32_t* x = b.input_ids.data() + r * seq;
      for (int64_t t = 0; t < seq; ++t) x[t] = static_cast<int32_t>(buf[static_cast<size_t>(t)]);
      mlm_mask_window({x, static_cast<size_t>(seq)},
                      {b.targets.data() + r * seq, static_cast<size_t>(seq)},
                      static_cast<uint64_t>(first + r), o);
    }
    return b;
  };
  return mlm_eval_batches(model, ctx, (windows + micro - 1) / micro, next, vocab, hooks);
}

bool is_jsonl_path(const std::string& path) {
  std::string p = path;
  for (const char* z : {".gz", ".zst"}) {
    const std::string zs(z);
    if (p.size() > zs.size() && p.compare(p.size() - zs.size(), zs.size(), zs) == 0) {
      p.resize(p.size() - zs.size());
    }
  }
  for (const char* e : {".jsonl", ".json"}) {
    const std::string es(e);
    if (p.size() > es.size() && p.compare(p.size() - es.size(), es.size(), es) == 0) return true;
  }
  return false;
}

namespace {

// Masks row r of a (B, T) padded batch: only its real tokens (attention mask 1), by `window`.
// Padding keeps its id and gets label -100.
void mask_padded_row(int32_t* ids, int32_t* labels, const int32_t* attention, int64_t T,
                     uint64_t window, const MlmOptions& o) {
  int64_t n = 0;
  while (n < T && attention[n] != 0) ++n;
  mlm_mask_window({ids, static_cast<size_t>(n)}, {labels, static_cast<size_t>(n)}, window, o);
  for (int64_t t = n; t < T; ++t) labels[t] = -100;
}

}  // namespace

Result<MlmTextData> MlmTextData::open(const std::string& path,
                                      std::shared_ptr<const Tokenizer> tokenizer,
                                      const MlmTextOptions& o, const MlmOptions& mlm) {
  JsonlDatasetOptions d;
  d.seq_len = o.seq_len;
  d.prompt_labels = PromptLabels::kTrained;
  d.bad_records = o.skip_bad ? BadRecords::kSkip : BadRecords::kFail;
  d.layout = RowLayout::kPad;
  d.text_eos = false;
  d.vocab_size = mlm.vocab_size;
  d.batch_size = o.micro_batch;
  d.order = o.shuffle ? SampleOrder::kRandom : SampleOrder::kSequential;
  d.seed = o.seed;
  d.rank = o.rank;
  d.world_size = o.world_size;
  ZT_ASSIGN_OR_RETURN(JsonlDataset ds, JsonlDataset::open(path, std::move(tokenizer), d));
  if (ds.format() != JsonlFormat::kText && ds.format() != JsonlFormat::kTokens) {
    return invalid_argument("{}: {} records are not masked-LM data; --task mlm takes `text` or "
                            "`input_ids` records",
                            path, jsonl_format_name(ds.format()));
  }
  if (ds.num_batches(0) < 1) {
    return invalid_argument("{}: {} examples do not make one batch of {} rows on each of {} "
                            "rank(s)",
                            path, ds.size(), o.micro_batch, o.world_size);
  }
  return MlmTextData(std::move(ds), mlm);
}

Result<Batch> MlmTextData::batch_at(int64_t g) const {
  ZT_ASSIGN_OR_RETURN(JsonlBatch jb, dataset_.batch_at(g));
  const JsonlDatasetOptions& d = dataset_.options();
  std::vector<int32_t> labels(jb.input_ids.size());
  for (int64_t r = 0; r < jb.B; ++r) {
    const uint64_t window = static_cast<uint64_t>((g * d.world_size + d.rank) * jb.B + r);
    mask_padded_row(jb.input_ids.data() + r * jb.T, labels.data() + r * jb.T,
                    jb.attention_mask.data() + r * jb.T, jb.T, window, mlm_);
  }
  Batch out = host_batch(jb.B, jb.T, jb.input_ids, labels, g);
  out.attention_mask = Tensor::empty({jb.B, jb.T}, DType::i32, Device::cpu());
  std::copy(jb.attention_mask.begin(), jb.attention_mask.end(),
            out.attention_mask.data<int32_t>());
  return out;
}

Result<LmBatch> MlmTextData::eval_batch(int64_t b) const {
  ZT_ASSIGN_OR_RETURN(JsonlBatch jb, dataset_.batch(0, b));
  LmBatch out;
  out.B = jb.B;
  out.T = jb.T;
  out.input_ids = std::move(jb.input_ids);
  out.targets.resize(out.input_ids.size());
  for (int64_t r = 0; r < jb.B; ++r) {
    mask_padded_row(out.input_ids.data() + r * jb.T, out.targets.data() + r * jb.T,
                    jb.attention_mask.data() + r * jb.T, jb.T,
                    static_cast<uint64_t>(jb.examples[static_cast<size_t>(r)]), mlm_);
  }
  out.padded = std::find(jb.attention_mask.begin(), jb.attention_mask.end(), 0) !=
               jb.attention_mask.end();
  out.attention_mask = std::move(jb.attention_mask);
  out.token_type_ids.assign(out.input_ids.size(), 0);
  return out;
}

}  // namespace zt::tasks
