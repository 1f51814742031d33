// The PPO round's pieces around the PPO arithmetic (tasks/ppo.h, tasks/ema.h):
// - the hybrid engine (--enable-hybrid-engine): an actor sharded at ZeRO-3 over 2 ranks (Gloo,
//   threads), its whole weights gathered once for the generation phase, answers exactly what
//   generate gives on those weights gathered by gather_master and bound to a plain model (greedy,
//   f32: bitwise on the CPU), and what the per-unit hooked path gives; ranks whose rows end at
//   different steps need no agreement; the gathered copy is released afterwards and an
//   optimizer step while it is held is refused;
// - --generation-batches: a round of two batches trains on each experience in turn, as two
//   single-experience trainings of the same experiences do (bitwise);
// - prompts of different lengths in one round: each row as alone, in DeepSpeed-Chat's layout;
// - --enable-ema: the moving average equals beta * ema + (1 - beta) * w folded in after every
//   step, from the engine's gathered master weights (ZeRO 0 and 3).
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "unit/comm/comm_test_ranks.h"
#include "zt/nn/models/registry.h"
#include "zt/runtime/config.h"
#include "zt/tasks/ema.h"
#include "zt/tasks/ppo.h"
#include "zt/tasks/reward.h"

namespace zt::tasks {
namespace {

constexpr int kVocab = 16, kPromptLen = 4, kAnswerLen = 8, kRows = 4;

nn::TransformerConfig tiny_config() { return testing::tiny_llama_config(kVocab); }

std::unique_ptr<Engine> engine_for(nn::Model& m, int stage, double lr, int world,
                                   Communicator* comm) {
  // Every unit sharded (no persistent ones), so each forward through the hooks gathers.
  const std::string json = fmt::format(
      R"({{"train_micro_batch_size_per_gpu": {}, "gradient_accumulation_steps": 1,
          "zero_optimization": {{"stage": {}, "stage3_param_persistence_threshold": 0}},
          "optimizer": {{"type": "AdamW", "params": {{"lr": {}, "weight_decay": 0.0}}}}}})",
      kRows, stage, lr);
  auto cfg = config_parse(json, "test", world);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  auto e = initialize(m, *cfg, {.device = Device::cpu(), .seed = 3, .comm = comm});
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(e).value();
}

Result<std::vector<float>> zero_reward(const Tensor&, const std::vector<int64_t>& last) {
  return std::vector<float>(last.size(), 0.0f);
}

struct PpoRig {
  nn::Transformer actor, ref, causal;
  std::unique_ptr<nn::Transformer> critic;
  std::unique_ptr<Engine> actor_e, ref_e, critic_e;
  std::unique_ptr<PpoTrainer> trainer;
  PpoRig(int stage, int world, Communicator* comm)
      : actor(tiny_config()), ref(tiny_config()), causal(tiny_config()),
        critic(reward_model_from(causal)) {
    actor_e = engine_for(actor, stage, 3e-3, world, comm);
    ref_e = engine_for(ref, stage, 0.0, world, comm);
    critic_e = engine_for(*critic, stage, 3e-3, world, comm);
  }
  void make_trainer(bool hybrid, nn::Sampling sampling, std::vector<int32_t> eos) {
    PpoOptions o;
    o.max_answer_len = kAnswerLen;
    o.pad_id = 0;
    o.hybrid_engine = hybrid;
    o.generation.sampling = sampling;
    o.generation.top_k = 0;
    o.generation.seed = 17;
    o.generation.eos_token_ids = std::move(eos);
    trainer = std::make_unique<PpoTrainer>(
        PpoModels{actor, *actor_e, *critic, *critic_e, frozen(ref, *ref_e), zero_reward}, o);
  }
};

std::vector<std::vector<int32_t>> prompts_for(int rank, uint64_t seed) {
  std::mt19937 g(static_cast<uint32_t>(seed * 10 + static_cast<uint64_t>(rank)));
  std::uniform_int_distribution<int> tok(0, kVocab - 1);
  std::vector<std::vector<int32_t>> p(kRows, std::vector<int32_t>(kPromptLen));
  for (auto& row : p) {
    for (auto& t : row) t = tok(g);
  }
  return p;
}

// The answers of an experience: each row's tokens after the prompt up to its last real one.
std::vector<std::vector<int32_t>> answers_of(const PpoExperience& e) {
  std::vector<std::vector<int32_t>> out;
  const int32_t* s = e.seq.data<int32_t>();
  for (int64_t b = 0; b < e.B; ++b) {
    out.emplace_back(s + b * e.T + e.prompt_len, s + b * e.T + e.last[static_cast<size_t>(b)] + 1);
  }
  return out;
}

TEST(PpoHybridEngine, GenerationEqualsGenerateOnTheGatheredModel) {
  const int port = testing::free_tcp_port();
  std::vector<std::vector<int32_t>> hybrid[2], hooked[2], plain[2];
  testing::run_ranks(2, [&](int rank) {
    auto comm = testing::create_communicator(
        testing::rank_env(rank, 2, port, std::chrono::milliseconds(30000), "ppo-hybrid"),
        Device::cpu());
    ASSERT_NE(comm, nullptr);
    PpoRig h(3, 2, comm.get()), k(3, 2, comm.get());
    // Move the actors off their start with one language-model step each (the same step).
    for (PpoRig* s : {&h, &k}) {
      Tensor tokens = testing::random_ints({kRows, kPromptLen + kAnswerLen}, kVocab, 31 + rank);
      Tensor targets = testing::random_ints({kRows, kPromptLen + kAnswerLen}, kVocab, 41 + rank);
      ASSERT_TRUE(scaled_lm_step(*s->actor_e, tokens, targets, 1.0).is_ok());
    }
    // The oracle: the weights gathered by gather_master onto a plain model, generated there
    // without any engine. Its first answer's third token is made the end-of-sequence id, so
    // rows end early and at different steps on the two ranks.
    auto full = h.actor_e->gather_master();
    ASSERT_TRUE(full.is_ok());
    nn::Transformer plain_model(tiny_config());
    for (size_t u = 0; u < full->size(); ++u) plain_model.units()[u]->bind_values((*full)[u]);
    nn::GenerateOptions g;
    g.sampling = nn::Sampling::kGreedy;
    g.max_new_tokens = kAnswerLen;
    g.vocab_size = kVocab;
    g.max_seq_len = static_cast<int>(tiny_config().max_positions);
    g.num_layers = tiny_config().n_layer;
    nn::Context ctx;
    ctx.device = Device::cpu();
    ctx.compute_dtype = DType::f32;
    const auto prompts = prompts_for(rank, 1);
    g.eos_token_ids = {nn::generate_batch(plain_model, ctx, prompts, g)[0][2]};
    plain[rank] = nn::generate_batch(plain_model, ctx, prompts, g);

    h.make_trainer(/*hybrid=*/true, nn::Sampling::kGreedy, g.eos_token_ids);
    k.make_trainer(/*hybrid=*/false, nn::Sampling::kGreedy, g.eos_token_ids);
    auto eh = h.trainer->generate_experience(prompts);
    ASSERT_TRUE(eh.is_ok()) << eh.status().message();
    auto ek = k.trainer->generate_experience(prompts);
    ASSERT_TRUE(ek.is_ok()) << ek.status().message();
    hybrid[rank] = answers_of(*eh);
    hooked[rank] = answers_of(*ek);
    EXPECT_EQ(eh->log_probs, ek->log_probs) << "rank " << rank;
    // Released: no unit of the sharded actor keeps a gathered copy.
    EXPECT_FALSE(h.actor_e->holds_full_weights());
    for (const auto& unit : h.actor.units()) {
      for (const nn::Param* p : unit->params()) {
        EXPECT_FALSE(p->value.defined()) << p->name << " still bound after generation";
      }
    }

    // An optimizer step while the whole weights are held is refused, and allowed once released.
    ASSERT_TRUE(h.actor_e->hold_full_weights().is_ok());
    Tensor tokens = testing::random_ints({kRows, kPromptLen + kAnswerLen}, kVocab, 51);
    Tensor targets = testing::random_ints({kRows, kPromptLen + kAnswerLen}, kVocab, 52);
    const Result<double> held_step = scaled_lm_step(*h.actor_e, tokens, targets, 1.0);
    ASSERT_FALSE(held_step.is_ok());
    EXPECT_NE(held_step.status().message().find("hybrid engine"), std::string::npos)
        << held_step.status().message();
    h.actor_e->release_full_weights();
    // (the refused step's gradients are still there; a new one accumulates and steps)
    EXPECT_TRUE(scaled_lm_step(*h.actor_e, tokens, targets, 1.0).is_ok());
  });
  std::set<size_t> lengths;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(hybrid[r], plain[r]) << "rank " << r;
    EXPECT_EQ(hooked[r], plain[r]) << "rank " << r;
    for (const auto& a : plain[r]) lengths.insert(a.size());
  }
  // Rows ended at eos early, at different steps (what the ranks' agreement exists for).
  EXPECT_LE(*lengths.begin(), 3u);
  EXPECT_GE(lengths.size(), 2u);
}

TEST(PpoGenerationBatches, EachExperienceTrainsInTurn) {
  std::vector<double> weights[2];
  for (int path = 0; path < 2; ++path) {
    PpoRig s(0, 1, nullptr);
    s.make_trainer(/*hybrid=*/false, nn::Sampling::kSample, {});
    const auto b1 = prompts_for(0, 2), b2 = prompts_for(0, 3);
    if (path == 0) {
      ASSERT_TRUE(s.trainer->round(std::vector{b1, b2}).is_ok());
    } else {
      auto e1 = s.trainer->generate_experience(b1);
      auto e2 = s.trainer->generate_experience(b2);
      ASSERT_TRUE(e1.is_ok() && e2.is_ok());
      ASSERT_TRUE(s.trainer->train_rlhf(*e1).is_ok());
      ASSERT_TRUE(s.trainer->train_rlhf(*e2).is_ok());
    }
    weights[path] = testing::master_flat(*s.actor_e);
  }
  EXPECT_EQ(weights[0], weights[1]);
}

// Prompts of different lengths in one round: each row starts at position 0 of `seq`, and in the
// PPO layout its per-position values sit `shift` columns right, so every prompt ends in column
// start. Each row's log-probs (actor and reference) and values equal that row's experience alone
// (moved by its shift); the first PPO step (old and new weights equal: ratio 1, values = old
// values) gives the losses computed from the experience's own arrays by tasks/ppo_math.h.
TEST(PpoRaggedPrompts, RowsKeepTheirOwnPositionsAndTheLayoutOfDeepSpeedChat) {
  PpoRig s(0, 1, nullptr);
  s.make_trainer(/*hybrid=*/false, nn::Sampling::kGreedy, {});
  const auto base = prompts_for(0, 4);
  std::vector<std::vector<int32_t>> prompts;
  const int64_t lengths[kRows] = {4, 2, 3, 1};
  for (int b = 0; b < kRows; ++b) {
    prompts.emplace_back(base[b].begin(), base[b].begin() + lengths[b]);
  }
  auto e = s.trainer->generate_experience(prompts);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  const int64_t P = 4, T = P + kAnswerLen, L = T - 1, start = P - 1;
  ASSERT_EQ(e->prompt_len, P);
  ASSERT_EQ(e->T, T);
  for (int b = 0; b < kRows; ++b) {
    SCOPED_TRACE(fmt::format("row {}", b));
    EXPECT_EQ(e->shift[b], P - lengths[b]);
    // The row alone: its own experience, in its own layout (shift 0, start lengths[b] - 1).
    auto one = s.trainer->generate_experience({prompts[b]});
    ASSERT_TRUE(one.is_ok()) << one.status().message();
    const int64_t Lo = one->T - 1, k = e->shift[b];
    const int32_t* seq = e->seq.data<int32_t>();
    const int32_t* seq1 = one->seq.data<int32_t>();
    for (int64_t i = 0; i < one->T; ++i) EXPECT_EQ(seq[b * T + i], seq1[i]) << "position " << i;
    for (int64_t c = 0; c < L; ++c) {
      const float m = e->action_mask[b * L + c];
      if (c < k) {
        EXPECT_EQ(m, 0.0f) << "column " << c << " (before the row starts)";
        continue;
      }
      EXPECT_EQ(m, one->action_mask[c - k]) << "column " << c;
      EXPECT_NEAR(e->log_probs[b * L + c], one->log_probs[c - k], 1e-5) << "column " << c;
      EXPECT_NEAR(e->ref_log_probs[b * L + c], one->ref_log_probs[c - k], 1e-5) << "column " << c;
      EXPECT_NEAR(e->values[b * L + c], one->values[c - k], 1e-5) << "column " << c;
    }
    EXPECT_EQ(e->last[b], one->last[0]);
    (void)Lo;
  }
  // The first step's losses from the experience's arrays.
  const ppo::PpoConfig cfg;
  const int64_t B = kRows, n = L - start;
  std::vector<float> rewards(static_cast<size_t>(B * L)), values = e->values;
  ppo::compute_rewards(e->log_probs, e->ref_log_probs, e->reward_score, e->action_mask, B, L,
                       start, cfg, rewards);
  const auto ends = ppo::answer_ends(e->action_mask, B, L, start);
  ppo::zero_after_ends(rewards, ends, B, L);
  ppo::zero_after_ends(values, ends, B, L);
  std::vector<float> adv(static_cast<size_t>(B * n)), ret(static_cast<size_t>(B * n));
  ppo::advantages_and_returns(values, rewards, B, L, start, cfg, adv, ret);
  const auto lp = ppo::columns_from(e->log_probs, B, L, start);
  const auto v = ppo::columns_from(values, B, L, start);
  const auto mask = ppo::columns_from(e->action_mask, B, L, start);
  const double want_actor = ppo::actor_loss(
      {.log_probs = lp, .old_log_probs = lp, .advantages = adv, .mask = mask, .B = B, .n = n}, cfg);
  const double want_critic = ppo::critic_loss(
      {.values = v, .old_values = v, .returns = ret, .mask = mask, .B = B, .n = n}, cfg);
  auto st = s.trainer->train_rlhf(*e);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  EXPECT_NEAR(st->actor_loss, want_actor, 1e-5 * (1 + std::abs(want_actor)));
  EXPECT_NEAR(st->critic_loss, want_critic, 1e-5 * (1 + std::abs(want_critic)));
  EXPECT_GT(std::abs(want_critic), 0.0);
}

TEST(PpoEma, FollowsTheMovingAverage) {
  for (int stage : {0, 3}) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    nn::Transformer actor(tiny_config());
    auto e = engine_for(actor, stage, 1e-2, 1, nullptr);
    const double beta = 0.9;  // (DeepSpeed-Chat's 0.992 would move the average too little here)
    auto ema = WeightsEma::start(*e, beta);
    ASSERT_TRUE(ema.is_ok()) << ema.status().message();
    std::vector<double> want = testing::master_flat(*e);
    for (int step = 0; step < 4; ++step) {
      Tensor tokens = testing::random_ints({kRows, 8}, kVocab, 60 + step);
      Tensor targets = testing::random_ints({kRows, 8}, kVocab, 70 + step);
      ASSERT_TRUE(scaled_lm_step(*e, tokens, targets, 1.0).is_ok());
      ASSERT_TRUE(ema->update(*e).is_ok());
      const std::vector<double> w = testing::master_flat(*e);
      for (size_t i = 0; i < w.size(); ++i) want[i] = beta * want[i] + (1 - beta) * w[i];
    }
    auto got = ema->gather(*e);
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    std::vector<double> flat;
    for (const Tensor& t : *got) {
      const std::vector<double> v = t.to_doubles();
      flat.insert(flat.end(), v.begin(), v.end());
    }
    ASSERT_EQ(flat.size(), want.size());
    const std::vector<double> last = testing::master_flat(*e);
    double worst = 0, moved = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(flat[i] - want[i]));
      moved = std::max(moved, std::abs(want[i] - last[i]));
    }
    EXPECT_LT(worst, 1e-6);
    EXPECT_GT(moved, 1e-3) << "the average differs from the weights it follows";
  }
}

}  // namespace
}  // namespace zt::tasks
