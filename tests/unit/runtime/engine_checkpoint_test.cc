// Engine::save_checkpoint / load_checkpoint through the library API, where the CLI tests
// (tests/dist/checkpoint_resume.py) cannot reach: the collective contract (a save on one rank
// only ends in an error on every rank within the timeout, never a hang), a save in the middle
// of gradient accumulation, and a checkpoint of another model.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "common/test_util.h"
#include "unit/comm/comm_test_ranks.h"
#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

nn::Gpt2Config tiny(int layers = 2) {
  return {.n_layer = layers, .n_head = 2, .n_embd = 16, .vocab_size = 23,
          .padded_vocab_size = 64, .max_seq_len = 8};
}

DeepSpeedConfig parse(const std::string& json, int world) {
  auto c = config_parse(json, "test", world);
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return *c;
}

Status one_step(Engine& e, uint64_t seed) {
  for (int64_t m = 0; m < e.config().gradient_accumulation_steps; ++m) {
    Tensor tk = testing::random_ints({e.config().train_micro_batch_size_per_gpu, 8}, 23, seed);
    Tensor tg = testing::random_ints({e.config().train_micro_batch_size_per_gpu, 8}, 23, seed + 1);
    auto loss = e.forward(tk, tg);
    if (!loss) return loss.status();
    ZT_RETURN_IF_ERROR(e.backward(*loss));
    ZT_RETURN_IF_ERROR(e.step());
  }
  return Status::ok();
}

TEST(EngineCheckpoint, SaveOnOneRankOnlyFailsOnEveryRankWithoutHanging) {
  testing::TempDir dir;
  const int port = testing::free_tcp_port();
  Status result[2];
  double seconds[2] = {0, 0};
  testing::run_ranks(2, [&](int rank) {
    auto comm = testing::create_communicator(
        testing::rank_env(rank, 2, port, std::chrono::milliseconds(3000), "ckpt-contract"),
        Device::cpu());
    ASSERT_NE(comm, nullptr);
    nn::Gpt2 model(tiny());
    auto e = initialize(model, parse(R"({"train_batch_size": 4, "zero_optimization": {"stage": 2}})", 2),
                        {.device = Device::cpu(), .seed = 3, .comm = comm.get()});
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    ASSERT_TRUE(one_step(**e, 7).is_ok());
    const auto t0 = std::chrono::steady_clock::now();
    // Rank 0 saves; rank 1 trains on (its next collective is a gradient reduction).
    result[rank] = rank == 0 ? (*e)->save_checkpoint(dir.path().string())
                             : one_step(**e, 9);
    seconds[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(result[r].is_ok()) << "rank " << r;
    EXPECT_LT(seconds[r], 60.0) << "rank " << r;
  }
  EXPECT_NE(result[0].message().find("collective"), std::string::npos) << result[0].message();
  // Nothing half-made is visible: no `latest`, no tag folder.
  EXPECT_FALSE(fs::exists(dir.path() / "latest"));
  EXPECT_FALSE(fs::exists(dir.path() / "global_step1"));
}

TEST(EngineCheckpoint, SaveMidAccumulationIsRefused) {
  testing::TempDir dir;
  nn::Gpt2 model(tiny());
  auto e = initialize(model, parse(R"({"train_batch_size": 4, "gradient_accumulation_steps": 2})", 1),
                      {.device = Device::cpu()});
  ASSERT_TRUE(e.is_ok());
  Tensor tk = testing::random_ints({2, 8}, 23, 1), tg = testing::random_ints({2, 8}, 23, 2);
  auto loss = (*e)->forward(tk, tg);
  ASSERT_TRUE(loss.is_ok());
  ASSERT_TRUE((*e)->backward(*loss).is_ok());
  ASSERT_TRUE((*e)->step().is_ok());  // micro-step 1 of 2
  const Status s = (*e)->save_checkpoint(dir.path().string());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("gradient accumulation"), std::string::npos) << s.message();
}

TEST(EngineCheckpoint, AnotherModelIsRefusedNamingTheUnit) {
  testing::TempDir dir;
  const std::string cfg = R"({"train_batch_size": 2})";
  {
    nn::Gpt2 model(tiny(2));
    auto e = initialize(model, parse(cfg, 1), {.device = Device::cpu()});
    ASSERT_TRUE(e.is_ok());
    ASSERT_TRUE(one_step(**e, 1).is_ok());
    ASSERT_TRUE((*e)->save_checkpoint(dir.path().string(), "t").is_ok());
  }
  nn::Gpt2Config wider = tiny(2);
  wider.n_embd = 32;
  nn::Gpt2 model(wider);
  auto e = initialize(model, parse(cfg, 1), {.device = Device::cpu()});
  ASSERT_TRUE(e.is_ok());
  auto l = (*e)->load_checkpoint(dir.path().string());
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.status().message().find("another model"), std::string::npos)
      << l.status().message();
  EXPECT_EQ((*e)->global_steps(), 0);
}

TEST(EngineCheckpoint, RoundTripRestoresCountersSchedulerAndWeights) {
  testing::TempDir dir;
  const std::string cfg = R"({"train_batch_size": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": 0.01}}})";
  std::vector<Tensor> saved;
  double lr = 0;
  {
    nn::Gpt2 model(tiny());
    auto e = initialize(model, parse(cfg, 1), {.device = Device::cpu(), .seed = 1});
    ASSERT_TRUE(e.is_ok());
    for (int s = 0; s < 3; ++s) ASSERT_TRUE(one_step(**e, 10 + s).is_ok());
    ASSERT_TRUE((*e)->save_checkpoint(dir.path().string(), "", {{"note", "hello"}}).is_ok());
    saved = *(*e)->gather_master();
    lr = (*e)->lr();
  }
  nn::Gpt2 model(tiny());
  auto e = initialize(model, parse(cfg, 1), {.device = Device::cpu(), .seed = 99});
  ASSERT_TRUE(e.is_ok());
  auto l = (*e)->load_checkpoint(dir.path().string());
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  ASSERT_TRUE(l->has_value());
  EXPECT_EQ((*l)->tag, "global_step3");
  EXPECT_EQ((*l)->client_state["note"], "hello");
  EXPECT_EQ((*e)->global_steps(), 3);
  EXPECT_EQ((*e)->global_samples(), 6);
  EXPECT_EQ((*e)->lr(), lr);
  auto now = *(*e)->gather_master();
  ASSERT_EQ(now.size(), saved.size());
  for (size_t u = 0; u < now.size(); ++u) EXPECT_EQ(now[u].to_doubles(), saved[u].to_doubles());
  // Module only: the weights, nothing else.
  nn::Gpt2 model2(tiny());
  auto e2 = initialize(model2, parse(cfg, 1), {.device = Device::cpu(), .seed = 99});
  ASSERT_TRUE(e2.is_ok());
  ASSERT_TRUE((*e2)->load_checkpoint(dir.path().string(), {.tag = "", .load_optimizer_states = true, .load_lr_scheduler_states = true, .load_module_only = true}).is_ok());
  EXPECT_EQ((*e2)->global_steps(), 0);
  EXPECT_EQ((*(*e2)->gather_master())[1].to_doubles(), saved[1].to_doubles());
}

}  // namespace
}  // namespace zt
