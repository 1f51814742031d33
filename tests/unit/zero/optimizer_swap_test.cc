// ZeRO-Infinity's optimizer swap (zero/optimizer_swap.h) on the CPU: the fp32 master weights and
// the optimizer state in a file under nvme_path, stepped piece by piece through the swap's three
// staging slots, must train exactly as the same configuration with the state in memory (the
// oracle: the engine's in-memory run, whose step is one optimizer call over whole chunks). The
// CPU kernels are elementwise, so cutting the chunks into pieces and moving them through a file
// changes no arithmetic: the losses and the final master weights are compared bitwise. A piece
// read from the wrong place, stepped twice or written back late is an O(1) difference.
#include "zt/zero/optimizer_swap.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/comm/communicator.h"
#include "zt/nn/models/gpt2.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {
namespace {

// A ds_config for the tiny GPT-2 at `stage`, AdamW with a warm-up schedule, and optionally the
// optimizer state swapped to `nvme` (`zero_extra` adds zero_optimization members, `aio` the aio
// block).
std::string config(int stage, const std::string& nvme, const std::string& zero_extra = "",
                   const std::string& aio = "", const std::string& optimizer = "AdamW") {
  std::string offload;
  if (!nvme.empty()) {
    offload = fmt::format(
        R"(, "offload_optimizer": {{"device": "nvme", "nvme_path": "{}", "pipeline_read": true,
           "pipeline_write": true}})",
        nvme);
  }
  return fmt::format(
      R"({{"train_batch_size": 2, "gradient_accumulation_steps": 1,
          "zero_allow_untested_optimizer": true,
          "optimizer": {{"type": "{}", "params": {{"lr": 0.01, "weight_decay": 0.1}}}},
          "scheduler": {{"type": "WarmupLR", "params": {{"warmup_num_steps": 3}}}},
          "zero_optimization": {{"stage": {}{}{}}}{}}})",
      optimizer, stage, zero_extra, offload, aio.empty() ? "" : ", " + aio);
}

// The run with the state in memory and the run with it swapped must agree to the bit.
void expect_same_training(int stage, const std::string& zero_extra, const std::string& aio = "",
                          const std::string& optimizer = "AdamW") {
  testing::TempDir dir("zt_swap");
  const testing::EngineRun ref =
      testing::train_tiny_gpt2(config(stage, "", zero_extra, "", optimizer), 6, 5, 11);
  const testing::EngineRun swp = testing::train_tiny_gpt2(
      config(stage, dir.path().string(), zero_extra, aio, optimizer), 6, 5, 11);
  ASSERT_EQ(ref.losses.size(), 6u);
  EXPECT_EQ(swp.losses, ref.losses);
  EXPECT_EQ(swp.master, ref.master);
  // The state left memory: nothing of it is counted on the host, the file holds it.
  EXPECT_EQ(swp.bytes.host_master + swp.bytes.host_optimizer, 0);
  EXPECT_EQ(swp.bytes.optimizer, 0);
  EXPECT_GE(swp.bytes.nvme, 3 * 4 * swp.own_master_elements);
  // The swap file is scratch space: removed when the engine goes.
  EXPECT_FALSE(std::filesystem::exists(optimizer_swap_path(dir.path().string(), stage, 0)));
  // Training moved the weights (the comparison is not between two untouched models).
  EXPECT_NE(ref.losses.front(), ref.losses.back());
}

TEST(OptimizerSwap, MatchesTheInMemoryRunAtEveryStage) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    expect_same_training(stage, "");
  }
}

TEST(OptimizerSwap, SubGroupSizesAndQueueDepthOne) {
  // sub_group_size cuts the swapped pieces: 1000 elements make units of 64 to ~3,400 elements
  // into 1-4 pieces (the last one shorter, blocks padded to 4 KiB), 100 into up to 34; a queue
  // depth of 1 and a block size of one page serialise every request.
  const std::string small_aio =
      R"("aio": {"block_size": 4096, "queue_depth": 1, "single_submit": true})";
  for (int64_t sub : {100, 1000, 100000}) {
    SCOPED_TRACE(sub);
    expect_same_training(3, fmt::format(R"(, "sub_group_size": {})", sub), small_aio);
  }
  expect_same_training(2, R"(, "sub_group_size": 1000)", small_aio);
}

TEST(OptimizerSwap, UnpipelinedAsDeepSpeedsDefault) {
  // pipeline_read / pipeline_write false (DeepSpeed's defaults): each read and write is waited
  // for as it is issued; the result is the same.
  testing::TempDir dir("zt_swap");
  const std::string seq = fmt::format(
      R"({{"train_batch_size": 2, "optimizer": {{"type": "Adam", "params": {{"lr": 0.01}}}},
          "zero_optimization": {{"stage": 3, "sub_group_size": 500,
            "offload_optimizer": {{"device": "nvme", "nvme_path": "{}"}}}}}})",
      dir.path().string());
  const std::string mem =
      R"({"train_batch_size": 2, "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
          "zero_optimization": {"stage": 3, "sub_group_size": 500}})";
  const testing::EngineRun a = testing::train_tiny_gpt2(seq, 4, 3, 7);
  const testing::EngineRun b = testing::train_tiny_gpt2(mem, 4, 3, 7);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.master, b.master);
}

TEST(OptimizerSwap, ParametersSwappedToo) {
  // ZeRO-Infinity's full form: offload_param nvme as well, so that each stage-3 unit's own chunk
  // rests in the parameter swap file and crosses to the device for every gather. Units larger
  // than the persistence threshold (0 here: all of them) move; sub_group_size 1000 becomes
  // pieces of 2048 (4 KiB of 16-bit values, one O_DIRECT block) in the parameter file.
  for (const char* precision : {"", R"("bf16": {"enabled": true})"}) {
    SCOPED_TRACE(precision);
    testing::TempDir dir("zt_swap");
    const std::string p = dir.path().string();
    const std::string zero_extra = fmt::format(
        R"(, "sub_group_size": 1000, "stage3_param_persistence_threshold": 0,
           "offload_param": {{"device": "nvme", "nvme_path": "{}"}})",
        p);
    const std::string mem = config(3, "", R"(, "sub_group_size": 1000,
                                             "stage3_param_persistence_threshold": 0)",
                                   precision);
    const std::string swp = config(3, p, zero_extra, precision);
    const testing::EngineRun a = testing::train_tiny_gpt2(mem, 6, 5, 11);
    const testing::EngineRun b = testing::train_tiny_gpt2(swp, 6, 5, 11);
    ASSERT_EQ(a.losses.size(), 6u);
    EXPECT_EQ(b.losses, a.losses);
    EXPECT_EQ(b.master, a.master);
    // Only the persistent... none: every unit's chunk left the device for the file.
    EXPECT_EQ(b.bytes.params, 0);
    EXPECT_GT(b.bytes.nvme, 3 * 4 * b.own_master_elements);
    EXPECT_FALSE(std::filesystem::exists(p + "/zero_stage_3/f32params/rank0/params.swp"));
    EXPECT_NE(a.losses.front(), a.losses.back());
  }
}

TEST(OptimizerSwap, SgdWithMomentumAndLamb) {
  expect_same_training(1, R"(, "sub_group_size": 700)", "", "SGD");
  expect_same_training(1, "", "", "Lamb");
}

TEST(OptimizerSwap, EveryBackend) {
  // The same run through each kernel queue the machine offers (io_uring, libaio, threads); a
  // backend the kernel refuses falls back, which the run's log says, and still must agree.
  for (const char* b : {"io_uring", "libaio", "threads"}) {
    SCOPED_TRACE(b);
    setenv("ZT_AIO_BACKEND", b, 1);
    expect_same_training(3, R"(, "sub_group_size": 1000)");
  }
  unsetenv("ZT_AIO_BACKEND");
}

TEST(OptimizerSwap, MissingFolderIsRefusedByName) {
  const std::string cfg = config(2, "/nonexistent/zt_nvme_folder");
  auto parsed = config_parse(cfg, "test", 1);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  nn::Gpt2 model(testing::tiny_gpt2_config());
  std::string m;
  try {
    auto e = initialize(model, *parsed, {.device = Device::cpu(), .seed = 1});
    ASSERT_FALSE(e.is_ok()) << "a missing nvme_path must be refused";
    m = e.status().message();
  } catch (const std::exception& ex) {
    m = ex.what();
  }
  EXPECT_NE(m.find("/nonexistent/zt_nvme_folder"), std::string::npos) << m;
  EXPECT_NE(m.find("offload_optimizer.nvme_path"), std::string::npos) << m;
}

// A ZeroState with its state swapped, for the checkpoint access and failure tests below.
struct Swapped {
  std::unique_ptr<nn::Gpt2> model;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<ZeroState> zero;
};

Swapped make_swapped(const std::string& folder, int64_t piece) {
  Swapped r;
  r.model = std::make_unique<nn::Gpt2>(testing::tiny_gpt2_config());
  auto c = communicator_create(DistEnv{}, Device::cpu());
  EXPECT_TRUE(c.is_ok());
  r.comm = std::move(c).value();
  ZeroOptions o{.device = Device::cpu(),
                .stream = Stream::create(Device::cpu()),
                .optimizer_states = 2,
                .stage = 3,
                .comm = r.comm.get(),
                .persistence_threshold = 0,
                .optimizer_placement = OptimizerPlacement::kNvme,
                .offload_piece_elements = piece,
                .nvme_folder = folder,
                .comm_dtype = std::nullopt};
  r.zero = std::make_unique<ZeroState>(*r.model, o, 77);
  return r;
}

TEST(OptimizerSwap, CheckpointAccessReadsAndWritesTheFile) {
  testing::TempDir dir("zt_swap");
  Swapped s = make_swapped(dir.path().string(), 1000);
  // The initial master is what init_unit_params draws (the oracle), read back from the file.
  for (int u = 0; u < static_cast<int>(s.zero->units().size()); ++u) {
    const UnitState& st = s.zero->units()[u];
    std::vector<float> want(static_cast<size_t>(st.padded)), got(static_cast<size_t>(st.numel));
    init_unit_params(*s.model->units()[u], want.data(), 77);
    ASSERT_TRUE(s.zero->read_saved(u, 0, got.data()).is_ok());
    for (int64_t i = 0; i < st.numel; ++i) ASSERT_EQ(got[i], want[i]) << "unit " << u << " " << i;
    // The optimizer state starts at zero.
    ASSERT_TRUE(s.zero->read_saved(u, 2, got.data()).is_ok());
    for (float x : got) ASSERT_EQ(x, 0.0f);
  }
  // A write across piece boundaries lands exactly there and leaves the rest alone.
  const int u = 1;
  const int64_t n = s.zero->units()[u].numel;
  ASSERT_GT(n, 2500);
  std::vector<float> vals(1700);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i) + 0.5f;
  ASSERT_TRUE(s.zero->write_range(u, 1, 900, vals.data(), 1700).is_ok());
  std::vector<float> back(static_cast<size_t>(n));
  ASSERT_TRUE(s.zero->read_saved(u, 1, back.data()).is_ok());
  for (int64_t i = 0; i < n; ++i) {
    const float want = i >= 900 && i < 2600 ? static_cast<float>(i - 900) + 0.5f : 0.0f;
    ASSERT_EQ(back[i], want) << i;
  }
  ASSERT_TRUE(s.zero->zero_extent(u, 1).is_ok());
  ASSERT_TRUE(s.zero->read_saved(u, 1, back.data()).is_ok());
  for (float x : back) ASSERT_EQ(x, 0.0f);
}

TEST(OptimizerSwap, ADamagedSwapFileStopsTheStepWithItsPath) {
  testing::TempDir dir("zt_swap");
  Swapped s = make_swapped(dir.path().string(), 1000);
  const std::string path = optimizer_swap_path(dir.path().string(), 3, 0);
  ASSERT_TRUE(std::filesystem::exists(path));
  for (int u = 0; u < static_cast<int>(s.zero->units().size()); ++u) {
    Tensor& g = s.zero->step_grad(u);
    g.copy_from(testing::random_tensor(g.shape(), DType::f32, u, -0.5, 0.5));
  }
  // The file loses its second half under the running job (a disk fault, a careless cleanup):
  // the reads past the end come back short, and the step must say so instead of stepping on
  // garbage.
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(std::filesystem::file_size(path) / 2)), 0);
  optim::OptimizerSpec spec{.kind = optim::OptimizerKind::kAdam, .lr = 0.01};
  optim::Optimizer opt(spec);
  optim::StepValues v{.lr = spec.lr, .beta1 = spec.beta1, .beta2 = spec.beta2, .grad_scale = 1};
  auto r = s.zero->optimizer_step(opt, v);
  ASSERT_FALSE(r.is_ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("incomplete"), std::string::npos) << m;
}

}  // namespace
}  // namespace zt::zero
