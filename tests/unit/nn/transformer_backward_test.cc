// The whole Transformer's backward against central finite differences in f64, for a tiny model of
// each structural variant, each built from a Hugging Face config.json as a user's directory would
// be: Llama with grouped-query attention, llama3 rope scaling, an untied head and every bias;
// Llama with multi-query attention, head_dim != hidden / heads and a tied head; Qwen2 (q/k/v
// biases only); OPT pre-LN with word_embed_proj_dim projections; OPT post-LN; BERT MLM (post-LN,
// token types, a padding mask, the MLM transform and decoder bias, ignored targets); reward models
// (Llama and OPT with its projections: the value head `score` read at each row's last real token
// of chosen/rejected rows, two of them padded, under the pairwise loss). Parameters
// are uniform random (not the families' tiny init) so that every layer shapes the loss, and every
// parameter tensor must receive a non-zero gradient (a part the model silently skipped would
// otherwise pass with zero on both sides). Then: gradients accumulate over backward passes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "zt/nn/hf/hf_config.h"
#include "zt/nn/models/transformer.h"

namespace zt::nn {
namespace {

using nlohmann::json;

struct Variant {
  const char* name;
  json config;  // config.json
  // The structure the test means to cover, so a config key the reader ignored cannot turn the
  // case into another family's.
  void (*expect_structure)(const TransformerConfig& c);
};

// Small enough that finite differences over every parameter take well under a second each.
std::vector<Variant> variants() {
  return {
      // rope_theta 10 with head size 4: the two frequencies' wavelengths (6.3 and 19.9) fall in
      // llama3's unscaled band (< 32 / 4) and its smoothed band (between 8 and 32).
      {"llama_gqa",
       {{"model_type", "llama"},
        {"architectures", {"LlamaForCausalLM"}},
        {"vocab_size", 13},
        {"hidden_size", 16},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"intermediate_size", 24},
        {"max_position_embeddings", 16},
        {"rms_norm_eps", 1e-5},
        {"rope_theta", 10.0},
        {"rope_scaling",
         {{"rope_type", "llama3"},
          {"factor", 8.0},
          {"low_freq_factor", 1.0},
          {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", 32}}},
        {"attention_bias", true},
        {"mlp_bias", true},
        {"tie_word_embeddings", false}},
       [](const TransformerConfig& c) {
         EXPECT_EQ(c.n_head, 4);
         EXPECT_EQ(c.n_kv_head, 2);
         EXPECT_EQ(c.positions, Positions::kRotary);
         EXPECT_EQ(c.rope.type, "llama3");
         EXPECT_EQ(c.norm, NormKind::kRMSNorm);
         EXPECT_EQ(c.gated, Gated::kYes);
         EXPECT_EQ(c.tied, Tied::kNo);
         EXPECT_EQ(c.qkv_bias, Bias::kWith);
         EXPECT_EQ(c.out_bias, Bias::kWith);
         EXPECT_EQ(c.mlp_bias, Bias::kWith);
       }},
      {"llama_mqa",
       {{"model_type", "llama"},
        {"architectures", {"LlamaForCausalLM"}},
        {"vocab_size", 17},
        {"hidden_size", 12},
        {"head_dim", 6},  // 4 heads of 6 = 24 != 12
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 1},
        {"intermediate_size", 20},
        {"max_position_embeddings", 16},
        {"rms_norm_eps", 1e-6},
        {"rope_theta", 10000.0},
        {"tie_word_embeddings", true}},
       [](const TransformerConfig& c) {
         EXPECT_EQ(c.n_kv_head, 1);
         EXPECT_EQ(c.head_dim, 6);
         EXPECT_EQ(c.hidden, 12);
         EXPECT_EQ(c.tied, Tied::kYes);
         EXPECT_EQ(c.qkv_bias, Bias::kNone);
         EXPECT_EQ(c.mlp_bias, Bias::kNone);
       }},
      {"qwen2",
       {{"model_type", "qwen2"},
        {"architectures", {"Qwen2ForCausalLM"}},
        {"vocab_size", 15},
        {"hidden_size", 16},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"intermediate_size", 20},
        {"max_position_embeddings", 16},
        {"rms_norm_eps", 1e-6},
        {"rope_theta", 10000.0},
        {"use_sliding_window", false},
        {"tie_word_embeddings", true}},
       [](const TransformerConfig& c) {
         EXPECT_EQ(c.model_type, "qwen2");
         EXPECT_EQ(c.qkv_bias, Bias::kWith);
         EXPECT_EQ(c.out_bias, Bias::kNone);
         EXPECT_EQ(c.mlp_bias, Bias::kNone);
       }},
      {"opt_preln_projected",
       {{"model_type", "opt"},
        {"architectures", {"OPTForCausalLM"}},
        {"vocab_size", 19},
        {"hidden_size", 16},
        {"word_embed_proj_dim", 8},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 2},
        {"ffn_dim", 24},
        {"max_position_embeddings", 8},
        {"activation_function", "relu"},
        {"do_layer_norm_before", true},
        {"enable_bias", true}},
       [](const TransformerConfig& c) {
         EXPECT_EQ(c.embed_dim, 8);
         EXPECT_EQ(c.hidden, 16);
         EXPECT_EQ(c.placement, NormPlacement::kPre);
         EXPECT_TRUE(c.final_norm);
         EXPECT_EQ(c.position_offset, 2);
         EXPECT_EQ(c.act, kernels::Activation::kRelu);
         EXPECT_EQ(c.tied, Tied::kYes);
       }},
      {"opt_postln",
       {{"model_type", "opt"},
        {"architectures", {"OPTForCausalLM"}},
        {"vocab_size", 11},
        {"hidden_size", 12},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 3},
        {"ffn_dim", 20},
        {"max_position_embeddings", 8},
        {"activation_function", "relu"},
        {"do_layer_norm_before", false}},
       [](const TransformerConfig& c) {
         EXPECT_EQ(c.placement, NormPlacement::kPost);
         EXPECT_FALSE(c.final_norm);
         EXPECT_EQ(c.embed_dim, c.hidden);
         EXPECT_EQ(c.position_offset, 2);
       }},
      {"llama_reward",
       {{"model_type", "llama"},
        {"architectures", {"LlamaForSequenceClassification"}},
        {"id2label", {{"0", "LABEL_0"}}},
        {"vocab_size", 13},
        {"hidden_size", 16},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"intermediate_size", 24},
        {"max_position_embeddings", 16},
        {"rms_norm_eps", 1e-5},
        {"rope_theta", 10000.0},
        {"attention_bias", true},
        {"tie_word_embeddings", false}},
       [](const TransformerConfig& c) {
         EXPECT_EQ(c.task, Task::kReward);
         EXPECT_EQ(c.num_labels, 1);
         EXPECT_EQ(c.n_kv_head, 2);
         EXPECT_EQ(c.qkv_bias, Bias::kWith);
       }},
      {"opt_reward_projected",
       {{"model_type", "opt"},
        {"architectures", {"OPTForSequenceClassification"}},
        {"num_labels", 1},
        {"vocab_size", 19},
        {"hidden_size", 16},
        {"word_embed_proj_dim", 8},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 2},
        {"ffn_dim", 24},
        {"max_position_embeddings", 8},
        {"activation_function", "relu"},
        {"do_layer_norm_before", true},
        {"enable_bias", true}},
       [](const TransformerConfig& c) {
         EXPECT_EQ(c.task, Task::kReward);
         EXPECT_EQ(c.embed_dim, 8);
         EXPECT_TRUE(c.final_norm);
       }},
      {"bert_mlm",
       {{"model_type", "bert"},
        {"architectures", {"BertForMaskedLM"}},
        {"vocab_size", 20},
        {"hidden_size", 16},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 2},
        {"intermediate_size", 24},
        {"max_position_embeddings", 8},
        {"type_vocab_size", 2},
        {"layer_norm_eps", 1e-12},
        {"hidden_act", "gelu"}},
       [](const TransformerConfig& c) {
         EXPECT_EQ(c.task, Task::kMaskedLM);
         EXPECT_EQ(c.placement, NormPlacement::kPost);
         EXPECT_EQ(c.type_vocab, 2);
         EXPECT_TRUE(c.embed_norm);
         EXPECT_EQ(c.act, kernels::Activation::kGeluErf);
         EXPECT_EQ(c.tied, Tied::kYes);
       }},
  };
}

struct Bound {
  std::vector<Tensor> values, grads;
};

// Every unit bound to f64 buffers of uniform random values (as gpt2_test.cc's bind_f64).
Bound bind_f64(Model& model, uint64_t seed) {
  Bound b;
  for (size_t u = 0; u < model.units().size(); ++u) {
    Unit& unit = *model.units()[u];
    b.values.push_back(
        testing::random_tensor({unit.flat_numel()}, DType::f64, seed + u, -0.5, 0.5));
    b.grads.push_back(Tensor::zeros({unit.flat_numel()}, DType::f64));
    unit.bind(b.values.back(), b.grads.back());
  }
  return b;
}

// A model, its inputs and the loss: the mean of the per-token losses over counted targets.
struct Case {
  std::unique_ptr<Transformer> model;
  Bound bound;
  Tensor tokens, targets, mask, types;
  int64_t counted = 0;

  Context context(Mode mode) const {
    Context ctx{.device = Device::cpu(),
                .stream = {},
                .compute_dtype = DType::f64,
                .mode = mode,
                .targets = &targets};
    if (mask.defined()) ctx.attention_mask = &mask;
    if (types.defined()) ctx.token_types = &types;
    ctx.dloss = 1.0f / static_cast<float>(counted);
    return ctx;
  }
  double mean_loss() {
    Context ctx = context(Mode::kEval);
    const std::vector<double> l = model->forward(ctx, tokens).to_doubles();
    const int32_t* t = targets.data<int32_t>();
    double s = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      if (t[i] >= 0) s += l[i];
    }
    return s / static_cast<double>(counted);
  }
  void forward_backward() {
    Context ctx = context(Mode::kTrain);
    model->forward(ctx, tokens);
    model->backward(ctx);
  }
};

Case make_case(const Variant& v) {
  Case c;
  auto config = transformer_config_from_hf(v.config, std::string(v.name) + "/config.json");
  EXPECT_TRUE(config.is_ok()) << config.status().message();
  if (!config.is_ok()) return c;
  v.expect_structure(*config);
  c.model = std::make_unique<Transformer>(*config);
  c.bound = bind_f64(*c.model, 11);
  const bool reward = config->task == Task::kReward;
  const int64_t B = reward ? 4 : 2, T = config->task == Task::kMaskedLM ? 5 : 4;
  const int V = config->vocab_size;
  c.tokens = testing::random_ints({B, T}, V, 1);
  c.targets = testing::random_ints({B, T}, V, 2);
  int32_t* tg = c.targets.data<int32_t>();
  if (config->task == Task::kMaskedLM) {
    // Row 1 is padded at its last two positions; the loss counts only some positions (as MLM
    // labels do), one of them a padding position's (its query still attends to real keys).
    c.mask = Tensor::empty({B, T}, DType::i32);
    c.types = Tensor::empty({B, T}, DType::i32);
    int32_t* m = c.mask.data<int32_t>();
    int32_t* ty = c.types.data<int32_t>();
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        m[b * T + t] = b == 1 && t >= T - 2 ? 0 : 1;
        ty[b * T + t] = t >= (b == 0 ? 2 : 3) ? 1 : 0;
      }
    }
    for (int64_t i : {0, 2, 6, 9}) tg[i] = -100;  // row 1: position 3 (padding) counted, 4 not
  } else if (reward) {
    // Pairs (0, 2) and (1, 3): chosen rows 0-1, rejected rows 2-3. Each row is scored at its last
    // real token (the target marks it with that token's id); rows 1 and 3 are padded after
    // positions 1 and 2 (what follows never reaches the loss under causal attention).
    const int32_t* tk = c.tokens.data<int32_t>();
    const int64_t last[] = {T - 1, 1, T - 1, 2};
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) tg[b * T + t] = t == last[b] ? tk[b * T + t] : -100;
    }
  } else {
    tg[T - 1] = -100;  // a causal LM's last position has no next token
  }
  for (int64_t i = 0; i < B * T; ++i) c.counted += tg[i] >= 0 ? 1 : 0;
  return c;
}

class TransformerBackward : public ::testing::TestWithParam<Variant> {};

TEST_P(TransformerBackward, MatchesFiniteDifferences) {
  Case c = make_case(GetParam());
  ASSERT_TRUE(c.model != nullptr);
  c.forward_backward();
  for (size_t u = 0; u < c.bound.values.size(); ++u) {
    const Unit& unit = *c.model->units()[u];
    const std::vector<double> fd =
        testing::finite_difference(c.bound.values[u], [&] { return c.mean_loss(); });
    testing::expect_close(c.bound.grads[u].to_doubles(), fd, 1e-7, 1e-5, unit.name().c_str());
  }
  for (auto& unit : c.model->units()) {
    for (Param* p : unit->params()) {
      double norm = 0;
      for (double g : p->grad.to_doubles()) norm += g * g;
      EXPECT_GT(norm, 0.0) << p->name << " gets no gradient";
    }
  }
}

TEST_P(TransformerBackward, GradientsAccumulate) {
  Case c = make_case(GetParam());
  ASSERT_TRUE(c.model != nullptr);
  c.forward_backward();
  std::vector<std::vector<double>> once;
  for (const Tensor& g : c.bound.grads) once.push_back(g.to_doubles());
  c.forward_backward();
  for (size_t u = 0; u < c.bound.grads.size(); ++u) {
    std::vector<double> twice = once[u];
    for (double& g : twice) g *= 2;
    testing::expect_close(c.bound.grads[u].to_doubles(), twice, 1e-12, 1e-12,
                          c.model->units()[u]->name().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TransformerBackward, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace zt::nn
