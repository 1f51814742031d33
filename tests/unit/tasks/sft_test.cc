// Supervised fine-tuning (tasks/sft.h) and the engine's -100 targets. Oracles: the byte
// tokenizer (ids are bytes, so the counted targets are known from the text), the evaluation
// loss path (tasks/lm_loss.h, itself checked against transformers by the LossFixture tests),
// and a run without ignored targets (a batch whose second row is all -100 must train exactly as
// the first row alone).
#include "zt/tasks/sft.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/engine_runs.h"
#include "zt/checkpoint/model_open.h"
#include "common/test_util.h"
#include "zt/data/tokenizer/tokenizer.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/config.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

constexpr const char* kSgd = R"({"train_micro_batch_size_per_gpu": 2,
  "optimizer": {"type": "SGD", "params": {"lr": 0.5}}})";

TEST(SftTargets, LabelsShiftToNextTokenTargets) {
  std::vector<int32_t> t;
  tasks::labels_to_targets({-100, -100, 5, 6, 7, -100}, 2, 3, t);
  EXPECT_EQ(t, (std::vector<int32_t>{-100, 5, -100, 7, -100, -100}));
}

std::string write_jsonl(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << body;
  return path;
}

TEST(SftData, PromptIsNotCountedResponseAndEosAre) {
  auto tok = tokenizer_load("bytes");
  ASSERT_TRUE(tok.is_ok());
  const std::string path = write_jsonl("sft_a.jsonl", R"({"prompt": "ab", "response": "xyz"}
{"prompt": "q", "response": "r"}
)");
  tasks::SftOptions o;
  o.seq_len = 8;
  o.micro_batch = 2;
  o.shuffle = false;
  o.vocab_size = 257;
  auto d = tasks::SftData::open(path, *tok, o);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  auto b = d->batch_at(0);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  const int32_t* x = b->tokens.data<int32_t>();
  const int32_t* y = b->targets.data<int32_t>();
  // Row 0: a b x y z EOT pad pad; the targets predict x y z EOT from the positions before.
  const std::vector<int32_t> want_x = {'a', 'b', 'x', 'y', 'z', 256};
  for (int t = 0; t < 6; ++t) EXPECT_EQ(x[t], want_x[t]) << t;
  const std::vector<int32_t> want_y = {-100, 'x', 'y', 'z', 256, -100, -100, -100};
  for (int t = 0; t < 8; ++t) EXPECT_EQ(y[t], want_y[t]) << t;
  // Row 1: q r EOT: only r and EOT are counted.
  const std::vector<int32_t> want_y1 = {'r', 256, -100, -100, -100, -100, -100, -100};
  for (int t = 0; t < 8; ++t) EXPECT_EQ(y[8 + t], want_y1[t]) << t;
  // --train-on-prompt counts the prompt's next tokens too.
  o.train_on_prompt = true;
  auto all = tasks::SftData::open(path, *tok, o);
  ASSERT_TRUE(all.is_ok());
  auto ba = all->batch_at(0);
  ASSERT_TRUE(ba.is_ok());
  EXPECT_EQ(ba->targets.data<int32_t>()[0], 'b');
}

TEST(SftData, PreferencePairsAreRefused) {
  const std::string path =
      write_jsonl("sft_pairs.jsonl", R"({"prompt": "a", "chosen": "b", "rejected": "c"}
)");
  tasks::SftOptions o;
  o.seq_len = 8;
  o.vocab_size = 257;
  auto d = tasks::SftData::open(path, *tokenizer_load("bytes"), o);
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("preference pairs"), std::string::npos);
}

TEST(EngineIgnoredTargets, LossIsTheMeanOverCountedTargets) {
  auto cfg = config_parse(kSgd, "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  nn::Gpt2 model(testing::tiny_gpt2_config());
  auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = 3});
  ASSERT_TRUE(e.is_ok());
  Tensor tokens = testing::random_ints({2, 8}, 23, 5);
  Tensor targets = testing::random_ints({2, 8}, 23, 6);
  int32_t* y = targets.data<int32_t>();
  for (int i : {0, 1, 2, 9, 15}) y[i] = -100;
  // The evaluation path's loss over the same counted targets.
  tasks::LmBatch lb;
  lb.B = 2;
  lb.T = 8;
  lb.input_ids.assign(tokens.data<int32_t>(), tokens.data<int32_t>() + 16);
  lb.targets.assign(y, y + 16);
  lb.attention_mask.assign(16, 1);
  lb.token_type_ids.assign(16, 0);
  tasks::LossSum want;
  tasks::lm_loss_accumulate(model, (*e)->eval_context(), lb, want, (*e)->hooks());
  ASSERT_EQ(want.count, 11);
  auto loss = (*e)->forward(tokens, targets);
  ASSERT_TRUE(loss.is_ok()) << loss.status().message();
  EXPECT_NEAR(*loss, want.mean(), 1e-5);
  // A target that is neither an id nor -100 is an error naming it.
  y[3] = -7;
  auto bad = (*e)->forward(tokens, targets);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("-7"), std::string::npos);
}

TEST(EngineIgnoredTargets, AnIgnoredRowTrainsAsIfItWereAbsent) {
  auto cfg2 = config_parse(kSgd, "test", 1);
  auto cfg1 = config_parse(R"({"train_micro_batch_size_per_gpu": 1,
    "optimizer": {"type": "SGD", "params": {"lr": 0.5}}})",
                           "test", 1);
  ASSERT_TRUE(cfg2.is_ok() && cfg1.is_ok());
  nn::Gpt2 m2(testing::tiny_gpt2_config()), m1(testing::tiny_gpt2_config());
  auto e2 = initialize(m2, *cfg2, {.device = Device::cpu(), .seed = 4});
  auto e1 = initialize(m1, *cfg1, {.device = Device::cpu(), .seed = 4});
  ASSERT_TRUE(e2.is_ok() && e1.is_ok());
  Tensor tokens2 = testing::random_ints({2, 8}, 23, 7);
  Tensor targets2 = testing::random_ints({2, 8}, 23, 8);
  for (int i = 8; i < 16; ++i) targets2.data<int32_t>()[i] = -100;
  Tensor tokens1 = Tensor::empty({1, 8}, DType::i32), targets1 = Tensor::empty({1, 8}, DType::i32);
  std::copy_n(tokens2.data<int32_t>(), 8, tokens1.data<int32_t>());
  std::copy_n(targets2.data<int32_t>(), 8, targets1.data<int32_t>());
  for (int step = 0; step < 2; ++step) {
    auto l2 = (*e2)->forward(tokens2, targets2);
    auto l1 = (*e1)->forward(tokens1, targets1);
    ASSERT_TRUE(l2.is_ok() && l1.is_ok());
    EXPECT_NEAR(*l2, *l1, 1e-6);
    ASSERT_TRUE((*e2)->backward(*l2).is_ok() && (*e1)->backward(*l1).is_ok());
    ASSERT_TRUE((*e2)->step().is_ok() && (*e1)->step().is_ok());
  }
  const auto w2 = testing::master_flat(**e2), w1 = testing::master_flat(**e1);
  ASSERT_EQ(w2.size(), w1.size());
  double max_diff = 0;
  for (size_t i = 0; i < w2.size(); ++i) max_diff = std::max(max_diff, std::abs(w2[i] - w1[i]));
  EXPECT_LT(max_diff, 1e-6);
}

// transformers' loss on the llama fixture (tests/fixtures/hf/make_sft_fixture.py): prompt/response
// records, padded on the right, -100 on the prompt; and with every position labelled.
TEST(SftData, FirstStepLossEqualsTransformers) {
  const std::string dir = ZT_SOURCE_DIR "/tests/fixtures/hf/llama/";
  std::ifstream ef(dir + "sft_expected.json");
  const nlohmann::json want = nlohmann::json::parse(ef);
  // The same records without labels: every next-token prediction counts (--train-on-prompt).
  std::ifstream in(dir + "sft.jsonl");
  std::string line, all_labelled;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("labels");
    all_labelled += j.dump() + "\n";
  }
  const std::string all_path = write_jsonl("sft_all.jsonl", all_labelled);
  for (const auto& [path, key] : {std::pair{dir + "sft.jsonl", "loss"},
                                  std::pair{all_path, "loss_train_on_prompt"}}) {
    auto choice = ckpt::model_open(dir);
    ASSERT_TRUE(choice.is_ok()) << choice.status().message();
    tasks::SftOptions o;
    o.seq_len = want["seq"].get<int64_t>();
    o.micro_batch = want["rows"].get<int64_t>();
    o.shuffle = false;
    o.vocab_size = choice->model->vocab_size();
    auto d = tasks::SftData::open(path, nullptr, o);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    auto b = d->batch_at(0);
    ASSERT_TRUE(b.is_ok());
    auto cfg = config_parse(R"({"train_micro_batch_size_per_gpu": 4,
      "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})",
                            "test", 1);
    ASSERT_TRUE(cfg.is_ok());
    auto e = initialize(*choice->model, *cfg, {.device = Device::cpu(), .seed = 1});
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    auto loss = (*e)->forward(b->tokens, b->targets);
    ASSERT_TRUE(loss.is_ok()) << loss.status().message();
    const double w = want[key].get<double>();
    EXPECT_NEAR(*loss, w, 1e-5 * w) << key;
  }
}

}  // namespace
}  // namespace zt
