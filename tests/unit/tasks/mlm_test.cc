// Masked-LM pre-training (tasks/mlm.h): the masking proportions over many windows, special
// tokens never selected, the same masking for a rank's rows as for the one-process batch, and
// the engine's training loss on a masked batch of the BERT fixture equal to the evaluation
// path's loss (tasks/lm_loss.h, which the LossFixture tests check against transformers'
// BertForMaskedLM).
#include "zt/tasks/mlm.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/test_util.h"
#include "zt/checkpoint/model_open.h"
#include "zt/data/tokenizer/tokenizer.h"
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

// JSON Lines text for BERT (run_mlm.py --line_by_line): [CLS] text [SEP], no eos, one padded row
// per record; only real, non-special tokens are ever selected; padding is label -100 and mask 0.
TEST(MlmText, TextRowsAreTokenizedPaddedAndMaskedOnlyWhereReal) {
  auto tok = tokenizer_load(ZT_SOURCE_DIR "/tests/fixtures/tokenizers/bert/tokenizer.json");
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  testing::TempDir dir;
  {
    std::ofstream f(dir.file("text.jsonl"));
    f << R"({"text": "the quick brown fox jumps over the lazy dog"})" << "\n"
      << R"({"text": "hello world"})" << "\n"
      << R"({"text": "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f g h i j"})"
      << "\n"
      << R"({"text": "masked language models read both ways"})" << "\n";
  }
  tasks::MlmOptions o;
  o.vocab_size = (*tok)->vocab_size();
  o.mask_id = *(*tok)->token_to_id("[MASK]");
  for (int32_t id = 0; id < o.vocab_size; ++id) {
    if ((*tok)->is_special(id)) o.never_mask.push_back(id);
  }
  o.probability = 0.5;  // enough selections in a few short rows
  o.seed = 5;
  auto d = tasks::MlmTextData::open(dir.file("text.jsonl"), *tok,
                                    {.seq_len = 16, .micro_batch = 4, .shuffle = false}, o);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  // The oracle: each text through the tokenizer with its special tokens, cut to 16.
  const char* texts[] = {"the quick brown fox jumps over the lazy dog", "hello world",
                         "a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f g h i j",
                         "masked language models read both ways"};
  std::vector<std::vector<int32_t>> rows;
  int64_t truncated = 0;
  for (const char* t : texts) {
    std::vector<int32_t> ids;
    ASSERT_TRUE((*tok)->encode_append(t, true, ids).is_ok());
    if (ids.size() > 16) {
      ++truncated;
      ids.resize(16);
    }
    rows.push_back(ids);
  }
  EXPECT_EQ(d->dataset().truncated(), truncated);
  ASSERT_GT(truncated, 0);
  ASSERT_LT(rows[1].size(), 16u);  // some rows are padded
  const int32_t cls = *(*tok)->token_to_id("[CLS]"), sep = *(*tok)->token_to_id("[SEP]");
  EXPECT_EQ(rows[1].front(), cls);
  EXPECT_EQ(rows[1].back(), sep);  // no eos after [SEP]
  for (int64_t g : {0, 1}) {
    auto b = d->batch_at(g);
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    ASSERT_TRUE(b->attention_mask.defined());
    const int32_t* x = b->tokens.data<int32_t>();
    const int32_t* y = b->targets.data<int32_t>();
    const int32_t* m = b->attention_mask.data<int32_t>();
    int64_t selected = 0, padded = 0;
    for (int64_t r = 0; r < 4; ++r) {
      const std::vector<int32_t>& ids = rows[static_cast<size_t>(r)];
      for (int64_t t = 0; t < 16; ++t) {
        const size_t i = static_cast<size_t>(r * 16 + t);
        if (t >= static_cast<int64_t>(ids.size())) {
          ++padded;
          EXPECT_EQ(m[i], 0);
          EXPECT_EQ(y[i], -100);
          continue;
        }
        EXPECT_EQ(m[i], 1);
        const int32_t orig = ids[static_cast<size_t>(t)];
        if (orig == cls || orig == sep) {
          EXPECT_EQ(y[i], -100);
          EXPECT_EQ(x[i], orig);
        } else if (y[i] != -100) {
          ++selected;
          EXPECT_EQ(y[i], orig);
        } else {
          EXPECT_EQ(x[i], orig);
        }
      }
    }
    EXPECT_GT(selected, 4);
    EXPECT_GT(padded, 10);
  }
  // Each epoch masks afresh (the row number in the run), evaluation always the same way.
  auto b0 = d->batch_at(0), b1 = d->batch_at(1);
  ASSERT_TRUE(b0.is_ok() && b1.is_ok());
  EXPECT_NE(std::vector<int32_t>(b0->targets.data<int32_t>(), b0->targets.data<int32_t>() + 64),
            std::vector<int32_t>(b1->targets.data<int32_t>(), b1->targets.data<int32_t>() + 64));
  auto e0 = d->eval_batch(0), e0again = d->eval_batch(0);
  ASSERT_TRUE(e0.is_ok() && e0again.is_ok());
  EXPECT_EQ(e0->targets, e0again->targets);
  EXPECT_TRUE(e0->padded);
}

TEST(MlmText, PromptResponseRecordsAreRefused) {
  testing::TempDir dir;
  {
    std::ofstream f(dir.file("sft.jsonl"));
    f << R"({"input_ids": [1, 2, 3]})" << "\n";
  }
  {
    std::ofstream f(dir.file("pairs.jsonl"));
    f << R"({"prompt": "a", "response": "b"})" << "\n";
  }
  auto tok = tokenizer_load(ZT_SOURCE_DIR "/tests/fixtures/tokenizers/bert/tokenizer.json");
  ASSERT_TRUE(tok.is_ok());
  tasks::MlmOptions o = options();
  auto d = tasks::MlmTextData::open(dir.file("pairs.jsonl"), *tok, {.seq_len = 8}, o);
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("not masked-LM data"), std::string::npos)
      << d.status().message();
  EXPECT_TRUE(tasks::is_jsonl_path("a/b.jsonl.gz"));
  EXPECT_TRUE(tasks::is_jsonl_path("x.json"));
  EXPECT_FALSE(tasks::is_jsonl_path("x.bin"));
}

// Training on padded rows: the engine's loss with the attention mask equals the evaluation
// path's (which LossFixture checks against transformers' BertForMaskedLM with padding), and the
// ids under the padding do not matter: the mask keeps every real position from seeing them.
TEST(MlmText, EngineTrainsPaddedRowsWithTheAttentionMask) {
  testing::TempDir dir;
  {
    std::ofstream f(dir.file("ids.jsonl"));
    f << R"({"input_ids": [2, 17, 45, 99, 120, 7, 33, 81, 200, 3]})" << "\n"
      << R"({"input_ids": [2, 50, 60, 3]})" << "\n"
      << R"({"input_ids": [2, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 3]})" << "\n"
      << R"({"input_ids": [2, 140, 141, 142, 143, 144, 3]})" << "\n";
  }
  auto choice = ckpt::model_open(ZT_SOURCE_DIR "/tests/fixtures/hf/bert_mlm");
  ASSERT_TRUE(choice.is_ok()) << choice.status().message();
  tasks::MlmOptions o = options();
  o.probability = 0.4;
  auto d = tasks::MlmTextData::open(dir.file("ids.jsonl"), nullptr,
                                    {.seq_len = 16, .micro_batch = 4, .shuffle = false}, o);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  auto b = d->batch_at(0);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  auto cfg = config_parse(R"({"train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})",
                          "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  auto e = initialize(*choice->model, *cfg, {.device = Device::cpu(), .seed = 1});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  tasks::LmBatch lb;
  lb.B = 4;
  lb.T = 16;
  lb.input_ids.assign(b->tokens.data<int32_t>(), b->tokens.data<int32_t>() + 64);
  lb.targets.assign(b->targets.data<int32_t>(), b->targets.data<int32_t>() + 64);
  lb.attention_mask.assign(b->attention_mask.data<int32_t>(),
                           b->attention_mask.data<int32_t>() + 64);
  lb.token_type_ids.assign(64, 0);
  lb.padded = true;
  tasks::LossSum want;
  tasks::lm_loss_accumulate(*choice->model, (*e)->eval_context(), lb, want, (*e)->hooks());
  ASSERT_GT(want.count, 0);
  // Other ids under the padding: the same loss with the mask.
  Tensor other = b->tokens.clone();
  for (int64_t i = 0; i < 64; ++i) {
    if (b->attention_mask.data<int32_t>()[i] == 0) other.data<int32_t>()[i] = 100 + (i % 50);
  }
  auto loss_other = (*e)->forward(other, b->targets, &b->attention_mask);
  ASSERT_TRUE(loss_other.is_ok()) << loss_other.status().message();
  auto loss = (*e)->forward(b->tokens, b->targets, &b->attention_mask);
  ASSERT_TRUE(loss.is_ok()) << loss.status().message();
  EXPECT_NEAR(*loss, want.mean(), 1e-5 * want.mean());
  EXPECT_NEAR(*loss_other, *loss, 1e-6 * *loss);
  // Without the mask the padding is read, and the loss is another one (the control).
  auto unmasked = (*e)->forward(other, b->targets, nullptr);
  ASSERT_TRUE(unmasked.is_ok());
  EXPECT_GT(std::abs(*unmasked - *loss), 1e-4 * *loss);
}

}  // namespace
}  // namespace zt
