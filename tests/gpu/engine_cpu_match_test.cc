// The whole training step on the GPU against the CPU reference: a tiny GPT-2 trained for a few
// steps on the same data from the same initial weights gives the same losses (fp32: to 1e-4;
// bf16: within the rounding of 16-bit activations, 3e-2 absolute on losses near ln(V)). In fp32 the
// step's reported loss and gradient norm (computed on the device with the clip factor, nothing read
// back before the optimizer; the CPU's on the host) match too; the clipping threshold (0.05) is
// below the norms, so clipping acts.
#include <cmath>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

struct TrainRun {
  std::vector<double> losses, step_losses, norms;
};

TrainRun run_on(Device device, const std::string& precision, int steps) {
  const nn::Gpt2Config c = testing::small_gpt2_config(2);
  nn::Gpt2 model(c);
  std::string json = R"({"train_batch_size": 4, "gradient_clipping": 0.05,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}}, )" +
                     precision + "}";
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok());
  auto e = initialize(model, *cfg, {.device = device, .seed = 9});
  EXPECT_TRUE(e.is_ok());
  TrainRun out;
  for (int s = 0; s < steps; ++s) {
    Tensor tok = testing::random_ints({4, 32}, c.vocab_size, 100 + s);
    Tensor tgt = testing::random_ints({4, 32}, c.vocab_size, 200 + s);
    auto loss = (*e)->forward(tok, tgt);
    EXPECT_TRUE(loss.is_ok());
    EXPECT_TRUE((*e)->backward(*loss).is_ok());
    EXPECT_TRUE((*e)->step().is_ok());
    out.losses.push_back(*loss);
    const auto& st = (*e)->last_step();
    EXPECT_TRUE(st.has_value());
    out.step_losses.push_back(st ? st->loss : -1);
    out.norms.push_back(st ? st->grad_norm : -1);
  }
  return out;
}

std::vector<double> losses_on(Device device, const std::string& precision, int steps) {
  return run_on(device, precision, steps).losses;
}

TEST(GpuEngine, Fp32LossesMatchCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  const TrainRun cpu = run_on(Device::cpu(), R"("bf16": {"enabled": false})", 6);
  const TrainRun gpu = run_on(Device::cuda(0), R"("bf16": {"enabled": false})", 6);
  testing::expect_close(gpu.losses, cpu.losses, 1e-4, 1e-4, "fp32 losses");
  testing::expect_close(gpu.step_losses, cpu.losses, 1e-4, 1e-4, "the steps' losses");
  testing::expect_close(gpu.norms, cpu.norms, 1e-4, 1e-4, "gradient norms");
  EXPECT_GT(cpu.norms[0], 0.05) << "the first step's norm should be clipped";
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
