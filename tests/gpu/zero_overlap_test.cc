// ZeRO on one GPU with gradient buckets and the communication stream (src/zt/zero/comm_lane.h,
// zero_reduce.cc): every stage trained with overlap_comm on and small reduce buckets gives the
// run with overlap_comm off (collectives on the compute stream, one per unit's bucket of its
// own), and both give the CPU reference. With one rank the collectives are the stub's copies,
// but they run on the communication stream with the same events and allocator marks as NCCL's:
// a missing wait or a block reused too early shows up as wrong gradients or parameters. (The
// two-GPU NCCL run is scripts/gpu_dist_check.sh part b.)
#include <string>
#include <vector>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

struct Result {
  std::vector<double> losses;
  std::vector<double> params;
};

Result train(Device device, int stage, const std::string& zero_extra) {
  const nn::Gpt2Config c = testing::small_gpt2_config(3);
  nn::Gpt2 model(c);
  std::string json = R"({"train_batch_size": 8, "gradient_accumulation_steps": 2,
      "gradient_clipping": 1.0, "zero_allow_untested_optimizer": true,
      "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}},
      "zero_optimization": {"stage": )" +
                     std::to_string(stage) + R"(, "stage3_param_persistence_threshold": 1000)" +
                     zero_extra + "}}";
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  auto e = initialize(model, *cfg, {.device = device, .seed = 5});
  EXPECT_TRUE(e.is_ok());
  Result r;
  for (int s = 0; s < 8; ++s) {
    Tensor tok = testing::random_ints({4, 32}, c.vocab_size, 300 + s);
    Tensor tgt = testing::random_ints({4, 32}, c.vocab_size, 400 + s);
    auto loss = (*e)->forward(tok, tgt);
    EXPECT_TRUE(loss.is_ok());
    EXPECT_TRUE((*e)->backward(*loss).is_ok());
    EXPECT_TRUE((*e)->step().is_ok());
    r.losses.push_back(*loss);
  }
  auto master = (*e)->gather_master();
  EXPECT_TRUE(master.is_ok());
  for (const Tensor& t : *master) {
    std::vector<double> v = t.to_doubles();
    r.params.insert(r.params.end(), v.begin(), v.end());
  }
  return r;
}

TEST(GpuZeroOverlap, BucketsOnTheCommStreamGiveTheSerialRunAndTheCpu) {
  ZT_SKIP_WITHOUT_CUDA();
  // Units in backward order: head (128 elements), 3 blocks (~50k each), embedding (10240).
  // 70000 gives the buckets [head, block 2], [block 1], [block 0, embedding]; 1000 makes every
  // unit but the head larger than the bucket; 5e8 (the default) is one bucket for all.
  for (int stage = 0; stage <= 3; ++stage) {
    Result cpu = train(Device::cpu(), stage, "");
    Result serial =
        train(Device::cuda(0), stage, R"(, "overlap_comm": false, "reduce_bucket_size": 1000)");
    for (const char* bucket : {"70000", "1000", "500000000"}) {
      Result overlap =
          train(Device::cuda(0), stage,
                std::string(R"(, "overlap_comm": true, "reduce_bucket_size": )") + bucket);
      const std::string what = "stage " + std::to_string(stage) + " bucket " + bucket;
      testing::expect_close(overlap.losses, serial.losses, 1e-6, 1e-5, (what + " losses").c_str());
      testing::expect_close(overlap.params, serial.params, 1e-6, 1e-5, (what + " params").c_str());
    }
    testing::expect_close(serial.losses, cpu.losses, 1e-4, 1e-4,
                          ("stage " + std::to_string(stage) + " vs cpu").c_str());
    testing::expect_close(serial.params, cpu.params, 1e-4, 1e-4,
                          ("stage " + std::to_string(stage) + " params vs cpu").c_str());
  }
}

}  // namespace
}  // namespace zt
