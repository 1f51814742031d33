#include "zt/tasks/ppo_math.h"

#include <algorithm>
#include <cmath>

#include "zt/core/assert.h"

namespace zt::tasks::ppo {
namespace {

// A (rows, cols) array's size, checked where a public function receives it.
void check_size(size_t got, int64_t rows, int64_t cols, const char* fn, const char* what) {
  ZT_ASSERT(rows >= 0 && cols >= 0, "ppo::{}: negative shape {} x {}", fn, rows, cols);
  ZT_ASSERT(got == static_cast<size_t>(rows * cols),
            "ppo::{}: {} holds {} values, expected {} x {}", fn, what, got, rows, cols);
}

void check_start(int64_t start, int64_t L, const char* fn) {
  // Python's rewards[j, start:ends[j]][-1] needs a non-empty slice: at least one answer position.
  ZT_ASSERT(start >= 0 && start < L, "ppo::{}: start {} outside [0, L = {})", fn, start, L);
}

// torch.maximum(a, b)'s share of the gradient that goes to a: all, none, or half on a tie.
double max_share(double a, double b) {
  if (a > b) return 1.0;
  if (a < b) return 0.0;
  return 0.5;
}

double mask_sum(std::span<const float> mask) {
  double s = 0;
  for (float m : mask) s += m;
  return s;
}

void check_actor(const ActorLossInputs& in, const char* fn) {
  check_size(in.log_probs.size(), in.B, in.n, fn, "log_probs");
  check_size(in.old_log_probs.size(), in.B, in.n, fn, "old_log_probs");
  check_size(in.advantages.size(), in.B, in.n, fn, "advantages");
  check_size(in.mask.size(), in.B, in.n, fn, "mask");
}

void check_critic(const CriticLossInputs& in, const char* fn) {
  check_size(in.values.size(), in.B, in.n, fn, "values");
  check_size(in.old_values.size(), in.B, in.n, fn, "old_values");
  check_size(in.returns.size(), in.B, in.n, fn, "returns");
  check_size(in.mask.size(), in.B, in.n, fn, "mask");
}

}  // namespace

void gather_log_probs(std::span<const float> logits, std::span<const int32_t> tokens, int64_t B,
                      int64_t L, int64_t V, std::span<float> log_probs) {
  ZT_ASSERT(V >= 1, "ppo::gather_log_probs: vocabulary size {}", V);
  check_size(logits.size(), B * L, V, "gather_log_probs", "logits");
  check_size(tokens.size(), B, L, "gather_log_probs", "tokens");
  check_size(log_probs.size(), B, L, "gather_log_probs", "log_probs");
  for (int64_t r = 0; r < B * L; ++r) {
    const float* row = logits.data() + r * V;
    const int32_t token = tokens[r];
    ZT_ASSERT(token >= 0 && token < V,
              "ppo::gather_log_probs: token {} at position {} is outside the vocabulary of {}",
              token, r, V);
    // log_softmax(x)_k = x_k - max - log(sum_j exp(x_j - max)): every exponent is <= 0, and the
    // sum is >= 1 (the max's own term), so nothing overflows and the log is well defined.
    const double mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
    log_probs[r] = static_cast<float>(static_cast<double>(row[token]) - mx - std::log(sum));
  }
}

std::vector<int64_t> answer_ends(std::span<const float> action_mask, int64_t B, int64_t L,
                                 int64_t start) {
  check_size(action_mask.size(), B, L, "answer_ends", "action_mask");
  check_start(start, L, "answer_ends");
  std::vector<int64_t> ends(static_cast<size_t>(B));
  for (int64_t j = 0; j < B; ++j) {
    int64_t count = 0;
    for (int64_t t = start; t < L; ++t) {
      const float m = action_mask[j * L + t];
      ZT_ASSERT(m == 0.0f || m == 1.0f, "ppo::answer_ends: action_mask[{}, {}] = {} is not 0 or 1",
                j, t, m);
      count += m == 1.0f ? 1 : 0;
    }
    ends[j] = start + count + 1;
  }
  return ends;
}

void compute_rewards(std::span<const float> log_probs, std::span<const float> ref_log_probs,
                     std::span<const float> reward_score, std::span<const float> action_mask,
                     int64_t B, int64_t L, int64_t start, const PpoConfig& config,
                     std::span<float> rewards) {
  check_size(log_probs.size(), B, L, "compute_rewards", "log_probs");
  check_size(ref_log_probs.size(), B, L, "compute_rewards", "ref_log_probs");
  check_size(reward_score.size(), B, 1, "compute_rewards", "reward_score");
  check_size(rewards.size(), B, L, "compute_rewards", "rewards");
  const std::vector<int64_t> ends = answer_ends(action_mask, B, L, start);
  const double clip = config.clip_reward_value;
  for (int64_t j = 0; j < B; ++j) {
    // The last element of the slice [start, ends[j]), which Python cuts at L.
    const int64_t at = std::min(ends[j], L) - 1;
    const double score = std::clamp(static_cast<double>(reward_score[j]), -clip, clip);
    for (int64_t t = 0; t < L; ++t) {
      const size_t i = static_cast<size_t>(j * L + t);
      double r = -config.kl_ctl * (static_cast<double>(log_probs[i]) - ref_log_probs[i]);
      if (t == at) r += score;
      rewards[i] = static_cast<float>(r);
    }
  }
}

void zero_after_ends(std::span<float> x, std::span<const int64_t> ends, int64_t B, int64_t L) {
  check_size(x.size(), B, L, "zero_after_ends", "x");
  check_size(ends.size(), B, 1, "zero_after_ends", "ends");
  for (int64_t i = 0; i < B; ++i) {
    ZT_ASSERT(ends[i] >= 0, "ppo::zero_after_ends: ends[{}] = {}", i, ends[i]);
    for (int64_t t = ends[i]; t < L; ++t) x[i * L + t] = 0.0f;
  }
}

void advantages_and_returns(std::span<const float> values, std::span<const float> rewards,
                            int64_t B, int64_t L, int64_t start, const PpoConfig& config,
                            std::span<float> advantages, std::span<float> returns) {
  check_size(values.size(), B, L, "advantages_and_returns", "values");
  check_size(rewards.size(), B, L, "advantages_and_returns", "rewards");
  check_start(start, L, "advantages_and_returns");
  const int64_t n = L - start;
  check_size(advantages.size(), B, n, "advantages_and_returns", "advantages");
  check_size(returns.size(), B, n, "advantages_and_returns", "returns");
  for (int64_t b = 0; b < B; ++b) {
    const float* v = values.data() + b * L;
    const float* r = rewards.data() + b * L;
    double lastgaelam = 0;
    for (int64_t t = L - 1; t >= start; --t) {
      const double next = t < L - 1 ? static_cast<double>(v[t + 1]) : 0.0;
      const double delta = r[t] + config.gamma * next - v[t];
      lastgaelam = delta + config.gamma * config.lam * lastgaelam;
      advantages[b * n + (t - start)] = static_cast<float>(lastgaelam);
      returns[b * n + (t - start)] = static_cast<float>(lastgaelam + v[t]);
    }
  }
}

std::vector<float> columns_from(std::span<const float> x, int64_t B, int64_t L, int64_t start) {
  check_size(x.size(), B, L, "columns_from", "x");
  ZT_ASSERT(start >= 0 && start <= L, "ppo::columns_from: start {} outside [0, L = {}]", start, L);
  std::vector<float> out;
  out.reserve(static_cast<size_t>(B * (L - start)));
  for (int64_t b = 0; b < B; ++b) {
    out.insert(out.end(), x.begin() + b * L + start, x.begin() + (b + 1) * L);
  }
  return out;
}

double actor_loss(const ActorLossInputs& in, const PpoConfig& config) {
  check_actor(in, "actor_loss");
  const double total = mask_sum(in.mask);
  if (total == 0) return 0.0;  // DeepSpeed-Chat: 0 / 0 = NaN (see the header)
  const double lo = 1.0 - config.cliprange, hi = 1.0 + config.cliprange;
  double sum = 0;
  for (size_t i = 0; i < in.mask.size(); ++i) {
    const double m = in.mask[i], a = in.advantages[i];
    const double ratio = std::exp((static_cast<double>(in.log_probs[i]) - in.old_log_probs[i]) * m);
    const double pg1 = -a * ratio, pg2 = -a * std::clamp(ratio, lo, hi);
    sum += std::max(pg1, pg2) * m;
  }
  return sum / total;
}

void actor_loss_backward(const ActorLossInputs& in, const PpoConfig& config,
                         std::span<float> d_log_probs) {
  check_actor(in, "actor_loss_backward");
  check_size(d_log_probs.size(), in.B, in.n, "actor_loss_backward", "d_log_probs");
  const double total = mask_sum(in.mask);
  if (total == 0) {
    std::fill(d_log_probs.begin(), d_log_probs.end(), 0.0f);
    return;
  }
  const double lo = 1.0 - config.cliprange, hi = 1.0 + config.cliprange;
  for (size_t i = 0; i < in.mask.size(); ++i) {
    const double m = in.mask[i], a = in.advantages[i];
    const double ratio = std::exp((static_cast<double>(in.log_probs[i]) - in.old_log_probs[i]) * m);
    const double pg1 = -a * ratio, pg2 = -a * std::clamp(ratio, lo, hi);
    const double share1 = max_share(pg1, pg2);
    const double clamp_passes = lo <= ratio && ratio <= hi ? 1.0 : 0.0;
    // d max / d ratio, then the chain through ratio = exp((lp - old) * m): * ratio * m.
    const double d_ratio = share1 * -a + (1.0 - share1) * -a * clamp_passes;
    d_log_probs[i] = static_cast<float>(m / total * d_ratio * ratio * m);
  }
}

double critic_loss(const CriticLossInputs& in, const PpoConfig& config) {
  check_critic(in, "critic_loss");
  const double total = mask_sum(in.mask);
  if (total == 0) return 0.0;  // DeepSpeed-Chat: 0 / 0 = NaN (see the header)
  const double c = config.cliprange_value;
  double sum = 0;
  for (size_t i = 0; i < in.mask.size(); ++i) {
    const double v = in.values[i], old = in.old_values[i], ret = in.returns[i];
    const double clipped = std::clamp(v, old - c, old + c);
    const double l1 = (v - ret) * (v - ret), l2 = (clipped - ret) * (clipped - ret);
    sum += std::max(l1, l2) * in.mask[i];
  }
  return 0.5 * sum / total;
}

void critic_loss_backward(const CriticLossInputs& in, const PpoConfig& config,
                          std::span<float> d_values) {
  check_critic(in, "critic_loss_backward");
  check_size(d_values.size(), in.B, in.n, "critic_loss_backward", "d_values");
  const double total = mask_sum(in.mask);
  if (total == 0) {
    std::fill(d_values.begin(), d_values.end(), 0.0f);
    return;
  }
  const double c = config.cliprange_value;
  for (size_t i = 0; i < in.mask.size(); ++i) {
    const double v = in.values[i], old = in.old_values[i], ret = in.returns[i];
    const double clipped = std::clamp(v, old - c, old + c);
    const double l1 = (v - ret) * (v - ret), l2 = (clipped - ret) * (clipped - ret);
    const double share1 = max_share(l1, l2);
    const double clamp_passes = old - c <= v && v <= old + c ? 1.0 : 0.0;
    const double d_max =
        share1 * 2.0 * (v - ret) + (1.0 - share1) * 2.0 * (clipped - ret) * clamp_passes;
    d_values[i] = static_cast<float>(0.5 * in.mask[i] / total * d_max);
  }
}

}  // namespace zt::tasks::ppo
