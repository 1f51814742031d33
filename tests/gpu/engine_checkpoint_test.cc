// Checkpoints on one GPU: an engine trained a few steps saves; another engine (other initial
// values, one step of other data trained) loads. Oracle 1, exact: the loaded fp32 master weights, step counters and loss scale
// equal the saved engine's bit for bit, and so does the first forward's loss on the same batch
// (the compute copy rebuilt from the master, through every path: 16-bit cast, stage-3 shards
// cast at each gather, offloaded host masters). Oracle 2, the continuation: both engines then
// train on the same batches; the GPU kernels sum some gradients with atomics (embedding,
// layernorm, bias), so two runs are not bitwise equal even without a checkpoint, and the losses
// are compared with the tolerances tests/gpu/engine_offload_test.cc derives for that noise
// (fp32 1e-5 relative, 16-bit 2e-3). A lost optimizer state or step count is an O(1) change
// (Adam's bias correction alone moves the first update by a factor of ~3).
#include <string>
#include <vector>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

struct Case {
  const char* name;
  const char* json;
  double rtol;
};

const Case kCases[] = {
    {"bf16 stage 0", R"({"train_batch_size": 4, "bf16": {"enabled": true}})", 2e-3},
    {"fp32 stage 2", R"({"train_batch_size": 4, "zero_optimization": {"stage": 2}})", 1e-5},
    {"bf16 stage 3",
     R"({"train_batch_size": 4, "bf16": {"enabled": true},
         "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}})",
     2e-3},
    {"bf16 stage 2 offload",
     R"({"train_batch_size": 4, "bf16": {"enabled": true},
         "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})",
     2e-3},
    {"fp16 stage 1",
     R"({"train_batch_size": 4, "fp16": {"enabled": true, "initial_scale_power": 12, "loss_scale_window": 2},
         "zero_optimization": {"stage": 1}})",
     2e-3},
};

float train_step(Engine& e, uint64_t seed) {
  Tensor tk = testing::random_ints({4, 32}, 97, seed);
  Tensor tg = testing::random_ints({4, 32}, 97, seed + 1);
  auto loss = e.forward(tk, tg);
  EXPECT_TRUE(loss.is_ok()) << loss.status().message();
  EXPECT_TRUE(e.backward(*loss).is_ok());
  EXPECT_TRUE(e.step().is_ok());
  return *loss;
}

TEST(GpuEngineCheckpoint, LoadRestoresExactlyAndTrainingContinues) {
  ZT_SKIP_WITHOUT_CUDA();
  const nn::Gpt2Config mc = testing::small_gpt2_config(2);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    testing::TempDir dir;
    auto cfg = config_parse(c.json, "test", 1);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    nn::Gpt2 m1(mc), m2(mc);
    auto e1 = initialize(m1, *cfg, {.device = Device::cuda(0), .seed = 1});
    auto e2 = initialize(m2, *cfg, {.device = Device::cuda(0), .seed = 99});
    ASSERT_TRUE(e1.is_ok() && e2.is_ok());
    for (int s = 0; s < 4; ++s) train_step(**e1, 100 + 2 * s);
    ASSERT_TRUE((*e1)->save_checkpoint(dir.path().string()).is_ok());
    // The loading engine has trained a step of its own first: at stage 3 the next forward's
    // first gather is then already in flight with its own weights (prefetch_next_forward), and
    // the load must drop it.
    train_step(**e2, 7);
    auto loaded = (*e2)->load_checkpoint(dir.path().string());
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    EXPECT_EQ(testing::master_flat(**e2), testing::master_flat(**e1));
    EXPECT_EQ((*e2)->global_steps(), (*e1)->global_steps());
    EXPECT_EQ((*e2)->loss_scale(), (*e1)->loss_scale());
    EXPECT_EQ((*e2)->lr(), (*e1)->lr());
    for (int s = 0; s < 4; ++s) {
      const float a = train_step(**e1, 200 + 2 * s), b = train_step(**e2, 200 + 2 * s);
      if (s == 0) {
        EXPECT_EQ(a, b) << "the first forward after the load";
      } else {
        EXPECT_NEAR(b, a, c.rtol * std::abs(a)) << "step " << s;
      }
    }
    EXPECT_EQ((*e2)->global_steps(), (*e1)->global_steps());
  }
}

}  // namespace
}  // namespace zt
