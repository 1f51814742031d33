// zt eval's loss against transformers' on the fixtures (tests/fixtures/hf): the rows of
// expected.safetensors as examples (padding, -100 labels, token types), batched at several
// sizes, give the loss transformers computed, to 1e-5.
#include <gtest/gtest.h>

#include "zt/checkpoint/safetensors.h"
#include "zt/checkpoint/hf_weights.h"
#include "zt/runtime/inference.h"
#include "zt/tasks/lm_loss.h"

namespace zt::tasks {
namespace {

const std::string kFixtures = ZT_SOURCE_DIR "/tests/fixtures/hf/";

std::vector<int32_t> read_i32(const ckpt::SafetensorsFile& f, const std::string& name) {
  auto e = f.find(name);
  if (!e.is_ok()) return {};
  std::vector<int32_t> v(static_cast<size_t>((*e)->numel));
  EXPECT_TRUE(f.read(name, 0, (*e)->numel, v.data()).is_ok());
  return v;
}

class LossFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(LossFixture, MeanOverCountedTokensEqualsTransformers) {
  const std::string dir = kFixtures + GetParam();
  auto m = ckpt::load_hf_model(dir);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  auto w = InferenceWeights::bind(*m->model, Device::cpu(), DType::f32);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  auto ex = ckpt::SafetensorsFile::open(dir + "/expected.safetensors");
  ASSERT_TRUE(ex.is_ok());
  const auto ids = read_i32(*ex, "input_ids"), labels = read_i32(*ex, "labels"),
             mask = read_i32(*ex, "attention_mask"), types = read_i32(*ex, "token_type_ids");
  float expected = 0;
  ASSERT_TRUE(ex->read("loss", 0, 1, &expected).is_ok());
  const int64_t T = (*ex->find("input_ids"))->shape[1], B = static_cast<int64_t>(ids.size()) / T;
  // Each row as a user's JSON Lines would give it: padding cut off (transformers' mask says where).
  std::vector<TokenExample> examples;
  for (int64_t b = 0; b < B; ++b) {
    TokenExample e;
    for (int64_t t = 0; t < T; ++t) {
      e.input_ids.push_back(ids[b * T + t]);
      e.labels.push_back(labels[b * T + t]);
      e.attention_mask.push_back(mask[b * T + t]);
      if (!types.empty()) e.token_type_ids.push_back(types[b * T + t]);
    }
    examples.push_back(e);
  }
  const nn::Task task = m->model->transformer_config().task;
  for (int64_t micro : {1, 2}) {
    LossSum sum;
    for (const LmBatch& b : lm_batches(examples, micro, task)) {
      lm_loss_accumulate(*m->model, w->context(), b, sum);
    }
    EXPECT_NEAR(sum.mean(), expected, 1e-5 * std::abs(expected)) << "micro-batch " << micro;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LossFixture,
                         ::testing::Values("gpt2", "llama", "qwen2", "opt", "bert_mlm"),
                         [](const auto& info) { return std::string(info.param); });

TEST(LmBatches, CausalTargetsShiftAndPaddingIsNotCounted) {
  std::vector<TokenExample> ex(2);
  ex[0].input_ids = {5, 6, 7};
  ex[1].input_ids = {8, 9};
  ex[1].labels = {-100, 3};
  auto b = lm_batches(ex, 2, nn::Task::kCausalLM);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].T, 3);
  EXPECT_EQ(b[0].targets, (std::vector<int32_t>{6, 7, -100, 3, -100, -100}));
  EXPECT_EQ(b[0].attention_mask, (std::vector<int32_t>{1, 1, 1, 1, 1, 0}));
  EXPECT_TRUE(b[0].padded);
  auto mlm = lm_batches(ex, 1, nn::Task::kMaskedLM);
  ASSERT_EQ(mlm.size(), 2u);
  EXPECT_EQ(mlm[1].targets, (std::vector<int32_t>{-100, 3}));
}

}  // namespace
}  // namespace zt::tasks
