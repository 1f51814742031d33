// Loss scalers against an independent transcription (below) of reference §2's pseudo-code and of
// DeepSpeed's FP16_Optimizer._update_scale, over fixed and random overflow sequences; plus the
// options each config gets, hand-worked windows, hysteresis, and the minimum error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "zt/runtime/loss_scaler.h"

namespace zt {
namespace {

using ::testing::HasSubstr;

// §2, ZeRO stages 1-3 (DynamicLossScaler.update_scale). Returns false where DeepSpeed raises.
struct ZeroOracle {
  double scale, min;
  int window, hyst_cfg, cur_hyst;
  bool consecutive;
  int64_t it = 0, last_overflow = -1;
  bool update(bool overflow) {
    if (overflow) {
      if (hyst_cfg == 1 || cur_hyst == 1) {
        if (scale == min) return false;
        scale = std::max(scale / 2, min);
      } else {
        cur_hyst -= 1;
      }
      last_overflow = it;
    } else {
      if (consecutive) cur_hyst = hyst_cfg;
      if ((it - last_overflow) % window == 0) {
        if (!consecutive) cur_hyst = hyst_cfg;
        scale *= 2;
      }
    }
    it += 1;
    return true;
  }
};

// §2, stage 0 (FP16_Optimizer / FP16_UnfusedOptimizer._update_scale).
struct Stage0Oracle {
  double scale, min;
  int window;
  int64_t it = 0, last_overflow = -1;
  void update(bool overflow) {
    if (overflow) {
      scale = std::max(scale / 2, min);
      last_overflow = it;
    } else {
      int64_t stable = it - last_overflow - 1;
      if (stable > 0 && stable % window == 0) scale *= 2;
    }
    it += 1;
  }
};

DeepSpeedConfig parsed(const std::string& text) {
  Result<DeepSpeedConfig> r = config_parse(text, "test.json", 1);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : DeepSpeedConfig{};
}

TEST(LossScalerOptions, FromConfig) {
  LossScalerOptions o = loss_scaler_options(parsed(R"({"train_batch_size": 1})"));
  EXPECT_EQ(o.kind, LossScalerKind::kStatic);
  EXPECT_EQ(o.init_scale, 1.0);
  EXPECT_FALSE(o.check_overflow);
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1, "bf16": {"enabled": true},
                                     "zero_optimization": {"stage": 2}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kStatic);
  EXPECT_EQ(o.init_scale, 1.0);
  EXPECT_FALSE(o.check_overflow);
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1,
                                     "fp16": {"enabled": true, "loss_scale": 128}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kStatic);
  EXPECT_EQ(o.init_scale, 128.0);
  EXPECT_TRUE(o.check_overflow);
  // ZeRO without dynamic keys: DynamicLossScaler's own defaults, 2^32 and hysteresis 1.
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1, "fp16": {"enabled": true},
                                     "zero_optimization": {"stage": 2}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kZero);
  EXPECT_EQ(o.init_scale, 4294967296.0);
  EXPECT_EQ(o.hysteresis, 1);
  EXPECT_EQ(o.scale_window, 1000);
  EXPECT_EQ(o.min_scale, 1.0);
  // One dynamic key brings every fp16 default: 2^16, hysteresis 2.
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1,
      "fp16": {"enabled": true, "loss_scale_window": 500}, "zero_optimization": {"stage": 3}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kZero);
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.hysteresis, 2);
  EXPECT_EQ(o.scale_window, 500);
  // Stage 0: FusedAdam -> fused (2^initial_scale_power, min 1); others -> unfused (min 0.25).
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1, "fp16": {"enabled": true},
                                     "optimizer": {"type": "Adam"}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kFused);
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.min_scale, 1.0);
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1, "fp16": {"enabled": true}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kFused);
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1, "fp16": {"enabled": true},
                                     "optimizer": {"type": "Lamb"}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kUnfused);
  EXPECT_EQ(o.init_scale, 65536.0);
  EXPECT_EQ(o.min_scale, 0.25);
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1, "fp16": {"enabled": true},
                                     "optimizer": {"type": "SGD"}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kUnfused);
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1, "fp16": {"enabled": true},
      "optimizer": {"type": "Adam", "params": {"torch_adam": true}}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kUnfused);
  o = loss_scaler_options(parsed(R"({"train_batch_size": 1,
      "fp16": {"enabled": true, "initial_scale_power": 10, "min_loss_scale": 4},
      "optimizer": {"type": "Lamb"}})"));
  EXPECT_EQ(o.kind, LossScalerKind::kUnfused);
  EXPECT_EQ(o.init_scale, 1024.0);
  EXPECT_EQ(o.min_scale, 4.0);
}

TEST(LossScaler, ZeroDoublesOneStepBeforeFused) {
  LossScaler zero({.kind = LossScalerKind::kZero,
                   .init_scale = 8,
                   .scale_window = 4,
                   .hysteresis = 1,
                   .consecutive_hysteresis = false,
                   .min_scale = 1});
  LossScaler fused({.kind = LossScalerKind::kFused,
                    .init_scale = 8,
                    .scale_window = 4,
                    .hysteresis = 1,
                    .consecutive_hysteresis = false,
                    .min_scale = 1});
  // ZeRO: (it - (-1)) % 4 == 0 at it = 3, the 4th clean step. Fused: stable = it at it = 4.
  const double zero_expect[] = {8, 8, 8, 16, 16, 16, 16, 32};
  const double fused_expect[] = {8, 8, 8, 8, 16, 16, 16, 16};
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(zero.update(false).is_ok());
    ASSERT_TRUE(fused.update(false).is_ok());
    EXPECT_EQ(zero.scale(), zero_expect[i]) << "step " << i;
    EXPECT_EQ(fused.scale(), fused_expect[i]) << "step " << i;
    EXPECT_TRUE(zero.log_line().empty());
  }
  // After an overflow at it = 8, ZeRO doubles at it = 12 ((12-8) % 4), fused at it = 13.
  ASSERT_TRUE(zero.update(true).is_ok());
  ASSERT_TRUE(fused.update(true).is_ok());
  EXPECT_EQ(zero.scale(), 16);
  EXPECT_EQ(fused.scale(), 8);
  for (int i = 9; i <= 13; ++i) {
    ASSERT_TRUE(zero.update(false).is_ok());
    ASSERT_TRUE(fused.update(false).is_ok());
    if (i == 12) {
      EXPECT_EQ(zero.scale(), 32);
      EXPECT_EQ(fused.scale(), 8);
    }
  }
  EXPECT_EQ(fused.scale(), 16);
  EXPECT_EQ(zero.state().cur_iter, 14);
  EXPECT_EQ(zero.state().last_overflow_iter, 8);
}

TEST(LossScaler, ZeroDefaultWindowIsThousand) {
  LossScalerOptions o = loss_scaler_options(parsed(R"({"train_batch_size": 1,
      "fp16": {"enabled": true}, "zero_optimization": {"stage": 1}})"));
  LossScaler s(o);
  for (int i = 0; i < 999; ++i) ASSERT_TRUE(s.update(false).is_ok());
  EXPECT_EQ(s.scale(), 4294967296.0);
  ASSERT_TRUE(s.update(false).is_ok());
  EXPECT_EQ(s.scale(), 8589934592.0);
}

TEST(LossScaler, HysteresisAndLogLines) {
  LossScaler s({.kind = LossScalerKind::kZero,
                .init_scale = 65536,
                .scale_window = 1000,
                .hysteresis = 2,
                .consecutive_hysteresis = false,
                .min_scale = 1});
  ASSERT_TRUE(s.update(true).is_ok());
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_EQ(s.log_line(),
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
            "65536, but hysteresis is 2. Reducing hysteresis to 1");
  ASSERT_TRUE(s.update(true).is_ok());
  EXPECT_EQ(s.scale(), 32768);
  EXPECT_EQ(s.log_line(),
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
            "65536, reducing to 32768");
  ASSERT_TRUE(s.update(false).is_ok());
  EXPECT_TRUE(s.log_line().empty());
  // Without consecutive_hysteresis the counter stays at 1 until the scale grows: halves again.
  ASSERT_TRUE(s.update(true).is_ok());
  EXPECT_EQ(s.scale(), 16384);

  LossScaler c({.kind = LossScalerKind::kZero,
                .init_scale = 65536,
                .scale_window = 1000,
                .hysteresis = 2,
                .consecutive_hysteresis = true,
                .min_scale = 1});
  ASSERT_TRUE(c.update(true).is_ok());   // hysteresis 2 -> 1
  ASSERT_TRUE(c.update(false).is_ok());  // consecutive: refilled to 2
  ASSERT_TRUE(c.update(true).is_ok());   // 2 -> 1 again, scale kept
  EXPECT_EQ(c.scale(), 65536);
  EXPECT_EQ(c.state().cur_hysteresis, 1);
}

TEST(LossScaler, ZeroAtMinimumIsAnError) {
  LossScaler s({.kind = LossScalerKind::kZero,
                .init_scale = 4,
                .scale_window = 1000,
                .hysteresis = 1,
                .consecutive_hysteresis = false,
                .min_scale = 2});
  ASSERT_TRUE(s.update(true).is_ok());
  EXPECT_EQ(s.scale(), 2);
  LossScalerState before = s.state();
  Status st = s.update(true);
  ASSERT_FALSE(st.is_ok());
  EXPECT_THAT(st.message(), HasSubstr("Current loss scale already at minimum - cannot decrease "
                                      "scale anymore. Exiting run."));
  EXPECT_EQ(s.state().cur_iter, before.cur_iter);  // DeepSpeed raises before touching state
  EXPECT_EQ(s.scale(), 2);
}

TEST(LossScaler, Stage0NeverErrorsAndUnfusedFloorIsQuarter) {
  LossScalerOptions o = loss_scaler_options(parsed(R"({"train_batch_size": 1,
      "fp16": {"enabled": true}, "optimizer": {"type": "Lamb"}})"));
  o.init_scale = 1.0;  // start low to reach the floor quickly
  LossScaler s(o);
  const double expect[] = {0.5, 0.25, 0.25, 0.25};
  for (double e : expect) {
    ASSERT_TRUE(s.update(true).is_ok());
    EXPECT_EQ(s.scale(), e);
  }
  EXPECT_EQ(s.log_line(),
            "[deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted "
            "loss scale: 0.25, reducing to 0.25");
  LossScaler f({.kind = LossScalerKind::kFused,
                .init_scale = 65536,
                .scale_window = 1000,
                .hysteresis = 1,
                .consecutive_hysteresis = false,
                .min_scale = 1});
  ASSERT_TRUE(f.update(true).is_ok());
  EXPECT_EQ(f.log_line(),
            "Overflow detected. Skipping step. Attempted loss scale: 65536.0, reducing to 32768.0");
}

TEST(LossScaler, StaticKeepsItsScale) {
  LossScaler s({.kind = LossScalerKind::kStatic, .init_scale = 128, .check_overflow = true});
  EXPECT_FALSE(s.dynamic());
  EXPECT_TRUE(s.checks_overflow());
  ASSERT_TRUE(s.update(true).is_ok());
  ASSERT_TRUE(s.update(false).is_ok());
  EXPECT_EQ(s.scale(), 128);
  LossScaler none(loss_scaler_options(parsed(R"({"train_batch_size": 1})")));
  EXPECT_FALSE(none.checks_overflow());
}

TEST(LossScaler, RandomSequencesMatchTheTranscription) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    const int window = 1 + static_cast<int>(rng() % 6);
    const int hyst = 1 + static_cast<int>(rng() % 3);
    const bool consecutive = rng() % 2 == 0;
    const double min = (rng() % 2 == 0) ? 1.0 : 0.25;
    const double p_overflow = 0.1 + 0.5 * (rng() % 100) / 100.0;
    std::bernoulli_distribution flip(p_overflow);

    LossScaler zero({.kind = LossScalerKind::kZero,
                     .init_scale = 1024,
                     .scale_window = window,
                     .hysteresis = hyst,
                     .consecutive_hysteresis = consecutive,
                     .min_scale = min});
    ZeroOracle zo{.scale = 1024,
                  .min = min,
                  .window = window,
                  .hyst_cfg = hyst,
                  .cur_hyst = hyst,
                  .consecutive = consecutive};
    LossScaler fused({.kind = LossScalerKind::kFused,
                      .init_scale = 1024,
                      .scale_window = window,
                      .min_scale = min});
    LossScaler unfused({.kind = LossScalerKind::kUnfused,
                        .init_scale = 1024,
                        .scale_window = window,
                        .min_scale = min});
    Stage0Oracle so{.scale = 1024, .min = min, .window = window};
    bool zero_alive = true;
    for (int step = 0; step < 300; ++step) {
      const bool overflow = flip(rng);
      if (zero_alive) {
        const bool oracle_ok = zo.update(overflow);
        const Status st = zero.update(overflow);
        ASSERT_EQ(st.is_ok(), oracle_ok) << "trial " << trial << " step " << step;
        ASSERT_EQ(zero.scale(), zo.scale) << "trial " << trial << " step " << step;
        ASSERT_EQ(zero.state().cur_hysteresis, zo.cur_hyst);
        zero_alive = oracle_ok;
      }
      so.update(overflow);
      ASSERT_TRUE(fused.update(overflow).is_ok());
      ASSERT_TRUE(unfused.update(overflow).is_ok());
      ASSERT_EQ(fused.scale(), so.scale) << "trial " << trial << " step " << step;
      ASSERT_EQ(unfused.scale(), so.scale);
      ASSERT_EQ(!fused.log_line().empty(), overflow);
    }
  }
}

}  // namespace
}  // namespace zt
