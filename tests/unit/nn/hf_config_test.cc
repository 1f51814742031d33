// config.json <-> TransformerConfig: hf_config_from_transformer is the inverse of the reader for
// every fixture transformers wrote (4.x and 5.x keys), and writes settings as the decimals a
// person wrote (1e-05), not as widened floats.
#include <gtest/gtest.h>

#include <fstream>

#include "zt/nn/hf/hf_config.h"

namespace zt::nn {
namespace {

const std::string kFixtures = ZT_SOURCE_DIR "/tests/fixtures/hf/";

void expect_same(const TransformerConfig& a, const TransformerConfig& b) {
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.task, b.task);
  EXPECT_EQ(a.num_labels, b.num_labels);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.n_kv_head, b.n_kv_head);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.inner, b.inner);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_positions, b.max_positions);
  EXPECT_EQ(a.norm, b.norm);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.placement, b.placement);
  EXPECT_EQ(a.final_norm, b.final_norm);
  EXPECT_EQ(a.act, b.act);
  EXPECT_EQ(a.gated, b.gated);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.out_bias, b.out_bias);
  EXPECT_EQ(a.mlp_bias, b.mlp_bias);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.position_offset, b.position_offset);
  EXPECT_EQ(a.rope.type, b.rope.type);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.rope.original_max_positions, b.rope.original_max_positions);
  EXPECT_EQ(a.tied, b.tied);
  EXPECT_EQ(a.embed_dim, b.embed_dim);
  EXPECT_EQ(a.type_vocab, b.type_vocab);
  EXPECT_EQ(a.embed_norm, b.embed_norm);
  EXPECT_EQ(a.init_std, b.init_std);
}

class HfConfigFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfConfigFixture, WrittenConfigReadsBackToTheSameModel) {
  std::ifstream in(kFixtures + GetParam() + "/config.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  auto a = transformer_config_from_hf(j, GetParam());
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  const nlohmann::json written = hf_config_from_transformer(*a);
  auto b = transformer_config_from_hf(written, "written");
  ASSERT_TRUE(b.is_ok()) << b.status().message() << "\n" << written.dump(2);
  expect_same(*a, *b);
}

INSTANTIATE_TEST_SUITE_P(Families, HfConfigFixture,
                         ::testing::Values("gpt2", "llama", "llama_tied_mqa", "qwen2", "opt",
                                           "opt_postln", "bert_mlm", "bert_cls"),
                         [](const auto& info) { return std::string(info.param); });

TEST(HfConfig, SettingsAreWrittenAsDecimals) {
  TransformerConfig c;
  c.model_type = "llama";
  c.n_layer = 1;
  c.n_head = c.n_kv_head = 2;
  c.hidden = 8;
  c.head_dim = 4;
  c.inner = 8;
  c.vocab_size = 10;
  c.max_positions = 16;
  c.norm_eps = 1e-5f;
  c.init_std = 0.02f;
  const nlohmann::json j = hf_config_from_transformer(c);
  EXPECT_EQ(j["rms_norm_eps"].dump(), "1e-05");
  EXPECT_EQ(j["initializer_range"].dump(), "0.02");
}

}  // namespace
}  // namespace zt::nn
