// Activation checkpointing (nn/model.h, Context::checkpoint_activations): training with it gives
// bit-for-bit the losses and weights of training without it on the CPU (the same kernels rerun on
// the same inputs), at ZeRO stages 0 and 3 (whose hooks gather parameters again before the
// recompute; stage 3 also keeps the inputs on the host); and the peak of allocated memory is lower.
#include <gtest/gtest.h>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/registry.h"
#include "zt/nn/models/transformer.h"
#include "zt/runtime/config.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

struct TrainRun {
  std::vector<double> losses, weights;
  size_t peak = 0;
};

TrainRun train(bool checkpoint, int stage, bool to_host = false, int64_t seq = 32) {
  TrainRun out;
  const std::string json = fmt::format(
      R"({{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {{"stage": {}}},
          "activation_checkpointing": {{"cpu_checkpointing": {}}},
          "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}}}})",
      stage, to_host ? "true" : "false");
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  auto mc = nn::model_config_named("llama-tiny");
  EXPECT_TRUE(mc.is_ok());
  nn::Transformer model(*mc);
  auto e = initialize(model, *cfg,
                      {.device = Device::cpu(), .seed = 5, .activation_checkpointing = checkpoint});
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  allocator_reset_peak(Device::cpu());
  for (int s = 0; s < 2; ++s) {
    auto loss = (*e)->forward(testing::random_ints({4, seq}, 257, 10 + s),
                              testing::random_ints({4, seq}, 257, 20 + s));
    EXPECT_TRUE(loss.is_ok());
    EXPECT_TRUE((*e)->backward(*loss).is_ok());
    EXPECT_TRUE((*e)->step().is_ok());
    out.losses.push_back(*loss);
  }
  out.peak = allocator_stats(Device::cpu()).peak_allocated_bytes;
  out.weights = testing::master_flat(**e);
  return out;
}

TEST(ActivationCheckpointing, SameLossesAndWeightsBitForBit) {
  for (int stage : {0, 3}) {
    const TrainRun plain = train(false, stage), ckpt = train(true, stage, /*to_host=*/stage == 3);
    EXPECT_EQ(plain.losses, ckpt.losses) << "stage " << stage;
    EXPECT_EQ(plain.weights, ckpt.weights) << "stage " << stage;
  }
}

TEST(ActivationCheckpointing, LowersThePeakOfAllocatedMemory) {
  const TrainRun plain = train(false, 0, false, 128), ckpt = train(true, 0, false, 128);
  EXPECT_LT(ckpt.peak, plain.peak);
  std::printf("peak allocated: %zu bytes without, %zu with checkpointing (%.2fx)\n", plain.peak,
              ckpt.peak, static_cast<double>(plain.peak) / static_cast<double>(ckpt.peak));
}

}  // namespace
}  // namespace zt
