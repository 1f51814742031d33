// The PPO arithmetic of DeepSpeed-Chat's step 3 (RLHF), as dschat/rlhf/ppo_trainer.py computes it,
// in plain host math: no tensors, no device, nothing above zt/core.
//
// Arrays are row-major float spans with explicit dimensions. A batch is B sequences of T tokens
// (the prompt, left padded to prompt_len, then the answer, right padded); every per-position array
// is (B, L) with L = T - 1, position t holding what a model said at token t about token t + 1
// (DeepSpeed-Chat's logits[:, :-1] against seq[:, 1:]). `start` = prompt_len - 1 is the first
// position that predicts an answer token. action_mask is attention_mask[:, 1:]: 1 where the
// predicted token is real, 0 where it is padding.
//
// One step, in train_rlhf's order:
//   experience:  log_probs, ref_log_probs = gather_log_probs(actor's / ref's logits, seq[:, 1:])
//                values = critic(seq)[:, :-1]; reward_score = the reward model's end score (B)
//   no gradient: rewards = compute_rewards(...); ends = answer_ends(action_mask, start)
//                zero_after_ends(rewards), zero_after_ends(values)  -> old_rewards, old_values
//                advantages, returns = advantages_and_returns(old_values, old_rewards, start)
//   losses over the n = L - start answer columns (columns_from(x, start) for the (B, L) arrays):
//                actor_loss(new log_probs, log_probs, advantages, action_mask)
//                critic_loss(new values, old_values (zeroed), returns, action_mask)
//
// Faithful to the Python, including what looks like a slip (DeepSpeedExamples PR #672, issue
// #888; the maintainers keep it): the answer length is the count of 1s in action_mask[:, start:],
// and the clipped score lands on position ends - 1 = start + that count, which for a padded answer
// is one past the last masked-in position (it predicts the first pad, DeepSpeed-Chat's eos). That
// position is outside the loss mask, so the score reaches the losses through GAE only. An answer
// that fills the row puts ends - 1 at L; Python's slice stops at L, so the score lands on L - 1.
//
// One deliberate difference: a mask that sums to 0 gives loss 0 and gradient 0, where
// DeepSpeed-Chat divides 0 by 0 and gets NaN, so an empty micro-batch cannot poison a step.
//
// Arithmetic is in double inside and rounded once to float on the way out, so results are
// torch's float32 ones to within float rounding. A branch decision (a clamp bound, a max tie) can
// differ from torch's only for an input within rounding of the bound. Inputs are assumed finite.
// Shapes are the caller's invariants: a wrong size is a ZT_ASSERT.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace zt::tasks::ppo {

// DeepSpeedPPOTrainer.__init__'s constants ("Those value can be changed").
struct PpoConfig {
  double kl_ctl = 0.1;             // weight of the per-token KL penalty
  double clip_reward_value = 5.0;  // reward scores are clamped to [-this, this]
  double cliprange = 0.2;          // policy ratio clip: [1 - this, 1 + this]
  double cliprange_value = 0.2;    // value clip around the old values: old +- this
  double gamma = 1.0;              // discount
  double lam = 0.95;               // GAE lambda
};

// dschat/utils/utils.py moving_average's default.
inline constexpr float kEmaBeta = 0.992f;

// log_softmax(logits)[token] per position: logits (B, L, V), tokens (B, L) in [0, V), out (B, L).
// Max-subtracted with the log-sum-exp in double, so logits of any finite size (1e4 and beyond,
// where exp overflows) give the exact value rounded to float.
void gather_log_probs(std::span<const float> logits, std::span<const int32_t> tokens, int64_t B,
                      int64_t L, int64_t V, std::span<float> log_probs);

// ends[j] = start + sum(action_mask[j, start:]) + 1 for each row: one past the reward's position
// (before Python's slice clamps it), and where zero_after_ends starts. action_mask (B, L) holds
// 0 or 1; 0 <= start < L.
std::vector<int64_t> answer_ends(std::span<const float> action_mask, int64_t B, int64_t L,
                                 int64_t start);

// rewards (B, L) = -kl_ctl * (log_probs - ref_log_probs) at every position, plus the score of row
// j clamped to [-clip_reward_value, clip_reward_value] at position min(ends[j], L) - 1.
// log_probs, ref_log_probs, action_mask (B, L); reward_score (B).
void compute_rewards(std::span<const float> log_probs, std::span<const float> ref_log_probs,
                     std::span<const float> reward_score, std::span<const float> action_mask,
                     int64_t B, int64_t L, int64_t start, const PpoConfig& config,
                     std::span<float> rewards);

// x[i, ends[i]:] = 0 for each row of x (B, L), in place: train_rlhf does this to the rewards and to
// the old values (which the critic loss then reads zeroed) so that GAE sees nothing past an answer.
void zero_after_ends(std::span<float> x, std::span<const int64_t> ends, int64_t B, int64_t L);

// GAE (trlx's, as DeepSpeed-Chat adopts it) over positions start..L-1, backwards:
//   delta_t = rewards_t + gamma * values_{t+1} - values_t   (values_L = 0)
//   A_t = delta_t + gamma * lam * A_{t+1}                    (A_L = 0)
// advantages and returns = advantages + values[:, start:] are (B, n), n = L - start. No mask: the
// rows are expected zeroed past their ends (zero_after_ends), which makes A_t = 0 there.
void advantages_and_returns(std::span<const float> values, std::span<const float> rewards,
                            int64_t B, int64_t L, int64_t start, const PpoConfig& config,
                            std::span<float> advantages, std::span<float> returns);

// x[:, start:] of x (B, L), contiguous (B, L - start): the loss functions' column slices.
std::vector<float> columns_from(std::span<const float> x, int64_t B, int64_t L, int64_t start);

// The losses and their gradients. Each loss is a mean over the whole micro-batch's masked
// positions (sum(... * mask) / sum(mask)), not a mean of row means. The mask is used as a real
// weight, as torch would; DeepSpeed-Chat's is 0/1.
//
// Gradients are the subgradients torch's autograd gives, at the loss's own scale (upstream
// gradient 1), overwriting the output:
//   torch.max(a, b) of two tensors (aten::maximum) sends the gradient to a where a > b, to b where
//     b > a, and half to each where a == b. Inside the clip range the clamped branch equals the
//     unclamped one, so the halves add up to the unclamped gradient.
//   torch.clamp(x, lo, hi) passes the gradient where lo <= x <= hi, bounds included, else 0.

struct ActorLossInputs {
  std::span<const float> log_probs;      // (B, n): the actor's now (the gradient is for these)
  std::span<const float> old_log_probs;  // (B, n): at generation
  std::span<const float> advantages;     // (B, n)
  std::span<const float> mask;           // (B, n): action_mask[:, start:]
  int64_t B = 0, n = 0;
};

// ratio = exp((log_probs - old_log_probs) * mask)
// loss = sum(max(-A * ratio, -A * clamp(ratio, 1 - cliprange, 1 + cliprange)) * mask) / sum(mask)
double actor_loss(const ActorLossInputs& in, const PpoConfig& config);
// d loss / d log_probs (B, n) = mask/sum(mask) * dmax/dratio * ratio * mask, where dmax/dratio is
// -A from the unclamped side and -A (inside the clip range) or 0 (outside) from the clamped one.
void actor_loss_backward(const ActorLossInputs& in, const PpoConfig& config,
                         std::span<float> d_log_probs);

struct CriticLossInputs {
  std::span<const float> values;      // (B, n): the critic's now (the gradient is for these)
  std::span<const float> old_values;  // (B, n): at generation, zeroed past the ends
  std::span<const float> returns;     // (B, n)
  std::span<const float> mask;        // (B, n): action_mask[:, start:]
  int64_t B = 0, n = 0;
};

// clipped = clamp(values, old_values - cliprange_value, old_values + cliprange_value)
// loss = 0.5 * sum(max((values - returns)^2, (clipped - returns)^2) * mask) / sum(mask)
double critic_loss(const CriticLossInputs& in, const PpoConfig& config);
// d loss / d values (B, n) = mask/sum(mask) * 0.5 * dmax/dvalues, where dmax/dvalues is
// 2 (values - returns) from the unclipped side and 2 (clipped - returns) (inside the clip range)
// or 0 (outside) from the clipped one.
void critic_loss_backward(const CriticLossInputs& in, const PpoConfig& config,
                          std::span<float> d_values);

}  // namespace zt::tasks::ppo
