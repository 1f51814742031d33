// A Llama-shaped model (rotary positions, grouped-query heads: 4 query and 2 key/value heads of
// size 64, so the GPU takes the fused attention that reads the kv heads in place, with q and k
// rotated in place) trained on the GPU in bf16 against the same training on the CPU in f32
// (the unfused attention over expanded heads): the same losses within the rounding of 16-bit
// activations. One batch (each target the token before it) is learnt by heart, so the losses fall
// well below ln(V) within the run and a wrong gradient anywhere shows in the trajectory.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "zt/nn/hf/hf_config.h"
#include "zt/nn/models/transformer.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

nn::TransformerConfig llama_config() {
  const nlohmann::json j = {
      {"model_type", "llama"},          {"architectures", {"LlamaForCausalLM"}},
      {"num_hidden_layers", 2},         {"num_attention_heads", 4},
      {"num_key_value_heads", 2},       {"hidden_size", 256},
      {"intermediate_size", 512},       {"vocab_size", 128},
      {"max_position_embeddings", 256}, {"rope_theta", 10000.0},
      {"rms_norm_eps", 1e-5},           {"hidden_act", "silu"},
      {"tie_word_embeddings", false},   {"initializer_range", 0.02}};
  auto c = nn::transformer_config_from_hf(j, "llama-test");
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return *c;
}

std::vector<double> train(Device device, const std::string& precision, int steps) {
  nn::Transformer model(llama_config());
  auto cfg = config_parse(R"({"train_batch_size": 4, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.004}}, )" +
                              precision + "}",
                          "test", 1);
  EXPECT_TRUE(cfg.is_ok());
  auto e = initialize(model, *cfg, {.device = device, .seed = 5});
  EXPECT_TRUE(e.is_ok());
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    Tensor tok = testing::random_ints({4, 64}, 128, 300);  // one batch, learnt by heart
    // Target t is token t - 1 (the first position copies its own token).
    std::vector<int32_t> t(tok.data<int32_t>(), tok.data<int32_t>() + tok.numel());
    std::vector<int32_t> tgt(t.size());
    for (size_t i = 0; i < t.size(); ++i) tgt[i] = i % 64 == 0 ? t[i] : t[i - 1];
    Tensor tgt_t = Tensor::empty({4, 64}, DType::i32);
    std::copy(tgt.begin(), tgt.end(), tgt_t.data<int32_t>());
    auto loss = (*e)->forward(tok, tgt_t);
    EXPECT_TRUE(loss.is_ok());
    EXPECT_TRUE((*e)->backward(*loss).is_ok());
    EXPECT_TRUE((*e)->step().is_ok());
    losses.push_back(*loss);
  }
  return losses;
}

TEST(GpuEngineLlama, Bf16FusedGroupedQueryAttentionTracksCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  const std::vector<double> cpu = train(Device::cpu(), R"("bf16": {"enabled": false})", 12);
  const std::vector<double> gpu = train(Device::cuda(0), R"("bf16": {"enabled": true})", 12);
  EXPECT_LT(cpu.back(), cpu.front() - 1.0) << "the task should be learnt";
  testing::expect_close(gpu, cpu, 5e-2, 2e-2, "bf16 GPU losses against the f32 CPU's");
}

}  // namespace
}  // namespace zt
