// The engine's pre-flight check of model state on a real GPU (zero::model_state_fit_error, run
// by the Engine before it allocates anything): a model whose state alone is larger than the GPU
// is refused with GpuOutOfMemory and the numbers, and the device allocator's live bytes do not
// move. The oracle for the figure is docs/zero.md's closed form: stage 0 in bf16 with AdamW holds
// 2 + 4 + 4 + 8 = 18 bytes a parameter (padded to multiples of 64 elements per unit). The same for
// offloaded optimizer state against the host's available memory (zero::host_state_fit_error):
// fp32 master 4 + Adam moments 8 = 12 bytes a parameter on the host.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "common/fake_world_comm.h"
#include "common/test_util.h"
#include "zt/core/host_memory.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

TEST(GpuEngineMemoryCheck, ModelStateLargerThanTheGpuIsRefusedBeforeAllocating) {
  ZT_SKIP_WITHOUT_CUDA();
  // gpt-65b at stage 0 on one GPU: 18 bytes x 65B parameters, over a terabyte.
  auto c = nn::gpt2_config_named("gpt-65b");
  ASSERT_TRUE(c.is_ok());
  nn::Gpt2 model(*c);
  auto cfg = config_parse(
      R"({"train_batch_size": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 0}})",
      "test", 1);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  double padded = 0;
  for (auto& u : model.units()) padded += static_cast<double>((u->flat_numel() + 63) / 64 * 64);
  const std::string want =
      fmt::format("needs {:.1f} GiB per GPU at ZeRO stage 0 on 1 rank(s)", 18 * padded / (1 << 30));
  device_synchronize(Device::cuda(0));
  const size_t before = allocator_stats(Device::cuda(0)).allocated_bytes;
  std::string message;
  try {
    auto e = initialize(model, *cfg, {.device = Device::cuda(0), .seed = 1});
    ADD_FAILURE() << "a 65B model at stage 0 was not refused: "
                  << (e.is_ok() ? "engine built" : e.status().message());
  } catch (const GpuOutOfMemory& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(want), std::string::npos) << message << "\nwanted: " << want;
  EXPECT_NE(message.find("ZeRO stage 3 needs"), std::string::npos) << message;
  EXPECT_EQ(allocator_stats(Device::cuda(0)).allocated_bytes, before);
}

// One rank of a world of 64 on this host (a communicator whose collectives do nothing, so the
// engine's all-reduce of the spare memory returns this rank's own figure): gpt-65b at stage 3
// with offload_optimizer keeps 12 bytes a parameter on the host over the 64 ranks, about 725 GiB,
// more than any host here has; its GPU share (6 bytes a parameter / 64, 6 GiB) fits.
TEST(GpuEngineMemoryCheck, OffloadLargerThanTheHostIsRefusedBeforeAllocating) {
  ZT_SKIP_WITHOUT_CUDA();
  auto c = nn::gpt2_config_named("gpt-65b");
  ASSERT_TRUE(c.is_ok());
  nn::Gpt2 model(*c);
  constexpr int kWorld = 64;
  double padded = 0;
  for (auto& u : model.units()) {
    padded +=
        static_cast<double>((u->flat_numel() + 64 * kWorld - 1) / (64 * kWorld) * 64 * kWorld);
  }
  const double host_need = 12 * padded;
  const HostMemory host = host_memory();
  if (host.available <= 0 || host_need <= static_cast<double>(host.available)) {
    GTEST_SKIP() << "this host has " << host.available << " bytes available, not less than "
                 << host_need;
  }
  auto cfg = config_parse(
      R"({"train_batch_size": 64, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3,
          "offload_optimizer": {"device": "cpu", "pin_memory": true}}})",
      "test", kWorld);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  testing::FakeWorldComm comm(kWorld, kWorld - 1, Device::cuda(0));
  const std::string want =
      fmt::format("{:.1f} GiB for the {} rank(s) on this host", host_need / (1 << 30), kWorld);
  device_synchronize(Device::cuda(0));
  const size_t before = allocator_stats(Device::cuda(0)).allocated_bytes;
  std::string message;
  try {
    auto e = initialize(model, *cfg, {.device = Device::cuda(0), .seed = 1, .comm = &comm});
    ADD_FAILURE() << "offload needing " << host_need << " bytes was not refused: "
                  << (e.is_ok() ? "engine built" : e.status().message());
  } catch (const HostOutOfMemory& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(want), std::string::npos) << message << "\nwanted: " << want;
  EXPECT_NE(message.find("12 bytes each, split over 64 rank(s)"), std::string::npos) << message;
  EXPECT_EQ(allocator_stats(Device::cuda(0)).allocated_bytes, before);
}

}  // namespace
}  // namespace zt
