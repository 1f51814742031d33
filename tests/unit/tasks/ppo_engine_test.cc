// PPO's losses through the engine (Engine::forward_token_losses / backward_weighted for the
// actor, forward_outputs / backward_outputs for the critic's value head), against the loss
// itself: one SGD step of rate eta on a loss L moves the weights by -eta grad L, so the loss
// falls by eta |grad L|^2 to first order, |grad L| being the norm the step reports. The loss
// before and after the step is evaluated independently (an evaluation forward), so a gradient of
// the wrong positions, sign or scale (the loss scale, the gradient-accumulation average, the
// per-position weights) misses the predicted fall. The PPO quantities themselves come from
// tasks/ppo_math.h (tested against DeepSpeed-Chat's formulas in ppo_math_test.cc). At ZeRO
// stages 0 and 3 (whose hooks gather the parameters of a forward without targets too), with 2
// micro-batches a step at stage 0 (the average over micro-steps).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/engine_runs.h"
#include "common/test_util.h"
#include "zt/nn/models/registry.h"
#include "zt/nn/models/transformer.h"
#include "zt/runtime/config.h"
#include "zt/runtime/engine.h"
#include "zt/tasks/ppo.h"
#include "zt/tasks/ppo_math.h"
#include "zt/tasks/reward.h"

namespace zt::tasks {
namespace {

constexpr int64_t kB = 4, kT = 16, kStart = 5;
constexpr double kEta = 1e-3;
// The value loss is quadratic in the head's weights, whose curvature along the gradient is about
// the features' squared norm (~ the hidden width, 128): a smaller step keeps the second-order
// term of the fall below 2%.
constexpr double kCriticEta = 1e-4;

std::unique_ptr<Engine> make_engine(nn::Model& model, int stage, int gas, double eta = kEta) {
  const std::string json = fmt::format(
      R"({{"train_micro_batch_size_per_gpu": {}, "gradient_accumulation_steps": {},
          "zero_optimization": {{"stage": {}}}, "zero_allow_untested_optimizer": true,
          "optimizer": {{"type": "SGD", "params": {{"lr": {}}}}}}})",
      kB, gas, stage, eta);
  auto cfg = config_parse(json, "test", 1);
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  auto e = initialize(model, *cfg, {.device = Device::cpu(), .seed = 11});
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(e).value();
}

// Answer positions: targets are the next tokens from kStart on, -100 before (the prompt) and at
// the last position; the mask is 1 where the target counts.
struct Rollout {
  Tensor tokens, targets;
  std::vector<float> mask;
};

Rollout rollout(uint64_t seed) {
  Rollout r;
  r.tokens = testing::random_ints({kB, kT}, 257, seed);
  std::vector<double> tg(static_cast<size_t>(kB * kT), -100.0);
  r.mask.assign(static_cast<size_t>(kB * kT), 0.0f);
  const int32_t* tok = r.tokens.data<int32_t>();
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t = kStart; t + 1 < kT - b; ++t) {  // row b's answer ends b tokens early
      tg[static_cast<size_t>(b * kT + t)] = tok[b * kT + t + 1];
      r.mask[static_cast<size_t>(b * kT + t)] = 1.0f;
    }
  }
  r.targets = Tensor::from_doubles(tg, {kB, kT}, DType::i32);
  return r;
}

// -loss per position, from an evaluation forward (no gradient, the engine's hooks).
std::vector<float> eval_log_probs(nn::Model& model, Engine& e, const Rollout& r) {
  nn::Context ctx = e.eval_context();
  ctx.targets = &r.targets;
  std::vector<double> l = model.forward(ctx, r.tokens, e.hooks()).to_doubles();
  std::vector<float> out(l.size());
  for (size_t i = 0; i < l.size(); ++i) out[i] = static_cast<float>(-l[i]);
  return out;
}

std::vector<float> eval_values(nn::Model& model, Engine& e, const Tensor& tokens) {
  nn::Context ctx = e.eval_context();
  std::vector<double> v = model.forward(ctx, tokens, e.hooks()).to_doubles();
  return std::vector<float>(v.begin(), v.end());
}

std::vector<float> noisy(const std::vector<float>& x, double amp, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-amp, amp);
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i] + u(g));
  return out;
}

const ppo::PpoConfig kConfig{};

TEST(PpoEngine, ActorStepFollowsThePolicyLossGradient) {
  for (const auto& [stage, gas] : {std::pair{0, 1}, std::pair{0, 2}, std::pair{3, 1}}) {
    SCOPED_TRACE(fmt::format("stage {}, {} micro-batches", stage, gas));
    auto mc = nn::model_config_named("llama-tiny");
    ASSERT_TRUE(mc.is_ok());
    nn::Transformer model(*mc);
    auto e = make_engine(model, stage, gas);
    // One rollout per micro-batch, its old log-probs the current ones moved by up to 0.3 (ratios
    // from 0.74 to 1.35: both sides of the clip), random advantages.
    std::vector<Rollout> rs;
    std::vector<std::vector<float>> old_lp, adv;
    for (int m = 0; m < gas; ++m) {
      rs.push_back(rollout(40 + m));
      old_lp.push_back(noisy(eval_log_probs(model, *e, rs.back()), 0.3, 7 + m));
      adv.push_back(noisy(std::vector<float>(static_cast<size_t>(kB * kT), 0.0f), 1.0, 9 + m));
    }
    auto loss_at = [&](int m, const std::vector<float>& lp) {
      return ppo::actor_loss({.log_probs = lp, .old_log_probs = old_lp[m], .advantages = adv[m],
                              .mask = rs[m].mask, .B = kB, .n = kT},
                             kConfig);
    };
    double before = 0;
    for (int m = 0; m < gas; ++m) {
      auto losses = e->forward_token_losses(rs[m].tokens, rs[m].targets);
      ASSERT_TRUE(losses.is_ok()) << losses.status().message();
      std::vector<float> lp(losses->size());
      for (size_t i = 0; i < lp.size(); ++i) lp[i] = static_cast<float>(-(*losses)[i]);
      const double l = loss_at(m, lp);
      before += l / gas;
      std::vector<float> dlp(lp.size()), w(lp.size());
      ppo::actor_loss_backward({.log_probs = lp, .old_log_probs = old_lp[m],
                                .advantages = adv[m], .mask = rs[m].mask, .B = kB, .n = kT},
                               kConfig, dlp);
      for (size_t i = 0; i < w.size(); ++i) w[i] = -dlp[i];  // loss_t = -log p_t
      ASSERT_TRUE(e->backward_weighted(w, static_cast<float>(l)).is_ok());
      ASSERT_TRUE(e->step().is_ok());
    }
    const double gn = e->last_step()->grad_norm;
    ASSERT_GT(gn, 0.0);
    double after = 0;
    for (int m = 0; m < gas; ++m) after += loss_at(m, eval_log_probs(model, *e, rs[m])) / gas;
    const double predicted = kEta * gn * gn;
    EXPECT_NEAR((before - after) / predicted, 1.0, 0.05)
        << "loss " << before << " -> " << after << ", predicted fall " << predicted;
  }
}

TEST(PpoEngine, CriticStepFollowsTheValueLossGradient) {
  for (int stage : {0, 3}) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    auto mc = nn::model_config_named("llama-tiny");
    ASSERT_TRUE(mc.is_ok());
    nn::Transformer causal(*mc);
    std::unique_ptr<nn::Transformer> critic = reward_model_from(causal);
    auto e = make_engine(*critic, stage, 1, kCriticEta);
    const Rollout r = rollout(50);
    // Old values near the current ones (some moved past the 0.2 clip), returns away from both.
    const std::vector<float> v0 = eval_values(*critic, *e, r.tokens);
    ASSERT_EQ(v0.size(), static_cast<size_t>(kB * kT));
    const std::vector<float> old_v = noisy(v0, 0.4, 3);
    const std::vector<float> returns = noisy(v0, 2.0, 4);
    auto loss_of = [&](const std::vector<float>& v) {
      return ppo::critic_loss({.values = v, .old_values = old_v, .returns = returns,
                               .mask = r.mask, .B = kB, .n = kT},
                              kConfig);
    };
    auto out = e->forward_outputs(r.tokens);
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    ASSERT_EQ(out->numel(), kB * kT);
    std::vector<double> vd = out->to_doubles();
    const std::vector<float> v(vd.begin(), vd.end());
    EXPECT_EQ(v, v0);  // the training forward gives the evaluation's values
    const double before = loss_of(v);
    std::vector<float> dv(v.size());
    ppo::critic_loss_backward({.values = v, .old_values = old_v, .returns = returns,
                               .mask = r.mask, .B = kB, .n = kT},
                              kConfig, dv);
    ASSERT_TRUE(e->backward_outputs(Tensor::from_floats(dv, {kB, kT}, DType::f32),
                                    static_cast<float>(before))
                    .is_ok());
    ASSERT_TRUE(e->step().is_ok());
    const double gn = e->last_step()->grad_norm;
    ASSERT_GT(gn, 0.0);
    const double after = loss_of(eval_values(*critic, *e, r.tokens));
    const double predicted = kCriticEta * gn * gn;
    EXPECT_NEAR((before - after) / predicted, 1.0, 0.05)
        << "loss " << before << " -> " << after << ", predicted fall " << predicted;
  }
}

// DeepSpeed-Chat's unsupervised mix: a step on coef x the mean language-model loss is, under
// plain SGD, the ordinary training step at coef x the learning rate - the same weights.
TEST(PpoEngine, ScaledLmStepIsTheOrdinaryStepAtScaledRate) {
  for (int stage : {0, 3}) {
    SCOPED_TRACE(fmt::format("stage {}", stage));
    auto mc = nn::model_config_named("llama-tiny");
    ASSERT_TRUE(mc.is_ok());
    nn::Transformer a(*mc), b(*mc);
    const double coef = 2.5;
    auto ea = make_engine(a, stage, 1, kEta);
    auto eb = make_engine(b, stage, 1, kEta * coef);
    const Rollout r = rollout(70);  // some targets -100: the mean counts the others
    auto mean = scaled_lm_step(*ea, r.tokens, r.targets, coef);
    ASSERT_TRUE(mean.is_ok()) << mean.status().message();
    auto loss = eb->forward(r.tokens, r.targets);
    ASSERT_TRUE(loss.is_ok());
    EXPECT_NEAR(*mean, *loss, 1e-5 * *loss);
    ASSERT_TRUE(eb->backward(*loss).is_ok());
    ASSERT_TRUE(eb->step().is_ok());
    const std::vector<double> wa = testing::master_flat(*ea), wb = testing::master_flat(*eb);
    ASSERT_EQ(wa.size(), wb.size());
    double worst = 0, moved = 0;
    const std::vector<double> w0 = [&] {
      nn::Transformer m0(*mc);
      auto e0 = make_engine(m0, stage, 1);
      return testing::master_flat(*e0);
    }();
    for (size_t i = 0; i < wa.size(); ++i) {
      worst = std::max(worst, std::fabs(wa[i] - wb[i]));
      moved = std::max(moved, std::fabs(wb[i] - w0[i]));
    }
    EXPECT_GT(moved, 1e-4);  // the step did something
    EXPECT_LT(worst, 1e-3 * moved) << "largest move " << moved;
  }
}

TEST(PpoEngine, RefusesTheWrongHead) {
  auto mc = nn::model_config_named("llama-tiny");
  ASSERT_TRUE(mc.is_ok());
  nn::Transformer causal(*mc);
  auto e = make_engine(causal, 0, 1);
  const Rollout r = rollout(60);
  auto out = e->forward_outputs(r.tokens);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("value head"), std::string::npos);
  auto losses = e->forward_token_losses(r.tokens, r.targets);
  ASSERT_TRUE(losses.is_ok());
  std::vector<float> w(3, 1.0f);
  const Status s = e->backward_weighted(w, 0.0f);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("3 weights for the 64 positions"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace zt::tasks
