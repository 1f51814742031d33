// Activation checkpointing (nn/model.h, Context::checkpoint_activations): training with it gives
// bit-for-bit the losses and weights of training without it on the CPU (the same kernels rerun on
// the same inputs), at ZeRO stages 0 and 3 (whose hooks gather parameters again before the
// recompute; stage 3 also keeps the inputs on the host), with every unit checkpointed alone and in
// segments of 2 and 4 units (--activation-checkpoint-interval: a segment keeps its first unit's
// input and reruns whole, its other units between their ZeRO-3 forward hooks); and the peak of
// allocated memory is lower.
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

TrainRun train(bool checkpoint, int stage, bool to_host = false, int64_t seq = 32, int interval = 1,
               bool keep = false, const char* model_name = "llama-tiny") {
  TrainRun out;
  const std::string json = fmt::format(
      R"({{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {{"stage": {}}},
          "activation_checkpointing": {{"cpu_checkpointing": {}}},
          "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}}}})",
      stage, to_host ? "true" : "false");
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  auto mc = nn::model_config_named(model_name);
  EXPECT_TRUE(mc.is_ok());
  nn::Transformer model(*mc);
  auto e = initialize(model, *cfg,
                      {.device = Device::cpu(),
                       .seed = 5,
                       .activation_checkpointing = checkpoint,
                       .activation_checkpoint_interval = interval,
                       .keep_activations = keep});
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

TEST(ActivationCheckpointing, SegmentsOfSeveralUnitsSameBitForBit) {
  // llama-tiny runs 6 units (embedding, 4 blocks, head): segments of 2 split them evenly, of 4
  // leave a segment of 2 at the end.
  for (int stage : {0, 3}) {
    const TrainRun plain = train(false, stage);
    for (int interval : {2, 4}) {
      const TrainRun ckpt = train(true, stage, /*to_host=*/stage == 3, 32, interval);
      EXPECT_EQ(plain.losses, ckpt.losses) << "stage " << stage << " interval " << interval;
      EXPECT_EQ(plain.weights, ckpt.weights) << "stage " << stage << " interval " << interval;
    }
  }
}

// EngineOptions::keep_activations: the MLP's activation and the pre-LN norm outputs kept from
// forward instead of recomputed in backward give the same bits (the same kernels on the same
// inputs), with GPT-2's GELU (in the GEMM's epilogue where fused) and LayerNorm, and Llama's
// SwiGLU and RMSNorm, with and without checkpointing; and they hold more memory at the peak.
TEST(KeepActivations, SameLossesAndWeightsBitForBitMoreMemory) {
  for (const char* name : {"gpt2-tiny", "llama-tiny"}) {
    for (int stage : {0, 3}) {
      const TrainRun plain = train(false, stage, false, 32, 1, false, name);
      const TrainRun kept = train(false, stage, false, 32, 1, true, name);
      const TrainRun both = train(true, stage, false, 32, 1, true, name);
      EXPECT_EQ(plain.losses, kept.losses) << name << " stage " << stage;
      EXPECT_EQ(plain.weights, kept.weights) << name << " stage " << stage;
      EXPECT_EQ(plain.losses, both.losses) << name << " stage " << stage;
      EXPECT_EQ(plain.weights, both.weights) << name << " stage " << stage;
      EXPECT_GT(kept.peak, plain.peak) << name << " stage " << stage;
    }
  }
}

// The segments' schedule, on units that record what runs: 5 checkpointable units in segments
// of 2 ({0,1}, {2,3}, {4}): forward runs each once; backward reruns {4} before its backward,
// {2,3} before unit 3's (unit 2 between its forward hooks), {0,1} before unit 1's.
class RecordingUnit : public nn::Unit {
 public:
  RecordingUnit(int id, std::string* log) : Unit(fmt::format("u{}", id)), id_(id), log_(log) {}
  bool checkpointable() const override { return true; }
  Tensor forward(nn::Context&, const Tensor& in) override {
    *log_ += fmt::format("f{} ", id_);
    return in;
  }
  Tensor backward(nn::Context&, const Tensor& dout) override {
    *log_ += fmt::format("b{} ", id_);
    return dout;
  }

 private:
  int id_;
  std::string* log_;
};

class RecordingModel : public nn::Model {
 public:
  RecordingModel(int n, std::string* log) {
    for (int i = 0; i < n; ++i) units_.push_back(std::make_unique<RecordingUnit>(i, log));
  }
  std::string name() const override { return "recording"; }
};

class RecordingHooks : public nn::UnitHooks {
 public:
  explicit RecordingHooks(std::string* log) : log_(log) {}
  void before_forward(int u) override { *log_ += fmt::format("[bf{} ", u); }
  void after_forward(int u) override { *log_ += fmt::format("af{}] ", u); }
  void before_backward(int u) override { *log_ += fmt::format("<bb{} ", u); }
  void after_backward(int u) override { *log_ += fmt::format("ab{}> ", u); }

 private:
  std::string* log_;
};

TEST(ActivationCheckpointing, SegmentScheduleReruns) {
  std::string log;
  RecordingModel model(5, &log);
  RecordingHooks hooks(&log);
  nn::Context ctx;
  ctx.checkpoint_activations = true;
  ctx.checkpoint_interval = 2;
  Tensor x = Tensor::zeros({1}, DType::f32);
  (void)model.forward(ctx, x, &hooks);
  EXPECT_EQ(log, "[bf0 f0 af0] [bf1 f1 af1] [bf2 f2 af2] [bf3 f3 af3] [bf4 f4 af4] ");
  log.clear();
  (void)model.backward(ctx, x, &hooks);
  EXPECT_EQ(log,
            "<bb4 f4 b4 ab4> "
            "<bb3 [bf2 f2 af2] f3 b3 ab3> <bb2 b2 ab2> "
            "<bb1 [bf0 f0 af0] f1 b1 ab1> <bb0 b0 ab0> ");
  // Interval 1: every unit reruns alone before its own backward.
  log.clear();
  ctx.checkpoint_interval = 1;
  (void)model.forward(ctx, x, nullptr);
  log.clear();
  (void)model.backward(ctx, x, nullptr);
  EXPECT_EQ(log, "f4 b4 f3 b3 f2 b2 f1 b1 f0 b0 ");
}

TEST(ActivationCheckpointing, LowersThePeakOfAllocatedMemory) {
  const TrainRun plain = train(false, 0, false, 128), ckpt = train(true, 0, false, 128);
  EXPECT_LT(ckpt.peak, plain.peak);
  std::printf("peak allocated: %zu bytes without, %zu with checkpointing (%.2fx)\n", plain.peak,
              ckpt.peak, static_cast<double>(plain.peak) / static_cast<double>(ckpt.peak));
}

}  // namespace
}  // namespace zt
