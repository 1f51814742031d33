// PipelineEngine (src/zt/pipe/pipe_engine.h) on ranks as threads of this test, Gloo on loopback:
// the tiny GPT-2's four units on four stages, eight micro-batches a step. Oracles: the ordinary
// Engine on the whole model with the same micro-batches (the single-process run: SGD with momentum
// is linear in the gradients, so only the order of a few sums differs, 1e-5 relative in fp32),
// and DeepSpeed's TrainSchedule arithmetic for the activations a stage holds at once,
// min(stages - stage, micro-batches), not the micro-batch count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "unit/comm/comm_test_ranks.h"
#include "zt/pipe/pipe_engine.h"

namespace zt {
namespace {

using namespace std::chrono_literals;

constexpr int kMicroBatches = 8, kSteps = 3;

std::string config_json(int micro_batches) {
  return fmt::format(
      R"({{"train_batch_size": {}, "train_micro_batch_size_per_gpu": 2,
          "gradient_clipping": 0.5, "zero_allow_untested_optimizer": true,
          "optimizer": {{"type": "SGD", "params": {{"lr": 0.1, "momentum": 0.9}}}}}})",
      2 * micro_batches);
}

// The same batch every step, so the loss falls (the run trains).
pipe::MicroBatch micro_batch(int /*step*/, int m) {
  const uint64_t seed = 100 + 2 * static_cast<uint64_t>(m);
  return {.tokens = testing::random_ints({2, 8}, 23, seed),
          .targets = testing::random_ints({2, 8}, 23, seed + 1)};
}

pipe::ModelFactory tiny_factory() {
  return [](const pipe::ModelShard&) -> Result<std::unique_ptr<nn::Model>> {
    return std::unique_ptr<nn::Model>(std::make_unique<nn::Gpt2>(testing::tiny_gpt2_config()));
  };
}

// The single-process run: every step's mean loss and gradient norm.
std::vector<std::pair<double, double>> reference_run() {
  std::vector<std::pair<double, double>> out;
  auto cfg = config_parse(config_json(kMicroBatches), "test", 1);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  nn::Gpt2 model(testing::tiny_gpt2_config());
  auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = 7});
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < kMicroBatches; ++m) {
      pipe::MicroBatch b = micro_batch(s, m);
      auto loss = (*e)->forward(b.tokens, b.targets);
      EXPECT_TRUE(loss.is_ok());
      EXPECT_TRUE((*e)->backward(*loss).is_ok());
      EXPECT_TRUE((*e)->step().is_ok());
    }
    out.emplace_back((*e)->last_step()->loss, (*e)->last_step()->grad_norm);
  }
  return out;
}

TEST(PipelineEngine, FourStagesMatchOneProcessAndHoldAtMostTheirShareOfActivations) {
  const auto ref = reference_run();
  const int world = 4;
  const int port = testing::free_tcp_port();
  std::mutex mu;
  std::vector<std::vector<std::pair<double, double>>> got(world);
  std::vector<int> peaks(world, -1), buffers(world, -1);
  testing::run_ranks(world, [&](int rank) {
    auto comm = testing::create_communicator(
        testing::rank_env(rank, world, port, 60s, "pipe-test"), Device::cpu());
    ASSERT_NE(comm, nullptr);
    auto cfg = config_parse(config_json(kMicroBatches), "test", 1);  // data-parallel size 1
    ASSERT_TRUE(cfg.is_ok());
    auto pe = pipe::PipelineEngine::create(
        tiny_factory(), *cfg,
        {.stages = 4, .engine = {.device = Device::cpu(), .seed = 7, .comm = comm.get()}});
    ASSERT_TRUE(pe.is_ok()) << pe.status().message();
    EXPECT_EQ((*pe)->grid().stage_id, rank);
    for (int s = 0; s < kSteps; ++s) {
      int m = 0;
      auto loss = (*pe)->train_batch([&]() -> Result<pipe::MicroBatch> {
        return micro_batch(s, m++);
      });
      ASSERT_TRUE(loss.is_ok()) << loss.status().message();
      // Only the first and last stage load micro-batches, each all of them.
      EXPECT_EQ(m, rank == 0 || rank == world - 1 ? kMicroBatches : 0) << "rank " << rank;
      std::lock_guard<std::mutex> lock(mu);
      got[rank].emplace_back(*loss, (*pe)->engine().last_step()->grad_norm);
    }
    std::lock_guard<std::mutex> lock(mu);
    peaks[rank] = (*pe)->peak_activations();
    buffers[rank] = (*pe)->num_pipe_buffers();
  });
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(::testing::Message() << "stage " << r);
    EXPECT_EQ(peaks[r], std::min(world - r, kMicroBatches));
    EXPECT_EQ(buffers[r], std::max(2, std::min(world - r, kMicroBatches)));
    ASSERT_EQ(got[r].size(), ref.size());
    for (size_t s = 0; s < ref.size(); ++s) {
      EXPECT_NEAR(got[r][s].first, ref[s].first, 1e-5 * std::abs(ref[s].first)) << "step " << s;
      EXPECT_NEAR(got[r][s].second, ref[s].second, 1e-5 * std::abs(ref[s].second)) << "step " << s;
    }
  }
  EXPECT_LT(ref.back().first, ref.front().first);  // it trains
}

// One stage on one process is the ordinary engine: the same losses to the last bits.
TEST(PipelineEngine, OneStageIsTheEngine) {
  const auto ref = reference_run();
  auto cfg = config_parse(config_json(kMicroBatches), "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  auto pe = pipe::PipelineEngine::create(tiny_factory(), *cfg,
                                         {.stages = 1, .engine = {.device = Device::cpu(), .seed = 7}});
  ASSERT_TRUE(pe.is_ok()) << pe.status().message();
  for (int s = 0; s < kSteps; ++s) {
    int m = 0;
    auto loss = (*pe)->train_batch([&]() -> Result<pipe::MicroBatch> { return micro_batch(s, m++); });
    ASSERT_TRUE(loss.is_ok()) << loss.status().message();
    EXPECT_EQ(*loss, ref[static_cast<size_t>(s)].first) << "step " << s;
  }
}

TEST(PipelineEngine, RefusesZeroStagesTwoAndThreeAndAStageCountNotDividingTheRanks) {
  auto cfg = config_parse(R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                              "zero_optimization": {"stage": 2}})",
                          "test", 1);
  ASSERT_TRUE(cfg.is_ok());
  auto pe = pipe::PipelineEngine::create(tiny_factory(), *cfg, {.stages = 1});
  ASSERT_FALSE(pe.is_ok());
  EXPECT_NE(pe.status().message().find("incompatible with pipeline parallelism"), std::string::npos);
  // Five stages on one process: the world check names the ranks and what would divide them
  // (more stages than units is partition_units's error: tests/unit/pipe/partition_test.cc).
  auto cfg1 = config_parse(config_json(2), "test", 1);
  ASSERT_TRUE(cfg1.is_ok());
  auto five = pipe::PipelineEngine::create(tiny_factory(), *cfg1, {.stages = 5});
  ASSERT_FALSE(five.is_ok());
  EXPECT_NE(five.status().message().find("does not divide the 1 ranks"), std::string::npos)
      << five.status().message();
}

}  // namespace
}  // namespace zt
