// ppo_math against DeepSpeed-Chat's dschat/rlhf/ppo_trainer.py. The oracles are independent of
// the code under test: references written here line by line from the Python, in double with naive
// loops, on random batches (several B, L, start, padded answers, scores that need clipping,
// ratios and values on both sides of their clip ranges); small cases worked by hand; both loss
// gradients against central finite differences of those references; gather_log_probs against
// log(softmax) by its definition, and shift invariance where a naive exp overflows.
#include "zt/tasks/ppo_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace zt::tasks::ppo {
namespace {

using Vec = std::vector<float>;
using Dvec = std::vector<double>;

Vec uniform(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (float& x : v) x = d(rng);
  return v;
}

Dvec to_double(const Vec& v) {
  return Dvec(v.begin(), v.end());
}

int64_t uniform_int(int64_t lo, int64_t hi, std::mt19937& rng) {  // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// An action mask (B, L) shaped as generation leaves it: the prompt positions (t < start) left
// padded by a random amount, then answer[j] ones from `start`, then zeros (the right padding).
Vec action_mask_rows(int64_t B, int64_t L, int64_t start, const std::vector<int64_t>& answer,
                     std::mt19937& rng) {
  Vec m(static_cast<size_t>(B * L), 0.0f);
  for (int64_t j = 0; j < B; ++j) {
    const int64_t pad = uniform_int(0, start, rng);
    for (int64_t t = pad; t < start; ++t) m[j * L + t] = 1.0f;
    for (int64_t t = start; t < start + answer[j]; ++t) m[j * L + t] = 1.0f;
  }
  return m;
}

// ---- References: ppo_trainer.py, line by line, in double. ----

// F.log_softmax(logits)[k] by its definition, log(exp(x_k) / sum_j exp(x_j)); only where exp does
// not overflow.
double ref_log_softmax(const double* x, int64_t V, int64_t k) {
  double sum = 0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(x[j]);
  return std::log(std::exp(x[k]) / sum);
}

// compute_rewards, with Python's slice: rewards[j, start:ends[j]][-1] += reward_clip[j].
Dvec ref_compute_rewards(const Dvec& log_probs, const Dvec& ref_log_probs, const Dvec& score,
                         const Dvec& action_mask, int64_t B, int64_t L, int64_t start,
                         const PpoConfig& c, std::vector<int64_t>* ends_out) {
  Dvec rewards(log_probs.size());
  for (size_t i = 0; i < rewards.size(); ++i) {
    rewards[i] = -c.kl_ctl * (log_probs[i] - ref_log_probs[i]);
  }
  std::vector<int64_t> ends(static_cast<size_t>(B));
  for (int64_t j = 0; j < B; ++j) {
    double s = 0;
    for (int64_t t = start; t < L; ++t) s += action_mask[j * L + t];
    ends[j] = start + static_cast<int64_t>(s) + 1;
  }
  for (int64_t j = 0; j < B; ++j) {
    const double reward_clip =
        std::min(std::max(score[j], -c.clip_reward_value), c.clip_reward_value);
    std::vector<int64_t> slice;  // the indices of rewards[j, start:ends[j]]
    for (int64_t t = start; t < ends[j] && t < L; ++t) slice.push_back(t);
    rewards[j * L + slice.back()] += reward_clip;
  }
  if (ends_out != nullptr) *ends_out = ends;
  return rewards;
}

// get_advantages_and_returns: one column at a time over the batch, reversed, then stacked.
void ref_gae(const Dvec& values, const Dvec& rewards, int64_t B, int64_t L, int64_t start,
             const PpoConfig& c, Dvec& advantages, Dvec& returns) {
  Dvec lastgaelam(static_cast<size_t>(B), 0.0);
  std::vector<Dvec> advantages_reversed;
  for (int64_t t = L - 1; t >= start; --t) {
    for (int64_t b = 0; b < B; ++b) {
      const double nextvalues = t < L - 1 ? values[b * L + t + 1] : 0.0;
      const double delta = rewards[b * L + t] + c.gamma * nextvalues - values[b * L + t];
      lastgaelam[b] = delta + c.gamma * c.lam * lastgaelam[b];
    }
    advantages_reversed.push_back(lastgaelam);
  }
  const int64_t n = L - start;
  advantages.assign(static_cast<size_t>(B * n), 0.0);
  returns.assign(static_cast<size_t>(B * n), 0.0);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t b = 0; b < B; ++b) {
      advantages[b * n + k] = advantages_reversed[n - 1 - k][b];
      returns[b * n + k] = advantages[b * n + k] + values[b * L + start + k];
    }
  }
}

// actor_loss_fn.
double ref_actor_loss(const Dvec& logprobs, const Dvec& old_logprobs, const Dvec& advantages,
                      const Dvec& mask, double cliprange) {
  double num = 0, den = 0;
  for (size_t i = 0; i < mask.size(); ++i) {
    const double log_ratio = (logprobs[i] - old_logprobs[i]) * mask[i];
    const double ratio = std::exp(log_ratio);
    const double pg_loss1 = -advantages[i] * ratio;
    const double pg_loss2 =
        -advantages[i] * std::min(std::max(ratio, 1.0 - cliprange), 1.0 + cliprange);
    num += std::max(pg_loss1, pg_loss2) * mask[i];
    den += mask[i];
  }
  return num / den;
}

// critic_loss_fn.
double ref_critic_loss(const Dvec& values, const Dvec& old_values, const Dvec& returns,
                       const Dvec& mask, double cliprange_value) {
  double num = 0, den = 0;
  for (size_t i = 0; i < mask.size(); ++i) {
    const double values_clipped = std::min(std::max(values[i], old_values[i] - cliprange_value),
                                           old_values[i] + cliprange_value);
    const double vf_loss1 = (values[i] - returns[i]) * (values[i] - returns[i]);
    const double vf_loss2 = (values_clipped - returns[i]) * (values_clipped - returns[i]);
    num += std::max(vf_loss1, vf_loss2) * mask[i];
    den += mask[i];
  }
  return 0.5 * num / den;
}

// Central finite differences of f at x, coordinate by coordinate.
template <typename F>
Dvec finite_differences(F f, Dvec x, double h) {
  Dvec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = f(x);
    x[i] = x0 - h;
    const double down = f(x);
    x[i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// ---- gather_log_probs ----

TEST(PpoGatherLogProbs, EqualsLogSoftmaxByDefinition) {
  std::mt19937 rng(1);
  for (auto [B, L, V] : {std::tuple<int64_t, int64_t, int64_t>{2, 3, 7}, {1, 5, 50}, {3, 1, 2}}) {
    const Vec logits = uniform(static_cast<size_t>(B * L * V), -8.0f, 8.0f, rng);
    std::vector<int32_t> tokens(static_cast<size_t>(B * L));
    for (int32_t& t : tokens) t = static_cast<int32_t>(uniform_int(0, V - 1, rng));
    Vec out(tokens.size());
    gather_log_probs(logits, tokens, B, L, V, out);
    const Dvec x = to_double(logits);
    for (int64_t r = 0; r < B * L; ++r) {
      const double want = ref_log_softmax(x.data() + r * V, V, tokens[r]);
      EXPECT_NEAR(out[r], want, 1e-6 * (1 + std::abs(want)))
          << "B " << B << " V " << V << " r " << r;
    }
  }
}

TEST(PpoGatherLogProbs, LogitsNearPlusOrMinus1e4WhereExpOverflows) {
  // log_softmax(x + s) = log_softmax(x): the shifted logits (rounded to float) must give what
  // the definition gives for the same float values with the shift taken back out (exactly, in
  // double), where exp of the logits themselves overflows to inf or underflows to 0.
  std::mt19937 rng(2);
  const int64_t B = 2, L = 3, V = 11;
  for (float shift : {1e4f, -1e4f}) {
    Vec logits = uniform(static_cast<size_t>(B * L * V), -6.0f, 6.0f, rng);
    for (float& x : logits) x += shift;
    if (shift > 0) {
      EXPECT_TRUE(std::isinf(std::exp(logits[0])));  // a naive softmax would give inf / inf
    } else {
      EXPECT_EQ(std::exp(logits[0]), 0.0f);  // ... or 0 / 0
    }
    std::vector<int32_t> tokens(static_cast<size_t>(B * L));
    for (int32_t& t : tokens) t = static_cast<int32_t>(uniform_int(0, V - 1, rng));
    Vec out(tokens.size());
    gather_log_probs(logits, tokens, B, L, V, out);
    Dvec unshifted(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) unshifted[i] = double{logits[i]} - double{shift};
    for (int64_t r = 0; r < B * L; ++r) {
      const double want = ref_log_softmax(unshifted.data() + r * V, V, tokens[r]);
      ASSERT_TRUE(std::isfinite(out[r]));
      EXPECT_NEAR(out[r], want, 1e-6 * (1 + std::abs(want))) << "shift " << shift << " r " << r;
    }
  }
}

TEST(PpoGatherLogProbs, OneDominantLogitByHand) {
  // Logits {1e4, 0, -3, 5}: the sum of exp(x_j - 1e4) is 1 + e^-1e4 + ..., which is 1 in double,
  // so log p_k = x_k - 1e4: {0, -1e4, -10003, -9995}, all exact in float.
  const Vec row = {1e4f, 0.0f, -3.0f, 5.0f};
  Vec logits;
  for (int i = 0; i < 4; ++i) logits.insert(logits.end(), row.begin(), row.end());
  const std::vector<int32_t> tokens = {0, 1, 2, 3};
  Vec out(4);
  gather_log_probs(logits, tokens, 1, 4, 4, out);
  EXPECT_EQ(out, (Vec{0.0f, -1e4f, -10003.0f, -9995.0f}));
}

// ---- compute_rewards, the zeroing, GAE ----

TEST(PpoRewards, TwoRowsByHand) {
  // B = 2, L = 4, start = 1 (prompt_len 2), kl_ctl 0.1, clip 5.
  // Row 0: log_probs - ref = {0.5, -1, 0, -1} -> KL part {-0.05, 0.1, 0, 0.1}. Its answer fills
  //   the row: sum(mask[1:]) = 3, ends = 1 + 3 + 1 = 5; rewards[0, 1:5] is positions 1..3 (the
  //   slice stops at L), so the score 7 -> clamp 5 lands on 3: {-0.05, 0.1, 0, 5.1}.
  // Row 1: KL part {0, 0, 0, 0.1}. One answer token: ends = 1 + 1 + 1 = 3, the score -6.5 -> -5
  //   lands on position 2, whose mask is 0 (DeepSpeed-Chat's eos slot): {0, 0, -5, 0.1}; zeroing
  //   from ends = 3 then gives {0, 0, -5, 0}.
  const Vec lp = {-1, -2, -0.5, -3, -1, -1, -1, -2};
  const Vec ref = {-1.5, -1, -0.5, -2, -1, -1, -1, -1};
  const Vec score = {7.0f, -6.5f};
  const Vec mask = {0, 1, 1, 1, 1, 1, 0, 0};
  const PpoConfig c;
  Vec rewards(8);
  compute_rewards(lp, ref, score, mask, 2, 4, 1, c, rewards);
  const Vec want = {-0.05f, 0.1f, 0.0f, 5.1f, 0.0f, 0.0f, -5.0f, 0.1f};
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(rewards[i], want[i], 1e-6) << i;

  const std::vector<int64_t> ends = answer_ends(mask, 2, 4, 1);
  EXPECT_EQ(ends, (std::vector<int64_t>{5, 3}));
  Vec values = {0.3f, 0.5f, 1.0f, 2.0f, 0.2f, 0.4f, 0.8f, 9.0f};
  zero_after_ends(rewards, ends, 2, 4);
  zero_after_ends(values, ends, 2, 4);
  EXPECT_EQ(rewards[7], 0.0f);
  EXPECT_EQ(values[7], 0.0f);  // the 9 would otherwise flow into row 1's advantages
  EXPECT_EQ(values[3], 2.0f);  // ends = 5 >= L: row 0 keeps everything

  // GAE, gamma 1, lam 0.95, from t = 3 down to start = 1.
  // Row 0: t3: 5.1 + 0 - 2 = 3.1 -> A 3.1; t2: 0 + 2 - 1 = 1 -> A 1 + 0.95 * 3.1 = 3.945;
  //        t1: 0.1 + 1 - 0.5 = 0.6 -> A 0.6 + 0.95 * 3.945 = 4.34775; returns A + {0.5, 1, 2}.
  // Row 1: t3: 0 + 0 - 0 = 0 -> A 0; t2: -5 + 0 - 0.8 = -5.8 -> A -5.8;
  //        t1: 0 + 0.8 - 0.4 = 0.4 -> A 0.4 - 0.95 * 5.8 = -5.11; returns A + {0.4, 0.8, 0}.
  Vec adv(6), ret(6);
  advantages_and_returns(values, rewards, 2, 4, 1, c, adv, ret);
  const Vec want_adv = {4.34775f, 3.945f, 3.1f, -5.11f, -5.8f, 0.0f};
  const Vec want_ret = {4.84775f, 4.945f, 5.1f, -4.71f, -5.0f, 0.0f};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NEAR(adv[i], want_adv[i], 1e-5) << i;
    EXPECT_NEAR(ret[i], want_ret[i], 1e-5) << i;
  }
}

TEST(PpoAdvantages, ThreePositionsByHand) {
  // B = 1, L = 3, gamma 1, lam 0.95, values {0.5, 1, 2}, rewards {0, 0, 1}:
  //   t2: delta = 1 + 0 - 2 = -1              A2 = -1
  //   t1: delta = 0 + 2 - 1 = 1               A1 = 1 + 0.95 * -1 = 0.05
  //   t0: delta = 0 + 1 - 0.5 = 0.5           A0 = 0.5 + 0.95 * 0.05 = 0.5475
  //   returns = A + values = {1.0475, 1.05, 1}.
  // From start = 1 the columns t >= 1 are the same: nothing before start feeds them.
  const Vec values = {0.5f, 1.0f, 2.0f}, rewards = {0.0f, 0.0f, 1.0f};
  const PpoConfig c;
  Vec adv(3), ret(3);
  advantages_and_returns(values, rewards, 1, 3, 0, c, adv, ret);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(adv[i], (Vec{0.5475f, 0.05f, -1.0f})[i], 1e-6) << i;
    EXPECT_NEAR(ret[i], (Vec{1.0475f, 1.05f, 1.0f})[i], 1e-6) << i;
  }
  Vec adv1(2), ret1(2);
  advantages_and_returns(values, rewards, 1, 3, 1, c, adv1, ret1);
  EXPECT_NEAR(adv1[0], 0.05f, 1e-6);
  EXPECT_NEAR(adv1[1], -1.0f, 1e-6);
  EXPECT_NEAR(ret1[0], 1.05f, 1e-6);
  EXPECT_NEAR(ret1[1], 1.0f, 1e-6);
}

TEST(PpoRewards, ColumnsFromCopiesTheAnswerColumns) {
  const Vec x = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(columns_from(x, 2, 3, 1), (Vec{2, 3, 5, 6}));
  EXPECT_EQ(columns_from(x, 2, 3, 0), x);
}

// train_rlhf's no-grad block against the reference on random batches: compute_rewards, ends, the
// zeroing of rewards and values, GAE; and GAE alone on unzeroed inputs.
TEST(PpoRewards, TrainRlhfTargetsEqualReference) {
  std::mt19937 rng(3);
  int clipped = 0, unclipped = 0, padded = 0, full = 0;
  for (int64_t B : {1, 3, 5}) {
    for (int64_t L : {2, 5, 9}) {
      std::vector<int64_t> starts = {0, L / 2, L - 1};
      starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
      for (int64_t start : starts) {
        for (double gamma : {1.0, 0.9}) {
          PpoConfig c;
          c.gamma = gamma;
          c.kl_ctl = 0.05 + 0.1 * static_cast<double>(B % 2);
          const size_t N = static_cast<size_t>(B * L);
          const Vec lp = uniform(N, -5.0f, 0.0f, rng), ref = uniform(N, -5.0f, 0.0f, rng);
          const Vec score = uniform(static_cast<size_t>(B), -12.0f, 12.0f, rng);
          std::vector<int64_t> answer(static_cast<size_t>(B));
          for (int64_t j = 0; j < B; ++j) answer[j] = uniform_int(0, L - start, rng);
          answer[0] = L - start;  // one row whose answer fills it (ends = L + 1)
          const Vec mask = action_mask_rows(B, L, start, answer, rng);
          for (int64_t j = 0; j < B; ++j) {
            (std::abs(score[j]) > c.clip_reward_value ? clipped : unclipped) += 1;
            (answer[j] < L - start ? padded : full) += 1;
          }

          std::vector<int64_t> want_ends;
          Dvec want_rewards = ref_compute_rewards(to_double(lp), to_double(ref), to_double(score),
                                                  to_double(mask), B, L, start, c, &want_ends);
          Vec rewards(N);
          compute_rewards(lp, ref, score, mask, B, L, start, c, rewards);
          for (size_t i = 0; i < N; ++i) {
            ASSERT_NEAR(rewards[i], want_rewards[i], 1e-5) << "B " << B << " L " << L << " i " << i;
          }
          const std::vector<int64_t> ends = answer_ends(mask, B, L, start);
          ASSERT_EQ(ends, want_ends);

          // GAE on the raw (unzeroed) inputs.
          const Vec values = uniform(N, -2.0f, 2.0f, rng);
          const int64_t n = L - start;
          Dvec want_adv, want_ret;
          ref_gae(to_double(values), want_rewards, B, L, start, c, want_adv, want_ret);
          Vec adv(static_cast<size_t>(B * n)), ret(adv.size());
          advantages_and_returns(values, rewards, B, L, start, c, adv, ret);
          for (size_t i = 0; i < adv.size(); ++i) {
            ASSERT_NEAR(adv[i], want_adv[i], 1e-4 * (1 + std::abs(want_adv[i]))) << i;
            ASSERT_NEAR(ret[i], want_ret[i], 1e-4 * (1 + std::abs(want_ret[i]))) << i;
          }

          // train_rlhf: old_rewards[i, ends[i]:] = 0; old_values[i, ends[i]:] = 0; then GAE.
          Dvec old_rewards = want_rewards, old_values = to_double(values);
          for (int64_t i = 0; i < B; ++i) {
            for (int64_t t = want_ends[i]; t < L; ++t) {
              old_rewards[i * L + t] = 0;
              old_values[i * L + t] = 0;
            }
          }
          ref_gae(old_values, old_rewards, B, L, start, c, want_adv, want_ret);
          Vec zr = rewards, zv = values;
          zero_after_ends(zr, ends, B, L);
          zero_after_ends(zv, ends, B, L);
          for (size_t i = 0; i < N; ++i) {
            ASSERT_NEAR(zr[i], old_rewards[i], 1e-5) << i;
            ASSERT_EQ(zv[i], static_cast<float>(old_values[i])) << i;
          }
          advantages_and_returns(zv, zr, B, L, start, c, adv, ret);
          for (int64_t b = 0; b < B; ++b) {
            for (int64_t k = 0; k < n; ++k) {
              const size_t i = static_cast<size_t>(b * n + k);
              ASSERT_NEAR(adv[i], want_adv[i], 1e-4 * (1 + std::abs(want_adv[i]))) << i;
              ASSERT_NEAR(ret[i], want_ret[i], 1e-4 * (1 + std::abs(want_ret[i]))) << i;
              // Past the end nothing is left to discount: exactly 0.
              if (start + k >= ends[b]) {
                ASSERT_EQ(adv[i], 0.0f);
                ASSERT_EQ(ret[i], 0.0f);
              }
            }
          }
        }
      }
    }
  }
  // The sweep saw both sides of each branch.
  EXPECT_GT(clipped, 0);
  EXPECT_GT(unclipped, 0);
  EXPECT_GT(padded, 0);
  EXPECT_GT(full, 0);
}

// ---- actor loss ----

TEST(PpoActorLoss, FourPositionsByHand) {
  // cliprange 0.2, mask {1, 1, 1, 0}, sum 3; old log probs 0, so ratio = exp(log_probs).
  //   i0: ratio 1.5, A 1:   pg1 -1.5, pg2 -1 * 1.2 = -1.2  -> max -1.2 (clamped: gradient 0)
  //   i1: ratio 0.5, A 1:   pg1 -0.5, pg2 -1 * 0.8 = -0.8  -> max -0.5, d/dlp = -1 * 0.5 / 3
  //   i2: ratio 1.5, A -2:  pg1 3,    pg2 2 * 1.2 = 2.4    -> max 3,    d/dlp = 2 * 1.5 / 3 = 1
  //   i3: masked: log_ratio = 0, contributes 0, gradient 0
  //   loss = (-1.2 - 0.5 + 3) / 3 = 1.3 / 3.
  const Vec lp = {std::log(1.5f), std::log(0.5f), std::log(1.5f), 5.0f};
  const Vec old = {0, 0, 0, 0}, adv = {1, 1, -2, 4}, mask = {1, 1, 1, 0};
  const ActorLossInputs in{
      .log_probs = lp, .old_log_probs = old, .advantages = adv, .mask = mask, .B = 1, .n = 4};
  const PpoConfig c;
  EXPECT_NEAR(actor_loss(in, c), 1.3 / 3, 1e-6);
  Vec g(4);
  actor_loss_backward(in, c, g);
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_NEAR(g[1], -1.0 / 6, 1e-6);
  EXPECT_NEAR(g[2], 1.0, 1e-6);
  EXPECT_EQ(g[3], 0.0f);
}

TEST(PpoActorLoss, TieInsideTheClipRangeGivesTheFullGradient) {
  // log_probs == old: ratio 1, so pg1 == pg2 and torch.max sends half to each; the clamp passes
  // (0.8 <= 1 <= 1.2), so the halves add to -A * ratio / sum(mask): {-0.35, 0.65}.
  // loss = (-0.7 + 1.3) / 2 = 0.3.
  const Vec lp = {-0.7f, -0.7f}, adv = {0.7f, -1.3f}, mask = {1, 1};
  const ActorLossInputs in{
      .log_probs = lp, .old_log_probs = lp, .advantages = adv, .mask = mask, .B = 2, .n = 1};
  const PpoConfig c;
  EXPECT_NEAR(actor_loss(in, c), 0.3, 1e-7);
  Vec g(2);
  actor_loss_backward(in, c, g);
  EXPECT_NEAR(g[0], -0.35, 1e-7);
  EXPECT_NEAR(g[1], 0.65, 1e-7);
}

// Random actor inputs: old log probs, then log_probs = old + d with d in [-0.6, 0.6], so ratios
// run from 0.55 to 1.8 (inside and outside [0.8, 1.2]). `away_from_kinks` redraws d where the
// ratio sits within 1e-3 of a clip bound and A where it is near 0 (the two branches would tie).
struct ActorCase {
  Vec lp, old, adv, mask;
  int64_t B = 0, n = 0;
  ActorLossInputs inputs() const {
    return {.log_probs = lp, .old_log_probs = old, .advantages = adv, .mask = mask, .B = B, .n = n};
  }
};

ActorCase random_actor_case(int64_t B, int64_t n, bool real_weights, std::mt19937& rng,
                            double cliprange) {
  ActorCase k;
  k.B = B;
  k.n = n;
  const size_t N = static_cast<size_t>(B * n);
  k.old = uniform(N, -4.0f, -0.1f, rng);
  k.adv = uniform(N, -2.0f, 2.0f, rng);
  std::vector<int64_t> answer(static_cast<size_t>(B));
  for (int64_t j = 0; j < B; ++j) answer[j] = uniform_int(j == 0 ? 1 : 0, n, rng);
  k.mask = action_mask_rows(B, n, 0, answer, rng);
  if (real_weights) {
    for (float& m : k.mask) m *= uniform(1, 0.2f, 1.0f, rng)[0];
  }
  k.lp.resize(N);
  for (size_t i = 0; i < N; ++i) {
    while (std::abs(k.adv[i]) < 0.05f) k.adv[i] = uniform(1, -2.0f, 2.0f, rng)[0];
    for (;;) {
      k.lp[i] = k.old[i] + uniform(1, -0.6f, 0.6f, rng)[0];
      const double ratio = std::exp((double{k.lp[i]} - k.old[i]) * k.mask[i]);
      if (std::abs(ratio - (1 - cliprange)) > 1e-3 && std::abs(ratio - (1 + cliprange)) > 1e-3) {
        break;
      }
    }
  }
  return k;
}

TEST(PpoActorLoss, EqualsReferenceAndFiniteDifferences) {
  std::mt19937 rng(4);
  const PpoConfig c;
  int inside = 0, outside = 0;
  for (bool real_weights : {false, true}) {
    for (auto [B, n] : {std::pair<int64_t, int64_t>{1, 1}, {1, 6}, {4, 6}, {3, 13}}) {
      const ActorCase k = random_actor_case(B, n, real_weights, rng, c.cliprange);
      for (size_t i = 0; i < k.mask.size(); ++i) {
        if (k.mask[i] == 0) continue;
        const double ratio = std::exp((double{k.lp[i]} - k.old[i]) * k.mask[i]);
        (ratio < 1 - c.cliprange || ratio > 1 + c.cliprange ? outside : inside) += 1;
      }
      const Dvec old = to_double(k.old), adv = to_double(k.adv), mask = to_double(k.mask);
      const double want = ref_actor_loss(to_double(k.lp), old, adv, mask, c.cliprange);
      EXPECT_NEAR(actor_loss(k.inputs(), c), want, 1e-6 * (1 + std::abs(want)))
          << "B " << B << " n " << n;

      const Dvec fd = finite_differences(
          [&](const Dvec& lp) { return ref_actor_loss(lp, old, adv, mask, c.cliprange); },
          to_double(k.lp), 1e-6);
      Vec g(k.lp.size());
      actor_loss_backward(k.inputs(), c, g);
      for (size_t i = 0; i < g.size(); ++i) {
        EXPECT_NEAR(g[i], fd[i], 1e-5 * (1 + std::abs(fd[i])))
            << "B " << B << " n " << n << " i " << i << " mask " << k.mask[i];
      }
    }
  }
  EXPECT_GT(inside, 0);
  EXPECT_GT(outside, 0);
}

// ---- critic loss ----

TEST(PpoCriticLoss, FourPositionsByHand) {
  // cliprange_value 0.25 (exact in binary), old values 1 (so the clip range is [0.75, 1.25]),
  // mask {1, 1, 1, 0}, sum 3.
  //   i0: v 1.5, R 0: clipped 1.25; l1 2.25, l2 1.5625 -> max l1, d = 0.5 * 2 * 1.5 / 3 = 0.5
  //   i1: v 1.5, R 3: clipped 1.25; l1 2.25, l2 3.0625 -> max l2, clamped: d = 0
  //   i2: v 1.25 (on the bound), R 2: clipped 1.25; l1 = l2 = 0.5625, a tie; the clamp passes
  //       (bounds included), so both halves count: d = 0.5 * 2 * (1.25 - 2) / 3 = -0.25
  //   i3: masked: d = 0
  //   loss = 0.5 * (2.25 + 3.0625 + 0.5625) / 3 = 0.5 * 5.875 / 3.
  const Vec v = {1.5f, 1.5f, 1.25f, 9.0f}, old = {1, 1, 1, 0}, ret = {0, 3, 2, 0};
  const Vec mask = {1, 1, 1, 0};
  const CriticLossInputs in{
      .values = v, .old_values = old, .returns = ret, .mask = mask, .B = 2, .n = 2};
  PpoConfig c;
  c.cliprange_value = 0.25;
  EXPECT_NEAR(critic_loss(in, c), 0.5 * 5.875 / 3, 1e-7);
  Vec g(4);
  critic_loss_backward(in, c, g);
  EXPECT_NEAR(g[0], 0.5, 1e-7);
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_NEAR(g[2], -0.25, 1e-7);
  EXPECT_EQ(g[3], 0.0f);
}

TEST(PpoCriticLoss, TieOutsideTheClipRangeSplitsHalf) {
  // torch.max's half-and-half rule shows only where the two branches tie with different
  // gradients: v 1.5 clipped to 1.25 (old 1, cliprange_value 0.25) and the return 1.375 midway,
  // so l1 = 0.125^2 = l2 = (-0.125)^2. The unclipped half gives 0.5 * 2 * 0.125, the clipped half
  // 0 (clamped): d = 0.5 * 0.5 * 2 * 0.125 = 0.0625 (0.125 if a tie went to the first argument, 0
  // if to the second). (The actor's branches tie outside the range only where A = 0.)
  const Vec v = {1.5f}, old = {1.0f}, ret = {1.375f}, mask = {1.0f};
  const CriticLossInputs in{
      .values = v, .old_values = old, .returns = ret, .mask = mask, .B = 1, .n = 1};
  PpoConfig c;
  c.cliprange_value = 0.25;
  EXPECT_EQ(critic_loss(in, c), 0.5 * 0.015625);
  Vec g(1);
  critic_loss_backward(in, c, g);
  EXPECT_EQ(g[0], 0.0625f);
}

struct CriticCase {
  Vec v, old, ret, mask;
  int64_t B = 0, n = 0;
  CriticLossInputs inputs() const {
    return {.values = v, .old_values = old, .returns = ret, .mask = mask, .B = B, .n = n};
  }
};

// Random critic inputs: values = old + d, d in [-0.5, 0.5], so values fall inside and outside
// old +- 0.2. Away from kinks: d is redrawn within 1e-3 of a clip bound, and where the value is
// clipped, while the two squared errors are within 1e-3 of each other (a max tie).
CriticCase random_critic_case(int64_t B, int64_t n, bool real_weights, std::mt19937& rng,
                              double c) {
  CriticCase k;
  k.B = B;
  k.n = n;
  const size_t N = static_cast<size_t>(B * n);
  k.old = uniform(N, -2.0f, 2.0f, rng);
  k.ret = uniform(N, -3.0f, 3.0f, rng);
  std::vector<int64_t> answer(static_cast<size_t>(B));
  for (int64_t j = 0; j < B; ++j) answer[j] = uniform_int(j == 0 ? 1 : 0, n, rng);
  k.mask = action_mask_rows(B, n, 0, answer, rng);
  if (real_weights) {
    for (float& m : k.mask) m *= uniform(1, 0.2f, 1.0f, rng)[0];
  }
  k.v.resize(N);
  for (size_t i = 0; i < N; ++i) {
    for (;;) {
      k.v[i] = k.old[i] + uniform(1, -0.5f, 0.5f, rng)[0];
      const double v = k.v[i], lo = double{k.old[i]} - c, hi = double{k.old[i]} + c;
      if (std::abs(v - lo) < 1e-3 || std::abs(v - hi) < 1e-3) continue;
      const double clipped = std::min(std::max(v, lo), hi), r = k.ret[i];
      if (clipped != v && std::abs((v - r) * (v - r) - (clipped - r) * (clipped - r)) < 1e-3) {
        continue;
      }
      break;
    }
  }
  return k;
}

TEST(PpoCriticLoss, EqualsReferenceAndFiniteDifferences) {
  std::mt19937 rng(5);
  const PpoConfig c;
  int inside = 0, outside = 0;
  for (bool real_weights : {false, true}) {
    for (auto [B, n] : {std::pair<int64_t, int64_t>{1, 1}, {1, 6}, {4, 6}, {3, 13}}) {
      const CriticCase k = random_critic_case(B, n, real_weights, rng, c.cliprange_value);
      for (size_t i = 0; i < k.mask.size(); ++i) {
        if (k.mask[i] == 0) continue;
        (std::abs(double{k.v[i]} - k.old[i]) > c.cliprange_value ? outside : inside) += 1;
      }
      const Dvec old = to_double(k.old), ret = to_double(k.ret), mask = to_double(k.mask);
      const double want = ref_critic_loss(to_double(k.v), old, ret, mask, c.cliprange_value);
      EXPECT_NEAR(critic_loss(k.inputs(), c), want, 1e-6 * (1 + std::abs(want)))
          << "B " << B << " n " << n;

      const Dvec fd = finite_differences(
          [&](const Dvec& v) { return ref_critic_loss(v, old, ret, mask, c.cliprange_value); },
          to_double(k.v), 1e-6);
      Vec g(k.v.size());
      critic_loss_backward(k.inputs(), c, g);
      for (size_t i = 0; i < g.size(); ++i) {
        EXPECT_NEAR(g[i], fd[i], 1e-5 * (1 + std::abs(fd[i])))
            << "B " << B << " n " << n << " i " << i << " mask " << k.mask[i];
      }
    }
  }
  EXPECT_GT(inside, 0);
  EXPECT_GT(outside, 0);
}

// ---- an empty mask ----

TEST(PpoLosses, AllMaskedGivesZeroLossAndGradientNotNaN) {
  // DeepSpeed-Chat would divide 0 by 0; we return 0 (see ppo_math.h).
  const Vec x = {0.3f, -1.0f, 2.0f}, y = {-0.2f, 0.5f, 1.0f}, z = {1.0f, -1.0f, 0.5f};
  const Vec mask = {0, 0, 0};
  const PpoConfig c;
  const ActorLossInputs a{
      .log_probs = x, .old_log_probs = y, .advantages = z, .mask = mask, .B = 1, .n = 3};
  const CriticLossInputs k{
      .values = x, .old_values = y, .returns = z, .mask = mask, .B = 1, .n = 3};
  EXPECT_EQ(actor_loss(a, c), 0.0);
  EXPECT_EQ(critic_loss(k, c), 0.0);
  Vec g(3, 7.0f);
  actor_loss_backward(a, c, g);
  EXPECT_EQ(g, Vec(3, 0.0f));
  g.assign(3, 7.0f);
  critic_loss_backward(k, c, g);
  EXPECT_EQ(g, Vec(3, 0.0f));
}

// ---- contracts ----

TEST(PpoMathDeathTest, WrongSizesAndStartAbort) {
  const Vec four = {0, 0, 0, 0};
  Vec three(3);
  const PpoConfig c;
  EXPECT_DEATH(compute_rewards(four, four, Vec{1, 1}, four, 2, 2, 0, c, three),
               "rewards holds 3 values");
  EXPECT_DEATH(answer_ends(four, 2, 2, 2), "start 2 outside");
  EXPECT_DEATH(answer_ends(Vec{0, 0.5f, 1, 1}, 2, 2, 0), "is not 0 or 1");
}

}  // namespace
}  // namespace zt::tasks::ppo
