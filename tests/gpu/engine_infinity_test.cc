// ZeRO-Infinity on one GPU: offload_param (cpu, nvme) at stage 3 together with offload_optimizer
// (cpu, nvme). The oracle is the stage-3 run with everything on the GPU. Parameter offload only
// moves the 16-bit chunks between the GPU, host memory and a file (byte copies: no arithmetic),
// and the optimizer swap moves the fp32 state the same way, so the runs differ exactly as the
// optimizer offload alone does (tests/gpu/engine_offload_test.cc derives those bounds: the CPU
// Adam kernel's few-ulp difference from the GPU's, and the GPU's atomic gradient sums): fp32
// losses within 1e-5 relative and masters within 2e-5 (relative L2 norm); bf16 within 2e-3 and
// 1e-2. A chunk gathered from the wrong place, a stale chunk (an update not written back), or a
// piece written to the wrong offset of the parameter file is an O(1) error. The GPU must hold no
// 16-bit chunk of a sharded unit at rest, by the engine's count and the allocator's.
#include <cmath>
#include <string>
#include <vector>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

constexpr int kSteps = 5;

struct Trained {
  std::vector<double> losses;
  std::vector<double> master;
  zero::ModelStateBytes bytes;
  size_t device_bytes = 0;  // device allocator's live bytes added by initialize()
};

// opt / param: "" (none), "cpu" or "nvme" (under `nvme`).
std::string config_json(const std::string& precision, const std::string& opt,
                        const std::string& param, const std::string& nvme) {
  std::string zero = R"("stage": 3, "stage3_param_persistence_threshold": 0,
                        "sub_group_size": 5000)";
  auto block = [&](const std::string& dev, bool optimizer) {
    if (dev != "nvme") return std::string(R"({"device": "cpu", "pin_memory": true})");
    return fmt::format(R"({{"device": "nvme", "nvme_path": "{}"{}}})", nvme,
                       optimizer ? R"(, "pipeline_read": true, "pipeline_write": true)" : "");
  };
  if (!opt.empty()) zero += R"(, "offload_optimizer": )" + block(opt, true);
  if (!param.empty()) zero += R"(, "offload_param": )" + block(param, false);
  return R"({"train_batch_size": 4, "gradient_clipping": 0.05,
             "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}}, )" +
         precision + R"(, "zero_optimization": {)" + zero + "}}";
}

Trained train(const std::string& json) {
  Trained out;
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  if (!cfg.is_ok()) return out;
  nn::Gpt2 model(testing::small_gpt2_config(2));
  device_synchronize(Device::cuda(0));
  const size_t before = allocator_stats(Device::cuda(0)).allocated_bytes;
  auto e = initialize(model, *cfg, {.device = Device::cuda(0), .seed = 9});
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  if (!e.is_ok()) return out;
  out.device_bytes = allocator_stats(Device::cuda(0)).allocated_bytes - before;
  out.bytes = (*e)->model_state_bytes();
  for (int s = 0; s < kSteps; ++s) {
    Tensor tok = testing::random_ints({4, 32}, 97, 100 + s);
    Tensor tgt = testing::random_ints({4, 32}, 97, 200 + s);
    auto loss = (*e)->forward(tok, tgt);
    EXPECT_TRUE(loss.is_ok());
    if (!loss.is_ok()) return out;
    EXPECT_TRUE((*e)->backward(*loss).is_ok());
    const Status st = (*e)->step();
    EXPECT_TRUE(st.is_ok()) << st.message();
    out.losses.push_back(*loss);
  }
  out.master = testing::master_flat(**e);
  return out;
}

void expect_infinity_matches(const std::string& precision, double loss_rtol, double master_rtol) {
  testing::TempDir dir("zt_infinity");
  const std::string nvme = dir.path().string();
  const Trained plain = train(config_json(precision, "", "", nvme));
  ASSERT_EQ(plain.losses.size(), static_cast<size_t>(kSteps));
  const bool bf16 = precision.find("true") != std::string::npos;
  for (const auto& [opt, param] : {std::pair<std::string, std::string>{"cpu", "cpu"},
                                   {"cpu", "nvme"},
                                   {"nvme", "nvme"},
                                   {"nvme", "cpu"}}) {
    SCOPED_TRACE("offload_optimizer " + opt + ", offload_param " + param);
    const Trained off = train(config_json(precision, opt, param, nvme));
    ASSERT_EQ(off.losses.size(), static_cast<size_t>(kSteps));
    testing::expect_close(off.losses, plain.losses, 0, loss_rtol, "losses");
    ASSERT_EQ(off.master.size(), plain.master.size());
    EXPECT_LE(testing::rel_l2(off.master, plain.master), master_rtol);
    // Every unit is sharded (threshold 0) and its chunk rests off the GPU.
    EXPECT_EQ(off.bytes.params, 0);
    EXPECT_EQ(off.bytes.master + off.bytes.optimizer, 0);
    const auto esize = bf16 ? 2 : 4;
    if (param == "cpu") {
      EXPECT_GT(off.bytes.host_params, 0);
      EXPECT_EQ(off.bytes.host_params % esize, 0);
    } else {
      EXPECT_EQ(off.bytes.host_params, 0);
      EXPECT_GT(off.bytes.nvme, 0);
    }
    // By the allocator's count: initialize() left at most the gradients' shards (and a few
    // small blocks) on the GPU.
    EXPECT_LE(off.device_bytes, static_cast<size_t>(off.bytes.grads) + 512 * 64);
  }
}

TEST(GpuInfinity, Fp32MatchesStage3OnTheGpu) {
  ZT_SKIP_WITHOUT_CUDA();
  expect_infinity_matches(R"("bf16": {"enabled": false})", 1e-5, 2e-5);
}

TEST(GpuInfinity, Bf16MatchesStage3OnTheGpu) {
  ZT_SKIP_WITHOUT_CUDA();
  expect_infinity_matches(R"("bf16": {"enabled": true})", 2e-3, 1e-2);
}

}  // namespace
}  // namespace zt
