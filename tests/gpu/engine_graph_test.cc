// The CUDA-graph step (EngineOptions::cuda_graph, runtime/engine_graph.cc) against the same
// engine run eagerly. Oracle: the eager step, to the bit. The captured graph runs the same
// kernels on the same data, so every loss and every fp32 master weight must be identical. For
// that the eager run must itself be deterministic: one row of distinct tokens (the embedding's
// atomic gradient adds then never meet at an address), the deterministic attention backward,
// and gradient_clipping 0 (the clip factor then does not read the norm, whose double atomics
// may sum in another order). The learning rate changes every step (WarmupLR), so a graph that
// baked a step's lr or Adam's bias corrections in instead of reading them from device memory
// would drift from step 4 on; a step with padding targets (-100) changes the counted targets,
// which the graph's loss gradient depends on, and must capture again. With LoRA adapters (no
// dropout, the base frozen) the step captures the same way; with adapter dropout it is refused.
#include <cstring>
#include <numeric>
#include <vector>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"
#include "zt/tasks/lora.h"

namespace zt {
namespace {

constexpr int kSteps = 8;

// Step s's micro-batch: one row of 32 distinct tokens, its targets the next tokens; steps 5 and
// 6 leave their first 4 positions uncounted (-100).
void batch(int s, Tensor& tokens, Tensor& targets) {
  std::vector<int32_t> perm(97);
  std::iota(perm.begin(), perm.end(), 0);
  uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(s + 1);
  for (size_t i = perm.size() - 1; i > 0; --i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::swap(perm[i], perm[x % (i + 1)]);
  }
  tokens = Tensor::empty({1, 32}, DType::i32);
  targets = Tensor::empty({1, 32}, DType::i32);
  for (int t = 0; t < 32; ++t) {
    tokens.data<int32_t>()[t] = perm[t];
    targets.data<int32_t>()[t] = perm[t + 1];
  }
  const int skip = s == 5 || s == 6 ? 4 : 0;
  for (int t = 0; t < skip; ++t) targets.data<int32_t>()[t] = kIgnoreTarget;
}

struct GraphRun {
  std::vector<float> losses;
  std::vector<double> grad_norms;
  std::vector<double> master;
  int64_t replays = 0;
};

GraphRun train(const char* json, bool graph, bool lora = false) {
  GraphRun r;
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  nn::Gpt2 model(testing::small_gpt2_config(2));
  if (lora) {
    const Status st = tasks::lora_apply(model, {.r = 4, .alpha = 8.0f, .only_optimize = true});
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  auto e = initialize(model, *cfg, {.device = Device::cuda(0), .seed = 3, .cuda_graph = graph});
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return r;
  EXPECT_EQ((*e)->graph_refusal(), "");
  for (int s = 0; s < kSteps; ++s) {
    Tensor tokens, targets;
    batch(s, tokens, targets);
    const Status st = (*e)->train_batch(tokens, targets);
    EXPECT_TRUE(st.is_ok()) << st.message();
    r.losses.push_back(static_cast<float>((*e)->last_step()->loss));
    r.grad_norms.push_back((*e)->last_step()->grad_norm);
  }
  EXPECT_EQ((*e)->global_steps(), kSteps);
  r.master = testing::master_flat(**e);
  r.replays = (*e)->graph_replays();
  return r;
}

TEST(GpuEngineGraph, CapturedStepEqualsTheEagerStepBitwise) {
  ZT_SKIP_WITHOUT_CUDA();
  const char* kConfigs[] = {
      R"({"train_batch_size": 1, "bf16": {"enabled": true}, "gradient_clipping": 0,
          "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.01}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}})",
      R"({"train_batch_size": 1, "gradient_clipping": 0, "zero_optimization": {"stage": 2},
          "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}})",
  };
  for (const bool lora : {false, true}) {
    for (const char* json : kConfigs) {
      SCOPED_TRACE(json);
      SCOPED_TRACE(lora ? "LoRA r4, base frozen" : "full");
      const GraphRun eager = train(json, false, lora);
      const GraphRun graph = train(json, true, lora);
      ASSERT_EQ(graph.losses.size(), static_cast<size_t>(kSteps));
      // Steps 0-1 warm up, 2 captures, 3-4 replay, 5 captures again (fewer counted targets), 6
      // replays that graph, 7 captures again (all counted): every step from 2 on is a replay.
      EXPECT_EQ(graph.replays, kSteps - 2);
      for (int s = 0; s < kSteps; ++s) {
        uint32_t a = 0, b = 0;
        std::memcpy(&a, &eager.losses[s], 4);
        std::memcpy(&b, &graph.losses[s], 4);
        EXPECT_EQ(a, b) << "step " << s << ": eager " << eager.losses[s] << ", graph "
                        << graph.losses[s];
        EXPECT_NEAR(graph.grad_norms[s], eager.grad_norms[s], 1e-9 * eager.grad_norms[s]);
      }
      EXPECT_EQ(graph.master, eager.master);
      EXPECT_LT(graph.losses.back(), graph.losses.front());  // (it trains)
    }
  }
}

// A run the graph cannot capture says why and trains as without the option.
TEST(GpuEngineGraph, RefusedRunsTrainEagerly) {
  ZT_SKIP_WITHOUT_CUDA();
  auto cfg = config_parse(R"({"train_batch_size": 2, "gradient_accumulation_steps": 2,
                              "bf16": {"enabled": true}})",
                          "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  nn::Gpt2 model(testing::small_gpt2_config(2));
  auto e = initialize(model, *cfg, {.device = Device::cuda(0), .seed = 3, .cuda_graph = true});
  ASSERT_TRUE(e.is_ok());
  EXPECT_NE((*e)->graph_refusal().find("gradient_accumulation_steps is 2"), std::string::npos)
      << (*e)->graph_refusal();
  for (int s = 0; s < 6; ++s) {
    Tensor tokens, targets;
    batch(s, tokens, targets);
    ASSERT_TRUE((*e)->train_batch(tokens, targets).is_ok());
  }
  EXPECT_EQ((*e)->global_steps(), 3);
  EXPECT_EQ((*e)->graph_replays(), 0);
}

// LoRA dropout draws a new mask per step: such a run says so and trains eagerly.
TEST(GpuEngineGraph, LoraDropoutIsRefused) {
  ZT_SKIP_WITHOUT_CUDA();
  auto cfg = config_parse(R"({"train_batch_size": 1, "bf16": {"enabled": true}})", "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  nn::Gpt2 model(testing::small_gpt2_config(2));
  ASSERT_TRUE(tasks::lora_apply(model, {.r = 4, .dropout = 0.1f, .only_optimize = true}).is_ok());
  auto e = initialize(model, *cfg, {.device = Device::cuda(0), .seed = 3, .cuda_graph = true});
  ASSERT_TRUE(e.is_ok());
  EXPECT_NE((*e)->graph_refusal().find("lora_dropout > 0"), std::string::npos)
      << (*e)->graph_refusal();
  for (int s = 0; s < 4; ++s) {
    Tensor tokens, targets;
    batch(s, tokens, targets);
    ASSERT_TRUE((*e)->train_batch(tokens, targets).is_ok());
  }
  EXPECT_EQ((*e)->graph_replays(), 0);
}

}  // namespace
}  // namespace zt
