// Masked-LM pre-training (tasks/mlm.h): the masking proportions over many windows, special
// tokens never selected, the same masking for a rank's rows as for the one-process batch, and
// the engine's training loss on a masked batch of the BERT fixture equal to the evaluation
// path's loss (tasks/lm_loss.h, which the LossFixture tests check against transformers'
// BertForMaskedLM).
#include "zt/tasks/mlm.h"

#include <gtest/gtest.h>

#include "common/test_util.h"
#include "zt/checkpoint/model_open.h"
#include "zt/runtime/config.h"
#include "zt/runtime/engine.h"
#include "zt/tasks/lm_loss.h"

namespace zt {
namespace {

tasks::MlmOptions options() {
  tasks::MlmOptions o;
  o.mask_id = 4;
  o.vocab_size = 250;
  o.never_mask = {0, 1, 2, 3, 4};
  o.seed = 11;
  return o;
}

TEST(MlmMask, ProportionsHoldOverManyWindows) {
  const tasks::MlmOptions o = options();
  int64_t positions = 0, special = 0, selected = 0, masked = 0, random = 0, kept = 0;
  for (uint64_t w = 0; w < 3000; ++w) {
    std::vector<int32_t> x(64), y(64);
    for (size_t t = 0; t < x.size(); ++t) x[t] = static_cast<int32_t>((w * 31 + t * 7) % 250);
    const std::vector<int32_t> orig = x;
    tasks::mlm_mask_window(x, y, w, o);
    for (size_t t = 0; t < x.size(); ++t) {
      if (orig[t] <= 4) {
        ++special;
        EXPECT_EQ(y[t], -100);
        EXPECT_EQ(x[t], orig[t]);
        continue;
      }
      ++positions;
      if (y[t] == -100) {
        EXPECT_EQ(x[t], orig[t]);
        continue;
      }
      ++selected;
      EXPECT_EQ(y[t], orig[t]);
      if (x[t] == o.mask_id) {
        ++masked;
      } else if (x[t] == orig[t]) {
        ++kept;  // kept, or a random draw of the same token (1 in 250)
      } else {
        ++random;
      }
    }
  }
  ASSERT_GT(special, 0);
  const double sel = static_cast<double>(selected) / static_cast<double>(positions);
  EXPECT_NEAR(sel, 0.15, 0.005);
  EXPECT_NEAR(static_cast<double>(masked) / selected, 0.8, 0.01);
  EXPECT_NEAR(static_cast<double>(random) / selected, 0.1 * 249.0 / 250.0, 0.01);
  EXPECT_NEAR(static_cast<double>(kept) / selected, 0.1 + 0.1 / 250.0, 0.01);
}

TEST(MlmMask, RanksMaskTheirRowsAsOneProcessDoes) {
  const tasks::MlmOptions o = options();
  const int64_t B = 3, T = 16, W = 2;
  Batch one;  // global batch 5 on one process: W*B rows
  one.index = 5;
  one.tokens = testing::random_ints({W * B, T}, 250, 1);
  one.targets = testing::random_ints({W * B, T}, 250, 2);
  std::vector<Batch> ranks(W);
  for (int r = 0; r < W; ++r) {
    ranks[r].index = 5;
    ranks[r].tokens = Tensor::empty({B, T}, DType::i32);
    ranks[r].targets = Tensor::empty({B, T}, DType::i32);
    std::copy_n(one.tokens.data<int32_t>() + r * B * T, B * T, ranks[r].tokens.data<int32_t>());
    tasks::mlm_batch(ranks[r], r, static_cast<int>(W), o);
  }
  tasks::mlm_batch(one, 0, 1, o);
  for (int r = 0; r < W; ++r) {
    for (int64_t i = 0; i < B * T; ++i) {
      EXPECT_EQ(ranks[r].tokens.data<int32_t>()[i], one.tokens.data<int32_t>()[r * B * T + i]);
      EXPECT_EQ(ranks[r].targets.data<int32_t>()[i], one.targets.data<int32_t>()[r * B * T + i]);
    }
  }
}

TEST(MlmMask, BadOptionsAreRefused) {
  tasks::MlmOptions o = options();
  o.mask_share = 0.95;
  EXPECT_FALSE(tasks::mlm_options_check(o).is_ok());
  o = options();
  o.mask_id = 250;
  auto st = tasks::mlm_options_check(o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("--mask-id"), std::string::npos);
}

TEST(MlmTraining, EngineLossEqualsTheEvaluationPath) {
  auto choice = ckpt::model_open(ZT_SOURCE_DIR "/tests/fixtures/hf/bert_mlm");
  ASSERT_TRUE(choice.is_ok()) << choice.status().message();
  auto cfg = config_parse(R"({"train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})",
                          "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  auto e = initialize(*choice->model, *cfg, {.device = Device::cpu(), .seed = 1});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  Batch b;
  b.index = 0;
  b.tokens = testing::random_ints({2, 32}, 250, 3);
  b.targets = Tensor::empty({2, 32}, DType::i32);
  tasks::mlm_batch(b, 0, 1, options());
  tasks::LmBatch lb;
  lb.B = 2;
  lb.T = 32;
  lb.input_ids.assign(b.tokens.data<int32_t>(), b.tokens.data<int32_t>() + 64);
  lb.targets.assign(b.targets.data<int32_t>(), b.targets.data<int32_t>() + 64);
  lb.attention_mask.assign(64, 1);
  lb.token_type_ids.assign(64, 0);
  tasks::LossSum want;
  tasks::lm_loss_accumulate(*choice->model, (*e)->eval_context(), lb, want, (*e)->hooks());
  ASSERT_GT(want.count, 0);
  auto loss = (*e)->forward(b.tokens, b.targets);
  ASSERT_TRUE(loss.is_ok()) << loss.status().message();
  EXPECT_NEAR(*loss, want.mean(), 1e-5 * want.mean());
  ASSERT_TRUE((*e)->backward(*loss).is_ok());
  ASSERT_TRUE((*e)->step().is_ok());
  // One SGD step on the same batch lowers its loss.
  tasks::LossSum after;
  tasks::lm_loss_accumulate(*choice->model, (*e)->eval_context(), lb, after, (*e)->hooks());
  EXPECT_LT(after.mean(), want.mean());
}

}  // namespace
}  // namespace zt
