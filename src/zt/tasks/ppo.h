// DeepSpeed-Chat's step 3 (RLHF with PPO), one experience batch at a time, over ZeroTrain's
// engines: the actor (a causal LM) and the critic (a value head: a reward model's
// nn::Task::kReward head read at every position) each train in an Engine; the frozen reference
// actor and the reward model are only evaluated. One round, as dschat/rlhf/ppo_trainer.py runs it:
//
//   generate_experience  the actor answers B prompts (nn::generate_batch, greedy or sampled, up
//                        to max_answer_len tokens, ending at an end-of-sequence id); seq =
//                        prompt + answer, right-padded to the longest prompt + max_answer_len;
//                        log-probs of seq[1:] under the actor and the reference, the critic's
//                        values, the reward score of each row's last real token
//   train_rlhf           rewards (the score minus the KL penalty), advantages and returns
//                        (tasks/ppo_math.h), then per PPO epoch one actor step on the clipped
//                        policy loss (Engine::forward_token_losses / backward_weighted) and one
//                        critic step on the clipped value loss (forward_outputs /
//                        backward_outputs)
//
// Rows are not left-padded: every row starts at position 0 (prompts of different lengths are
// generated together without padding: nn::generate_batch), so the causal models need no
// attention mask, and padding after an answer never reaches an earlier position and is outside
// the action mask. The PPO arithmetic then sees the rows moved right so that every prompt ends in
// one column (PpoExperience), which is DeepSpeed-Chat's left-padded layout.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "zt/core/status.h"
#include "zt/nn/generate.h"
#include "zt/nn/models/transformer.h"
#include "zt/runtime/engine.h"
#include "zt/tasks/ppo_math.h"

namespace zt::tasks {

class TpInference;

struct PpoOptions {
  ppo::PpoConfig ppo{};
  int ppo_epochs = 1;         // --ppo-epochs
  int max_answer_len = 256;   // --max-answer-seq-len
  int32_t pad_id = 0;         // what follows an answer that ended early
  // Generation: sampling, temperature, top-k/p, eos ids, seed (advanced per round); vocab_size,
  // max_seq_len and num_layers are filled from the actor.
  nn::GenerateOptions generation{};
  // DeepSpeed-Chat's unsupervised mix (--unsupervised-dataset, --unsup-coef): when set, each PPO
  // epoch also takes one actor step on the language-model loss of the next batch it gives
  // (tokens and next-token targets, (B,T) i32, -100 not counted), that loss times unsup_coef.
  std::function<Result<std::pair<Tensor, Tensor>>()> unsup_next{};
  double unsup_coef = 27.8;
  // DeepSpeed-Chat's --enable-hybrid-engine: the actor's weights gathered whole once per
  // generation phase (Engine::hold_full_weights; at ZeRO-3 on several ranks, one gather instead
  // of one per unit per decode step), generation and the experience's actor forward run on them
  // without hooks or per-step agreement between ranks, then the gathered copy is released
  // before training. Below ZeRO-3 the weights are whole already and nothing changes.
  bool hybrid_engine = false;
  // --inference-tp-size above 1 (with hybrid_engine): generation runs on this tensor-parallel
  // inference layout (not owned), filled from the actor for each generation phase and freed
  // after; the experience's actor log-probs then come from the training layout.
  TpInference* tp_inference = nullptr;
};

// The reward of each row: B scores from the finished rows (prompt + answer, right-padded) and
// each row's position of its last real token.
using RewardFn = std::function<Result<std::vector<float>>(const Tensor& seq,
                                                          const std::vector<int64_t>& last)>;

// A model that is only evaluated (the reference actor, the reward model): its forward-only
// context and the hooks its forwards run with - an engine's (eval_context(), hooks(): ZeRO-3
// gathers its shards) or none (weights bound by runtime/inference.h).
struct FrozenModel {
  nn::Transformer& model;
  nn::Context context;
  nn::UnitHooks* hooks = nullptr;
};
FrozenModel frozen(nn::Transformer& model, Engine& engine);

// The reward model's value (B,T) at each row's last real token (DeepSpeed-Chat's
// chosen_end_scores).
RewardFn reward_model_scores(FrozenModel reward_model);

struct PpoModels {
  nn::Transformer& actor;
  Engine& actor_engine;
  nn::Transformer& critic;  // a value head (nn::Task::kReward)
  Engine& critic_engine;
  FrozenModel ref;          // the reference actor
  RewardFn reward;
};

// One round's experience. The rows of `seq` start at position 0 (prompt, answer, padding); the
// per-position arrays are (B, L), L = T - 1, in the PPO layout: row b moved right by shift[b] =
// prompt_len - its prompt's length, so that every prompt ends in column start = prompt_len - 1
// (DeepSpeed-Chat's left-padded layout; the columns before a row's start are 0 and masked).
// Column c of row b is seq position c - shift[b].
struct PpoExperience {
  Tensor seq;      // (B, T) i32, host
  Tensor targets;  // (B, T) i32, host: seq's next token at each position, -100 at the last
  int64_t B = 0, T = 0, prompt_len = 0;  // prompt_len: the longest prompt
  std::vector<int64_t> shift;  // per row
  std::vector<int64_t> last;  // each row's last real token (a seq position)
  std::vector<float> log_probs, ref_log_probs, values, action_mask;
  std::vector<float> reward_score;  // (B)
  double generate_s = 0;
  int64_t generated_tokens = 0;
};

struct PpoRoundStats {
  double reward_mean = 0;      // the scores' mean
  double answer_len_mean = 0;  // generated tokens per row
  double kl = 0;               // mean over answer positions of log p_actor - log p_ref
  double actor_loss = 0, critic_loss = 0;  // over the PPO epochs' steps
  double unsup_loss = 0;                    // the unsupervised batches' mean loss (unscaled)
  double generate_s = 0, train_s = 0;
  double generate_tokens_per_s = 0, train_tokens_per_s = 0;
};

// One actor step on a language-model batch whose mean loss (over the targets that count: not
// -100) is scaled by `coef`: DeepSpeed-Chat's train_unsupervised. Returns the unscaled mean.
Result<double> scaled_lm_step(Engine& engine, const Tensor& tokens, const Tensor& targets,
                              double coef);

class PpoTrainer {
 public:
  PpoTrainer(PpoModels models, PpoOptions options);
  // B prompts (token ids, of any lengths): the experience of one round. Collective over the
  // engines' ranks (every rank passes its own prompts, as many on each).
  Result<PpoExperience> generate_experience(const std::vector<std::vector<int32_t>>& prompts);
  // The PPO epochs over a round's experiences (DeepSpeed-Chat's --generation-batches of them):
  // each epoch one actor and one critic step on each experience in turn, then (with
  // unsup_next) one unsupervised actor step, on the round's unsupervised batches (drawn once a
  // round, one per experience, reused by every epoch), then set_after_actor_step's call; after
  // each epoch the experiences and the unsupervised batches are shuffled, each on its own, as
  // DeepSpeed-Chat's loop does. Collective.
  Result<PpoRoundStats> train_rlhf(std::span<const PpoExperience> exps);
  Result<PpoRoundStats> train_rlhf(const PpoExperience& exp) { return train_rlhf({&exp, 1}); }
  // A round: the experience of each batch of prompts in turn, then train_rlhf on all of them.
  Result<PpoRoundStats> round(const std::vector<std::vector<std::vector<int32_t>>>& batches);
  Result<PpoRoundStats> round(const std::vector<std::vector<int32_t>>& prompts) {
    return round(std::vector<std::vector<std::vector<int32_t>>>{prompts});
  }
  // Called after every PPO step of the actor (and its unsupervised step): the EMA of
  // DeepSpeed-Chat's --enable-ema.
  void set_after_actor_step(std::function<Status()> fn) { after_actor_step_ = std::move(fn); }

 private:
  // -log p(seq[t+1]) at every position t < T-1 of `seq` under `model` (evaluation, no gradient).
  std::vector<float> log_probs(nn::Transformer& model, nn::Context ctx, nn::UnitHooks* hooks,
                               const Tensor& seq, const Tensor& targets);
  PpoModels m_;
  PpoOptions o_;
  std::function<Status()> after_actor_step_{};
  std::mt19937_64 shuffle_rng_;  // the experiences' order in each PPO epoch
  int64_t generations_ = 0;  // each draws from its own seed
};

}  // namespace zt::tasks
