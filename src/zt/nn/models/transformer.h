// One transformer for every family (GPT-2, Llama, Qwen2, OPT, BERT), assembled from the layer
// library (nn/layers/) by a TransformerConfig: the families differ in norms, their placement,
// positions, activations, biases, head tying and names, not in structure. Units, in order:
// [embedding, block 0..L-1, head] (ZeRO's granules); the head reads the embedding's token table
// when the two are tied (an extra unit for the ZeRO-3 schedule).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/kernels/ops.h"
#include "zt/nn/layers/attention.h"
#include "zt/nn/layers/linear.h"
#include "zt/nn/layers/mlp.h"
#include "zt/nn/layers/norm.h"
#include "zt/nn/layers/rotary.h"
#include "zt/nn/model.h"

namespace zt::nn {

enum class Positions : unsigned char { kNone, kLearned, kRotary };
enum class NormPlacement : unsigned char { kPre, kPost };  // pre-LN decoders; BERT, OPT-350m
enum class Tied : unsigned char { kNo, kYes };
// kSequenceClassification: BERT's pooler (dense + tanh on the first token) and classifier; the
// targets are one label per row (B), the loss single-label cross-entropy over num_labels.
// kReward: a decoder's scalar value head `score` (hidden -> 1, no bias: transformers'
// <Family>ForSequenceClassification with num_labels 1) read at each row's last real token; the
// loss is the pairwise -log sigmoid(r_chosen - r_rejected) (TransformerHead::forward_reward).
enum class Task : unsigned char { kCausalLM, kMaskedLM, kSequenceClassification, kReward };

struct TransformerConfig {
  std::string model_type = "gpt2";  // the family: gpt2, llama, qwen2, opt, bert
  Task task = Task::kCausalLM;
  int num_labels = 0;  // kSequenceClassification; 1 for kReward
  int n_layer = 0;
  int n_head = 0;
  int n_kv_head = 0;
  int64_t hidden = 0;
  int64_t head_dim = 0;
  int64_t inner = 0;  // MLP width
  // Tensor parallelism: this model is rank tp_rank's part of the whole: each block's heads and
  // MLP width split over tp_size ranks (nn/layers attention.h, mlp.h), and the vocabulary: the
  // token table's rows (and an untied LM head's) split in equal parts, the loss computed from
  // the parts without gathering the logits. The norms and positions stay whole on every rank.
  // n_head, n_kv_head, inner and padded_vocab_size stay the whole model's.
  int tp_size = 1;
  int tp_rank = 0;
  int vocab_size = 0;
  int padded_vocab_size = 0;  // rows of the token table (vocab rounded up: GEMM-friendly)
  int64_t max_positions = 0;
  NormKind norm = NormKind::kLayerNorm;
  float norm_eps = 1e-5f;
  NormPlacement placement = NormPlacement::kPre;
  bool final_norm = true;
  kernels::Activation act = kernels::Activation::kGeluTanh;
  Gated gated = Gated::kNo;
  Bias qkv_bias = Bias::kWith;
  Bias out_bias = Bias::kWith;
  Bias mlp_bias = Bias::kWith;
  Positions positions = Positions::kLearned;
  int64_t position_offset = 0;  // OPT's learned positions start at row 2
  RopeConfig rope;
  Tied tied = Tied::kYes;
  int64_t embed_dim = 0;    // token table width (OPT's word_embed_proj_dim; else hidden)
  int64_t type_vocab = 0;   // BERT's token types (0: none)
  bool embed_norm = false;  // BERT: LayerNorm after the embedding sum
  float init_std = 0.02f;
  float residual_init_std = 0.02f;  // output projections of attention and MLP
  float position_init_std = 0.02f;
};

int padded_vocab(int vocab);

// Whether `c` splits over c.tp_size tensor-parallel ranks: its heads, key/value heads and MLP
// width are multiples of tp_size (key/value heads fewer than the ranks would have to be
// replicated, which is not supported yet). Errors name the numbers and the flag.
Status tensor_parallel_check(const TransformerConfig& c);

class Transformer;
// Tensor-parallel rank tp_rank's part of `whole` (tensor_parallel_check's errors): the same
// model with the split layers' parts, whose weights, when `whole` reads them from a model
// directory's files, come from the same files (each part reads its elements of the whole
// parameters: ParamSlice).
Result<std::unique_ptr<Transformer>> tensor_parallel_part(const Transformer& whole, int tp_rank,
                                                          int tp_size);  // rounds up to 64 (tiny vocabularies) or 128

class Transformer;

class TransformerEmbedding : public Unit {
 public:
  TransformerEmbedding(const TransformerConfig& c);
  Tensor forward(Context& ctx, const Tensor& tokens) override;  // (B,T) i32 -> (B,T,C)
  Tensor backward(Context& ctx, const Tensor& dout) override;   // returns an undefined tensor
  Param& tokens_table() { return *wte_; }

 private:
  const Tensor& position_ids(Context& ctx, int64_t B, int64_t T);
  // GPT-2's shape: token + position tables of one width, positions from row 0, nothing else.
  bool fused() const {
    return wpe_ != nullptr && c_.position_offset == 0 && types_ == nullptr && !norm_ &&
           !project_in_ && c_.tp_size == 1;
  }
  const TransformerConfig& c_;
  Param* wte_;
  Param* wpe_ = nullptr;
  Param* types_ = nullptr;
  std::optional<Norm> norm_;
  std::optional<Linear> project_in_;
  Tensor tokens_, types_in_, sum_, pos_ids_;
  std::map<std::tuple<int64_t, int64_t, std::string>, Tensor> pos_kept_;  // from position 0
  int64_t pos_b_ = -1, pos_t_ = -1, pos_first_ = -1;
  std::string pos_device_;
};

class TransformerBlock : public Unit {
 public:
  TransformerBlock(const TransformerConfig& c, int index, Rotary* rotary)
      : TransformerBlock(c, index, names(c, index), rotary) {}
  Tensor forward(Context& ctx, const Tensor& x) override;  // (B,T,C) -> (B,T,C)
  Tensor backward(Context& ctx, const Tensor& dout) override;
  bool checkpointable() const override { return true; }
  void release_activations() override;
  // The block's linear layers, in order: attention's fused q/k/v and output, the MLP's up (or
  // fused gate/up) and down projections.
  std::vector<Linear*> linears() { return {&attn_.qkv(), &attn_.out(), &mlp_.up(), &mlp_.down()}; }

 private:
  struct Names {
    std::string unit, norm1, qkv, attn_out, norm2, up, down;
  };
  static Names names(const TransformerConfig& c, int index);
  TransformerBlock(const TransformerConfig& c, int index, const Names& n, Rotary* rotary);
  NormPlacement placement_;
  Norm norm1_;
  Attention attn_;
  Norm norm2_;
  Mlp mlp_;
  // Pre-LN: x_ (input) and res_ (x + attention). Post-LN: x_, res_ (x + attention, before the
  // first norm), h_ (after it: the MLP's input) and res2_ (h + MLP, before the second norm).
  Tensor x_, res_, h_, res2_;
  Tensor n1_, n2_;  // pre-LN: the norms' outputs, when kept (Context::keep_activations)
};

class TransformerHead : public Unit {
 public:
  // `embedding` supplies the token table when tied; `embedding_unit` is its index in the model.
  TransformerHead(const TransformerConfig& c, TransformerEmbedding& embedding, int embedding_unit);
  // (B,T,C) -> per-token losses (B*T) accum dtype when ctx.targets is set (targets < 0 are not
  // counted), else logits (B,T,Vp). In kTrain mode the logits buffer is overwritten with the
  // loss gradient (fused). A reward head returns scores (B,T) without targets and per-position
  // pair losses (B*T) with them (forward_reward in transformer.cc has the contract).
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dout) override;

 private:
  Tensor forward_classify(Context& ctx, const Tensor& x);
  Tensor backward_classify(Context& ctx);
  Tensor forward_reward(Context& ctx, const Tensor& x);
  Tensor backward_reward(Context& ctx);
  Param& table();
  const TransformerConfig& c_;
  TransformerEmbedding& embedding_;
  std::optional<Norm> final_norm_;
  std::optional<Linear> project_out_;
  std::optional<Linear> transform_;  // BERT's MLM transform: dense, GELU, LayerNorm
  std::optional<Norm> transform_norm_;
  std::optional<Linear> pooler_, classifier_;  // sequence classification
  Param* lm_weight_ = nullptr;  // untied
  Param* lm_bias_ = nullptr;
  Shape in_shape_;
  Tensor x_, normed_, gathered_, projected_, t_pre_, t_act_, features_, logits_;
  Tensor first_, pooled_pre_;  // sequence classification: the rows' first tokens, pre-tanh
  std::optional<Linear> score_;       // reward: the value head
  std::vector<int64_t> score_at_;     // reward: flat positions (b*T + t) of the scored rows
  bool have_dlogits_ = false;
};

class Transformer : public Model {
 public:
  explicit Transformer(const TransformerConfig& config);
  std::string name() const override { return config_.model_type; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  const TransformerConfig& transformer_config() const { return config_; }
  // The Hugging Face config.json of the model (what an export writes).
  nlohmann::json config_json() const override;
  // The config.json this model was read from (null for named sizes): exports keep its keys.
  void set_source_config(nlohmann::json config) { source_config_ = std::move(config); }
  const nlohmann::json& source_config() const { return source_config_; }

 private:
  TransformerConfig config_;
  std::unique_ptr<Rotary> rotary_;
  nlohmann::json source_config_;
};

}  // namespace zt::nn
