// LR schedules against the formulas of reference §1 (runtime/lr_schedules.py), written out in
// this file as the oracle, plus a few values worked by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "zt/runtime/lr_scheduler.h"

namespace zt {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<LrScheduler> make(const std::string& type, const nlohmann::json& params,
                                  double optimizer_lr = 1e-3) {
  SchedulerConfig cfg{.present = true, .type = type, .params = params};
  Result<std::unique_ptr<LrScheduler>> r = lr_scheduler_create(cfg, optimizer_lr);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

std::string error_of(const std::string& type, const nlohmann::json& params) {
  SchedulerConfig cfg{.present = true, .type = type, .params = params};
  Result<std::unique_ptr<LrScheduler>> r = lr_scheduler_create(cfg, 1e-3);
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? std::string() : r.status().message();
}

// Steps s from t = -1 up to t, checking lr at every t against oracle(t).
template <typename Oracle>
void expect_schedule(LrScheduler& s, int64_t t_end, Oracle oracle) {
  ASSERT_EQ(s.last_batch_iteration(), -1);
  for (int64_t t = -1; t <= t_end; ++t) {
    EXPECT_NEAR(s.lr(), oracle(t), 1e-15) << "t=" << t;
    s.step();
  }
}

// WarmupLR: lr = min + (max - min) * gamma; gamma = ln(t+1)/ln(N) (log) or t/N (linear) for
// t < N, else 1; t < 0 gives min. N = max(2, warmup_num_steps).
double warmup_oracle(int64_t t, double mn, double mx, int64_t n, bool log_type) {
  n = std::max<int64_t>(2, n);
  if (t < 0) return mn;
  double g = 1.0;
  if (t < n) g = log_type ? std::log(t + 1.0) / std::log(double(n)) : double(t) / double(n);
  return mn + (mx - mn) * g;
}

TEST(LrScheduler, WarmupLrLog) {
  auto s =
      make("WarmupLR", {{"warmup_min_lr", 0.01}, {"warmup_max_lr", 0.1}, {"warmup_num_steps", 10}});
  EXPECT_EQ(s->type(), "WarmupLR");
  EXPECT_DOUBLE_EQ(s->lr(), 0.01);  // t = -1: the constructor sets warmup_min_lr
  expect_schedule(*s, 30, [](int64_t t) { return warmup_oracle(t, 0.01, 0.1, 10, true); });
  // By hand: t = 9 -> ln(10)/ln(10) = 1 -> 0.1.
  s->set_last_batch_iteration(9);
  EXPECT_NEAR(s->lr(), 0.1, 1e-15);
  s->set_last_batch_iteration(0);  // ln(1) = 0
  EXPECT_NEAR(s->lr(), 0.01, 1e-15);
  EXPECT_FALSE(s->momentum().has_value());
  EXPECT_FALSE(s->beta2().has_value());
}

TEST(LrScheduler, WarmupLrLinearAndDefaults) {
  auto s = make("WarmupLR", {{"warmup_min_lr", 0.01},
                             {"warmup_max_lr", 0.1},
                             {"warmup_num_steps", 10},
                             {"warmup_type", "linear"}});
  expect_schedule(*s, 15, [](int64_t t) { return warmup_oracle(t, 0.01, 0.1, 10, false); });
  s->set_last_batch_iteration(5);
  EXPECT_NEAR(s->lr(), 0.055, 1e-15);  // 0.01 + 0.09 * 5/10
  // warmup_num_steps 1 -> max(2, 1) = 2: t = 1 is halfway.
  auto two = make("WarmupLR", {{"warmup_num_steps", 1}, {"warmup_type", "linear"}});
  two->set_last_batch_iteration(1);
  EXPECT_NEAR(two->lr(), 0.0005, 1e-15);  // defaults: min 0, max 1e-3
  // Defaults: min 0, max 1e-3, N 1000, log.
  auto d = make("WarmupLR", nlohmann::json::object());
  expect_schedule(*d, 1005, [](int64_t t) { return warmup_oracle(t, 0.0, 1e-3, 1000, true); });
}

TEST(LrScheduler, WarmupDecayLr) {
  const double mn = 0.01, mx = 0.1;
  auto oracle = [&](int64_t t) {
    const int64_t n = 10, total = 20;
    if (t < 0) return mn;
    double g = t < n ? double(t) / double(n)
                     : std::max(0.0, double(total - t) / std::max(1.0, double(total - n)));
    return mn + (mx - mn) * g;
  };
  auto s = make("WarmupDecayLR", {{"warmup_min_lr", mn},
                                  {"warmup_max_lr", mx},
                                  {"warmup_num_steps", 10},
                                  {"total_num_steps", 20},
                                  {"warmup_type", "linear"}});
  EXPECT_EQ(s->type(), "WarmupDecayLR");
  expect_schedule(*s, 30, oracle);
  s->set_last_batch_iteration(15);
  EXPECT_NEAR(s->lr(), 0.055, 1e-15);  // half way down
  s->set_last_batch_iteration(25);
  EXPECT_NEAR(s->lr(), 0.01, 1e-15);  // clamped at gamma 0
}

TEST(LrScheduler, WarmupCosineLr) {
  const double base = 0.2, wmr = 0.1, cmr = 0.01;
  const int64_t n = 10, total = 110;
  auto oracle = [&](int64_t t) {
    if (t < 0) return 0.0;  // get_lr returns [0.0] before the first step
    double ratio;
    if (t < n) {
      ratio = wmr + (double(t) / double(n)) * (1.0 - wmr);
    } else {
      double s = double(t - n + 1), real_total = double(total - n);
      ratio = std::max(
          0.0, cmr + (1.0 - cmr) * (1.0 + std::cos(std::numbers::pi * s / real_total)) / 2.0);
    }
    return base * ratio;
  };
  auto s = make("WarmupCosineLR",
                {{"total_num_steps", total},
                 {"warmup_num_steps", n},
                 {"warmup_min_ratio", wmr},
                 {"cos_min_ratio", cmr},
                 {"warmup_type", "linear"}},
                base);
  EXPECT_EQ(s->lr(), 0.0);
  expect_schedule(*s, 130, oracle);
  s->set_last_batch_iteration(59);  // s = 50 of 100: cos(pi/2) = 0 -> ratio 0.01 + 0.99/2
  EXPECT_NEAR(s->lr(), 0.2 * 0.505, 1e-15);
  s->set_last_batch_iteration(5);  // 0.1 + 0.5 * 0.9 = 0.55
  EXPECT_NEAR(s->lr(), 0.2 * 0.55, 1e-15);
  EXPECT_THAT(error_of("WarmupCosineLR", {{"total_num_steps", 10}, {"warmup_num_steps", 10}}),
              HasSubstr("no steps for the cosine decay"));
  // Default warmup is log, as in WarmupLR.
  auto lg = make("WarmupCosineLR", {{"total_num_steps", 100}, {"warmup_num_steps", 10}}, 1.0);
  lg->set_last_batch_iteration(4);
  EXPECT_NEAR(lg->lr(), std::log(5.0) / std::log(10.0), 1e-15);
}

struct OneCycleParams {
  double min_lr = 0.01, max_lr = 0.1, first = 10, second = 10, decay_lr_rate = 0.5, decay_step = 5,
         min_mom = 0.8, max_mom = 0.9, decay_mom_rate = 0.0;
};

// §1: r = first/total, x = 1 + (t+1)/total - floor(1 + (t+1)/total), scale = x/r if x <= r else
// (x-1)/(r-1); after the cycle lr = min / (1 + rate * (t - total + 1) / decay_step_size).
double one_cycle_lr(const OneCycleParams& p, int64_t t) {
  const double total = p.first + p.second, r = p.first / total;
  if (t < total) {
    double bi = double(t + 1), x = 1.0 + bi / total - std::floor(1.0 + bi / total);
    double scale = x <= r ? x / r : (x - 1.0) / (r - 1.0);
    return p.min_lr + (p.max_lr - p.min_lr) * scale;
  }
  return p.min_lr / (1.0 + p.decay_lr_rate * (double(t) - total + 1.0) / p.decay_step);
}
double one_cycle_mom(const OneCycleParams& p, int64_t t) {
  const double total = p.first + p.second, r = p.first / total;
  if (t == -1) return p.min_mom;  // the constructor's betas
  if (t < total) {
    double bi = double(t + 1), x = 1.0 + bi / total - std::floor(1.0 + bi / total);
    double scale = x <= r ? x / r : (x - 1.0) / (r - 1.0);
    return p.max_mom - (p.max_mom - p.min_mom) * scale;
  }
  if (p.decay_mom_rate == 0) return p.max_mom;
  return p.max_mom * (1.0 + p.decay_mom_rate * (double(t) - total + 1.0) / p.decay_step);
}

TEST(LrScheduler, OneCycle) {
  OneCycleParams p;
  auto s = make("OneCycle", {{"cycle_min_lr", p.min_lr},
                             {"cycle_max_lr", p.max_lr},
                             {"cycle_first_step_size", 10},
                             {"decay_lr_rate", p.decay_lr_rate},
                             {"decay_step_size", 5}});
  for (int64_t t = -1; t <= 40; ++t) {
    EXPECT_NEAR(s->lr(), one_cycle_lr(p, t), 1e-15) << "t=" << t;
    ASSERT_TRUE(s->momentum().has_value());
    EXPECT_NEAR(*s->momentum(), one_cycle_mom(p, t), 1e-15) << "t=" << t;
    EXPECT_EQ(s->beta2(), 0.99);
    s->step();
  }
  // By hand: t = 4 -> x = 0.25, scale 0.5 -> lr 0.055, mom 0.85; t = 9 -> peak 0.1, mom 0.8;
  // t = 20 -> first decay step: 0.01 / (1 + 0.5 * 1/5).
  s->set_last_batch_iteration(4);
  EXPECT_NEAR(s->lr(), 0.055, 1e-15);
  EXPECT_NEAR(*s->momentum(), 0.85, 1e-15);
  s->set_last_batch_iteration(9);
  EXPECT_NEAR(s->lr(), 0.1, 1e-15);
  s->set_last_batch_iteration(20);
  EXPECT_NEAR(s->lr(), 0.01 / 1.1, 1e-15);
  EXPECT_NEAR(*s->momentum(), 0.9, 1e-15);  // no momentum decay rate -> cycle_max_mom
}

TEST(LrScheduler, OneCycleAsymmetricWithMomentumDecay) {
  OneCycleParams p{.min_lr = 1e-4,
                   .max_lr = 1e-3,
                   .first = 6,
                   .second = 4,
                   .decay_lr_rate = 0.1,
                   .decay_step = 3,
                   .min_mom = 0.85,
                   .max_mom = 0.95,
                   .decay_mom_rate = 0.01};
  auto s = make("OneCycle", {{"cycle_min_lr", p.min_lr},
                             {"cycle_max_lr", p.max_lr},
                             {"cycle_first_step_size", 6},
                             {"cycle_second_step_size", 4},
                             {"decay_lr_rate", 0.1},
                             {"decay_step_size", 3},
                             {"cycle_min_mom", 0.85},
                             {"cycle_max_mom", 0.95},
                             {"decay_mom_rate", 0.01}});
  for (int64_t t = -1; t <= 25; ++t) {
    EXPECT_NEAR(s->lr(), one_cycle_lr(p, t), 1e-15) << "t=" << t;
    EXPECT_NEAR(*s->momentum(), one_cycle_mom(p, t), 1e-15) << "t=" << t;
    s->step();
  }
  // No decay_step_size: lr stays at cycle_min_lr after the cycle.
  auto nodecay = make("OneCycle", {{"cycle_min_lr", 0.01},
                                   {"cycle_max_lr", 0.1},
                                   {"cycle_first_step_size", 5},
                                   {"decay_lr_rate", 0.5},
                                   {"cycle_momentum", false}});
  nodecay->set_last_batch_iteration(50);
  EXPECT_NEAR(nodecay->lr(), 0.01, 1e-15);
  EXPECT_FALSE(nodecay->momentum().has_value());
  EXPECT_FALSE(nodecay->beta2().has_value());
  EXPECT_THAT(error_of("OneCycle", {{"cycle_max_lr", 0.1}}),
              HasSubstr("missing required key \"cycle_min_lr\""));
}

TEST(LrScheduler, LrRangeTest) {
  auto s = make("LRRangeTest", {{"lr_range_test_min_lr", 0.001},
                                {"lr_range_test_step_size", 10},
                                {"lr_range_test_step_rate", 2.0}});
  expect_schedule(*s, 30, [](int64_t t) { return 0.001 * (1.0 + 2.0 * double(t + 1) / 10.0); });
  s->set_last_batch_iteration(4);
  EXPECT_NEAR(s->lr(), 0.002, 1e-15);  // 0.001 * (1 + 2 * 0.5)
  auto st = make("LRRangeTest", {{"lr_range_test_min_lr", 0.001},
                                 {"lr_range_test_step_size", 10},
                                 {"lr_range_test_step_rate", 2.0},
                                 {"lr_range_test_staircase", true}});
  expect_schedule(*st, 30,
                  [](int64_t t) { return 0.001 * (1.0 + 2.0 * std::floor(double(t + 1) / 10.0)); });
  st->set_last_batch_iteration(8);
  EXPECT_NEAR(st->lr(), 0.001, 1e-15);
  st->set_last_batch_iteration(9);
  EXPECT_NEAR(st->lr(), 0.003, 1e-15);
}

TEST(LrScheduler, ResumeAndState) {
  // Constructed with last_batch_iteration = 5: DeepSpeed leaves the optimizer's lr alone until
  // the first step(), which moves to t = 6.
  auto s = make("WarmupLR",
                {{"warmup_max_lr", 0.1},
                 {"warmup_num_steps", 10},
                 {"warmup_type", "linear"},
                 {"last_batch_iteration", 5}},
                0.42);
  EXPECT_EQ(s->last_batch_iteration(), 5);
  EXPECT_EQ(s->lr(), 0.42);
  s->step();
  EXPECT_NEAR(s->lr(), 0.1 * 6 / 10, 1e-15);
  EXPECT_EQ(s->state_dict(), nlohmann::json({{"last_batch_iteration", 6}}));
  // load_state_dict: lr follows the formula at the loaded t.
  auto r = make("WarmupLR",
                {{"warmup_max_lr", 0.1}, {"warmup_num_steps", 10}, {"warmup_type", "linear"}});
  r->set_last_batch_iteration(3);
  EXPECT_NEAR(r->lr(), 0.03, 1e-15);
}

TEST(LrScheduler, Errors) {
  EXPECT_THAT(error_of("Warmup", {}),
              HasSubstr("DeepSpeed does not recognize LR scheduler Warmup"));
  EXPECT_THAT(error_of("WarmupLR", {{"warmup_type", "cosine"}}),
              HasSubstr("warmup_type = \"cosine\" is not valid; expected one of log|linear"));
  EXPECT_THAT(error_of("WarmupLR", {{"warmup_num_steps", 10.5}}),
              HasSubstr("warmup_num_steps must be an integer"));
  EXPECT_THAT(error_of("LRRangeTest", {{"lr_range_test_step_size", 0}}),
              HasSubstr("lr_range_test_step_size must be > 0"));
  EXPECT_THAT(error_of("LRRangeTest", {{"min_lr", 0.1}}),
              HasSubstr("unknown key \"min_lr\"; did you mean \"lr_range_test_min_lr\"?"));
}

}  // namespace
}  // namespace zt
