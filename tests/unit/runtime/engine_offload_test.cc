// zero_optimization.offload_optimizer through the config and the engine on the CPU: the config
// path accepts it (also as the deprecated cpu_offload), a CPU engine trains exactly as without it
// (its optimizer state is in host memory already; the oracle is the run without the key), and
// NVMe swaps at every stage (tests/unit/zero/optimizer_swap_test.cc trains with it). The GPU
// side (state really moved, same training) is tests/gpu/engine_offload_test.cc.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"
#include "zt/zero/zero_state.h"

namespace zt {
namespace {

std::string config_json(int stage, const std::string& offload) {
  return R"({"train_batch_size": 4, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}},
      "zero_optimization": {"stage": )" +
         std::to_string(stage) + offload + "}}";
}

testing::EngineRun train(const std::string& json) {
  return testing::train_tiny_gpt2(json, 6, 5, 300);  // 3 optimizer steps of 2 micro-batches
}

TEST(EngineOffload, CpuEngineTrainsExactlyAsWithoutOffload) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    const testing::EngineRun plain = train(config_json(stage, ""));
    ::testing::internal::CaptureStderr();
    const testing::EngineRun off = train(
        config_json(stage, R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})"));
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("optimizer state is already in host memory"), std::string::npos) << log;
    EXPECT_EQ(log.find("not implemented"), std::string::npos) << log;
    ASSERT_EQ(plain.losses.size(), 6u);
    EXPECT_EQ(off.losses, plain.losses);
    EXPECT_EQ(off.master, plain.master);
    EXPECT_EQ(off.bytes.total(), plain.bytes.total());
    EXPECT_EQ(off.bytes.host_total(), 0);
  }
}

TEST(EngineOffload, DeprecatedCpuOffloadKeyIsAccepted) {
  auto cfg = config_parse(config_json(2, R"(, "cpu_offload": true)"), "test", 1);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  EXPECT_EQ(cfg->zero.offload_optimizer.device, "cpu");
  nn::Gpt2 model(testing::tiny_gpt2_config());
  EXPECT_TRUE(initialize(model, *cfg, {.device = Device::cpu()}).is_ok());
}

TEST(EngineOffload, NvmeSwapsAtEveryStageAndMissingFoldersAreRefused) {
  // ZeRO-Infinity's optimizer swap at stages 1-3 (DeepSpeed would keep stages 1-2 in host
  // memory: naming an nvme_path asks for the disk here, docs/zero.md). A folder that does not
  // exist is refused before any work, naming the key and the path.
  testing::TempDir dir("zt_engine_nvme");
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    auto cfg = config_parse(
        config_json(stage, fmt::format(R"(, "offload_optimizer": {{"device": "nvme",
                                           "nvme_path": "{}"}})",
                                       dir.path().string())),
        "test", 1);
    ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
    nn::Gpt2 model(testing::tiny_gpt2_config());
    auto e = initialize(model, *cfg, {.device = Device::cpu()});
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    EXPECT_NE((*e)->zero_state().swap(), nullptr);
    EXPECT_GT((*e)->model_state_bytes().nvme, 0);
  }
  auto cfg = config_parse(
      config_json(3, R"(, "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme_x"})"),
      "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  nn::Gpt2 model(testing::tiny_gpt2_config());
  std::string msg;
  try {
    auto e = initialize(model, *cfg, {.device = Device::cpu()});
    ASSERT_FALSE(e.is_ok());
    msg = e.status().message();
  } catch (const std::exception& ex) {
    msg = ex.what();
  }
  EXPECT_NE(msg.find("zero_optimization.offload_optimizer.nvme_path"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/local_nvme_x"), std::string::npos) << msg;
}

}  // namespace
}  // namespace zt
