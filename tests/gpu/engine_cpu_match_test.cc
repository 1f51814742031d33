// The whole training step on the GPU against the CPU reference: a tiny GPT-2 trained for a few
// steps on the same data from the same initial weights gives the same losses (fp32: to 1e-4;
// bf16: within the rounding of 16-bit activations, 3e-2 absolute on losses near ln(V)).
#include <cmath>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

std::vector<double> losses_on(Device device, const std::string& precision, int steps) {
  const nn::Gpt2Config c = testing::small_gpt2_config(2);
  nn::Gpt2 model(c);
  std::string json = R"({"train_batch_size": 4, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}}, )" +
                     precision + "}";
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok());
  auto e = initialize(model, *cfg, {.device = device, .seed = 9});
  EXPECT_TRUE(e.is_ok());
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) {
    Tensor tok = testing::random_ints({4, 32}, c.vocab_size, 100 + s);
    Tensor tgt = testing::random_ints({4, 32}, c.vocab_size, 200 + s);
    auto loss = (*e)->forward(tok, tgt);
    EXPECT_TRUE(loss.is_ok());
    EXPECT_TRUE((*e)->backward(*loss).is_ok());
    EXPECT_TRUE((*e)->step().is_ok());
    out.push_back(*loss);
  }
  return out;
}

TEST(GpuEngine, Fp32LossesMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  auto cpu = losses_on(Device::cpu(), R"("bf16": {"enabled": false})", 6);
  auto gpu = losses_on(Device::cuda(0), R"("bf16": {"enabled": false})", 6);
  testing::expect_close(gpu, cpu, 1e-4, 1e-4, "fp32 losses");
}

TEST(GpuEngine, Bf16LossesTrackCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  auto cpu = losses_on(Device::cpu(), R"("bf16": {"enabled": false})", 6);
  auto gpu = losses_on(Device::cuda(0), R"("bf16": {"enabled": true})", 6);
  testing::expect_close(gpu, cpu, 3e-2, 0, "bf16 losses");
}

TEST(GpuEngine, Fp16WithDynamicScaleTracksCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  auto cpu = losses_on(Device::cpu(), R"("bf16": {"enabled": false})", 6);
  auto gpu =
      losses_on(Device::cuda(0), R"("fp16": {"enabled": true, "initial_scale_power": 12})", 6);
  testing::expect_close(gpu, cpu, 2e-2, 0, "fp16 losses");
}

TEST(GpuEngine, NoDeviceAllocationAfterFirstStep) {
  ZT_SKIP_WITHOUT_CUDA();
  const nn::Gpt2Config c = testing::small_gpt2_config(2);
  nn::Gpt2 model(c);
  auto cfg = config_parse(R"({"train_batch_size": 4, "bf16": {"enabled": true}})", "t", 1);
  ASSERT_TRUE(cfg.is_ok());
  auto e = initialize(model, *cfg, {.device = Device::cuda(0)});
  ASSERT_TRUE(e.is_ok());
  size_t allocs_after_first = 0;
  for (int s = 0; s < 4; ++s) {
    Tensor tok = testing::random_ints({4, 32}, c.vocab_size, s);
    auto loss = (*e)->forward(tok, tok);
    ASSERT_TRUE(loss.is_ok());
    EXPECT_TRUE((*e)->backward(*loss).is_ok());
    ASSERT_TRUE((*e)->step().is_ok());
    if (s == 1) allocs_after_first = allocator_stats(Device::cuda(0)).system_allocs;
  }
  EXPECT_EQ(allocator_stats(Device::cuda(0)).system_allocs, allocs_after_first);
}

}  // namespace
}  // namespace zt
