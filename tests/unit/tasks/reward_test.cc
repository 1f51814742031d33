// Reward-model training (tasks/reward.h, the Transformer's Task::kReward head). Oracles: the byte
// tokenizer (ids are bytes, so each row's last real token is known from the text), the pairwise
// loss written out by hand from the scores of an evaluation forward, and each row run alone
// without padding (its score at its last token must be the padded batch's score).
#include "zt/tasks/reward.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/test_util.h"
#include "zt/data/tokenizer/tokenizer.h"
#include "zt/nn/hf/hf_config.h"
#include "zt/nn/models/registry.h"
#include "zt/runtime/config.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

std::string write_jsonl(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << body;
  return path;
}

constexpr const char* kPairs = R"({"prompt": "ab", "chosen": "xyz", "rejected": "q"}
{"prompt": "c", "chosen": "d", "rejected": "efgh"}
)";

tasks::RewardOptions options() {
  tasks::RewardOptions o;
  o.seq_len = 10;
  o.micro_batch = 2;
  o.shuffle = false;
  o.vocab_size = 257;
  return o;
}

TEST(RewardData, ChosenRowsThenRejectedRowsMarkedAtTheirEos) {
  auto tok = tokenizer_load("bytes");
  ASSERT_TRUE(tok.is_ok());
  auto d = tasks::RewardData::open(write_jsonl("reward_a.jsonl", kPairs), *tok, options());
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  auto b = d->batch_at(0);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  ASSERT_EQ(b->tokens.size(0), 4);
  const int64_t T = 10;
  const int32_t* x = b->tokens.data<int32_t>();
  const int32_t* y = b->targets.data<int32_t>();
  // Rows: "abxyz"+EOT, "cd"+EOT (chosen), then "abq"+EOT, "cefgh"+EOT (rejected).
  const std::vector<std::string> rows = {"abxyz", "cd", "abq", "cefgh"};
  for (int64_t r = 0; r < 4; ++r) {
    const auto len = static_cast<int64_t>(rows[static_cast<size_t>(r)].size());
    for (int64_t t = 0; t < len; ++t) EXPECT_EQ(x[r * T + t], rows[static_cast<size_t>(r)][t]);
    EXPECT_EQ(x[r * T + len], 256) << "row " << r << " ends with the eos";
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(y[r * T + t], t == len ? 256 : -100) << "row " << r << " position " << t;
    }
  }
}

TEST(RewardData, RecordsThatAreNotPairsAreRefused) {
  const std::string path = write_jsonl("reward_sft.jsonl", R"({"prompt": "a", "response": "b"}
)");
  auto d = tasks::RewardData::open(path, *tokenizer_load("bytes"), options());
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("'rejected'"), std::string::npos) << d.status().message();
}

// A small Llama reward model as a transformers directory would describe it.
std::unique_ptr<nn::Transformer> small_reward_model() {
  const nlohmann::json config = {
      {"model_type", "llama"},    {"architectures", {"LlamaForSequenceClassification"}},
      {"num_labels", 1},          {"vocab_size", 257},
      {"hidden_size", 16},        {"num_hidden_layers", 2},
      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
      {"intermediate_size", 32},  {"max_position_embeddings", 32},
      {"initializer_range", 0.5}};
  auto c = nn::transformer_config_from_hf(config, "reward/config.json");
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->task, nn::Task::kReward);
  return std::make_unique<nn::Transformer>(*c);
}

TEST(RewardModel, LossIsTheMeanPairLossOfTheScoresAtTheLastRealTokens) {
  auto model = small_reward_model();
  auto cfg = config_parse(R"({"train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})",
                          "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  auto e = initialize(*model, *cfg, {.device = Device::cpu(), .seed = 5});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  auto tok = tokenizer_load("bytes");
  auto d = tasks::RewardData::open(write_jsonl("reward_b.jsonl", kPairs), *tok, options());
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  auto b = d->batch_at(0);
  ASSERT_TRUE(b.is_ok());
  const int64_t T = 10;
  const std::vector<int64_t> last = {0 * T + 5, 1 * T + 2, 2 * T + 3, 3 * T + 5};
  const std::vector<double> r =
      tasks::reward_scores(*model, (*e)->eval_context(), b->tokens, last, (*e)->hooks());
  ASSERT_EQ(r.size(), 4u);
  EXPECT_NE(r[0], r[2]);
  // Each row alone, unpadded: its score at its last token is the batch's.
  const int32_t* x = b->tokens.data<int32_t>();
  for (int64_t row = 0; row < 4; ++row) {
    const int64_t len = last[static_cast<size_t>(row)] - row * T + 1;
    Tensor alone = Tensor::empty({1, len}, DType::i32);
    std::copy_n(x + row * T, len, alone.data<int32_t>());
    const std::vector<double> s =
        tasks::reward_scores(*model, (*e)->eval_context(), alone, {len - 1}, (*e)->hooks());
    EXPECT_NEAR(s[0], r[static_cast<size_t>(row)], 1e-5) << "row " << row;
  }
  // Changing a padding token changes no score.
  Tensor changed = b->tokens.clone();
  changed.data<int32_t>()[1 * T + 6] = 'Z';
  changed.data<int32_t>()[2 * T + 9] = 'Z';
  EXPECT_EQ(tasks::reward_scores(*model, (*e)->eval_context(), changed, last, (*e)->hooks()), r);
  // The engine's loss: the mean over the two pairs of -log sigmoid(r_chosen - r_rejected).
  double want = 0;
  for (int p = 0; p < 2; ++p) {
    want +=
        -std::log(1.0 /
                  (1.0 + std::exp(-(r[static_cast<size_t>(p)] - r[static_cast<size_t>(p + 2)])))) /
        2;
  }
  auto loss = (*e)->forward(b->tokens, b->targets);
  ASSERT_TRUE(loss.is_ok()) << loss.status().message();
  EXPECT_NEAR(*loss, want, 1e-5);
  ASSERT_TRUE((*e)->backward(*loss).is_ok());
  ASSERT_TRUE((*e)->step().is_ok());
  // The evaluation of the same pairs (with the updated weights) agrees with its own scores.
  const std::vector<double> r2 =
      tasks::reward_scores(*model, (*e)->eval_context(), b->tokens, last, (*e)->hooks());
  auto m = tasks::reward_eval(*model, (*e)->eval_context(), *d, 0, (*e)->hooks());
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->pairs, 2);
  double want2 = 0, right = 0;
  for (int p = 0; p < 2; ++p) {
    const double c = r2[static_cast<size_t>(p)], j = r2[static_cast<size_t>(p + 2)];
    want2 += -std::log(1.0 / (1.0 + std::exp(-(c - j)))) / 2;
    right += c > j ? 0.5 : 0;
  }
  EXPECT_NEAR(m->loss, want2, 1e-9);
  EXPECT_DOUBLE_EQ(m->accuracy, right);
  EXPECT_NEAR(m->chosen_score, (r2[0] + r2[1]) / 2, 1e-12);
  EXPECT_NEAR(m->rejected_score, (r2[2] + r2[3]) / 2, 1e-12);
  // One SGD step on the pair loss lowers it.
  EXPECT_LT(want2, want);
}

TEST(RewardModel, PairLossIsStableForLargeDifferences) {
  EXPECT_NEAR(tasks::reward_pair_loss(0, 0), std::log(2.0), 1e-15);
  EXPECT_NEAR(tasks::reward_pair_loss(1000, 0), 0, 1e-300);
  EXPECT_NEAR(tasks::reward_pair_loss(0, 1000), 1000, 1e-9);
}

TEST(RewardModel, ACausalModelGetsAScoreHeadAndExportsAsASequenceClassifier) {
  auto c = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(c.is_ok());
  nn::Transformer causal(*c);
  auto reward = tasks::reward_model_from(causal);
  EXPECT_EQ(reward->transformer_config().task, nn::Task::kReward);
  const nn::Param* score = nullptr;
  bool lm_head = false;
  for (auto& unit : reward->units()) {
    for (nn::Param* p : unit->params()) {
      if (p->name == "score.weight") score = p;
      if (p->name.rfind("lm_head", 0) == 0) lm_head = true;
    }
  }
  ASSERT_NE(score, nullptr);
  EXPECT_EQ(score->shape, (Shape{1, c->hidden}));
  EXPECT_FLOAT_EQ(score->init_std, c->init_std);
  EXPECT_FALSE(lm_head);
  const nlohmann::json j = reward->config_json();
  EXPECT_EQ(j["architectures"][0], "LlamaForSequenceClassification");
  EXPECT_EQ(j["num_labels"], 1);
  auto back = nn::transformer_config_from_hf(j, "export/config.json");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->task, nn::Task::kReward);
  // A sequence classifier with two labels is not a reward model.
  nlohmann::json two = j;
  two.erase("id2label");
  two["num_labels"] = 2;
  auto bad = nn::transformer_config_from_hf(two, "two/config.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("num_labels"), std::string::npos);
}

}  // namespace
}  // namespace zt
