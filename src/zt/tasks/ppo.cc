#include "zt/tasks/ppo.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>

#include "zt/core/assert.h"
#include "zt/runtime/engine.h"
#include "zt/tasks/tp_inference.h"

namespace zt::tasks {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// targets (B,T): the next token at every position but the last (-100 there).
Tensor next_token_targets(const Tensor& seq) {
  const int64_t B = seq.size(0), T = seq.size(1);
  Tensor t = Tensor::empty({B, T}, DType::i32);
  const int32_t* s = seq.data<int32_t>();
  int32_t* o = t.data<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i + 1 < T; ++i) o[b * T + i] = s[b * T + i + 1];
    o[b * T + T - 1] = kIgnoreTarget;
  }
  return t;
}

// Columns start .. start + n - 1 of the PPO layout (B, n) from per-position values of seq (B, T):
// column start + j of row b is position start + j - shift[b].
std::vector<float> answer_columns(const std::vector<double>& per_position, const PpoExperience& e,
                                  int64_t start, int64_t n) {
  std::vector<float> out(static_cast<size_t>(e.B * n));
  for (int64_t b = 0; b < e.B; ++b) {
    for (int64_t j = 0; j < n; ++j) {
      out[static_cast<size_t>(b * n + j)] = static_cast<float>(
          per_position[static_cast<size_t>(b * e.T + start + j - e.shift[static_cast<size_t>(b)])]);
    }
  }
  return out;
}

// The inverse: (B, n) column values at their positions of a (B, T) array, 0 elsewhere.
std::vector<float> at_positions(const std::vector<float>& columns, const PpoExperience& e,
                                int64_t start, int64_t n) {
  std::vector<float> out(static_cast<size_t>(e.B * e.T), 0.0f);
  for (int64_t b = 0; b < e.B; ++b) {
    for (int64_t j = 0; j < n; ++j) {
      out[static_cast<size_t>(b * e.T + start + j - e.shift[static_cast<size_t>(b)])] =
          columns[static_cast<size_t>(b * n + j)];
    }
  }
  return out;
}

// Per-position values (B, L) of rows that start at position 0 moved right by each row's shift
// (the PPO layout: every prompt ends in the same column, as DeepSpeed-Chat's left padding puts
// it); the columns before a row's start hold 0.
std::vector<float> to_ppo_layout(const std::vector<float>& v, const std::vector<int64_t>& shift,
                                 int64_t L) {
  std::vector<float> out(v.size(), 0.0f);
  for (size_t b = 0; b < shift.size(); ++b) {
    const int64_t k = shift[b];
    for (int64_t c = k; c < L; ++c) {
      out[b * static_cast<size_t>(L) + static_cast<size_t>(c)] = v[b * static_cast<size_t>(L) + static_cast<size_t>(c - k)];
    }
  }
  return out;
}

}  // namespace

FrozenModel frozen(nn::Transformer& model, Engine& engine) {
  return {model, engine.eval_context(), engine.hooks()};
}

RewardFn reward_model_scores(FrozenModel rm) {
  return [rm](const Tensor& seq, const std::vector<int64_t>& last) -> Result<std::vector<float>> {
    if (rm.model.transformer_config().task != nn::Task::kReward) {
      return invalid_argument("the reward model is a {} model without a value head",
                              rm.model.transformer_config().model_type);
    }
    nn::Context ctx = rm.context;
    const Tensor dev = seq.to(ctx.device, ctx.stream);
    const std::vector<double> v = rm.model.forward(ctx, dev, rm.hooks).to_doubles();
    const int64_t T = seq.size(1);
    std::vector<float> out;
    for (size_t b = 0; b < last.size(); ++b) {
      out.push_back(static_cast<float>(v[b * static_cast<size_t>(T) + static_cast<size_t>(last[b])]));
    }
    return out;
  };
}

Result<double> scaled_lm_step(Engine& engine, const Tensor& tokens, const Tensor& targets,
                              double coef) {
  ZT_ASSIGN_OR_RETURN(std::vector<double> losses, engine.forward_token_losses(tokens, targets));
  const int32_t* tg = targets.data<int32_t>();
  int64_t counted = 0;
  double sum = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) {
    if (tg[i] == kIgnoreTarget) continue;
    ++counted;
    sum += losses[static_cast<size_t>(i)];
  }
  // d (coef * mean) / d loss_i = coef / counted at the counted positions.
  std::vector<float> w(losses.size(), 0.0f);
  for (int64_t i = 0; i < targets.numel(); ++i) {
    if (tg[i] != kIgnoreTarget) w[static_cast<size_t>(i)] = static_cast<float>(coef / static_cast<double>(counted));
  }
  const double mean = counted > 0 ? sum / static_cast<double>(counted) : 0.0;
  ZT_RETURN_IF_ERROR(engine.backward_weighted(w, static_cast<float>(mean)));
  ZT_RETURN_IF_ERROR(engine.step());
  return mean;
}

PpoTrainer::PpoTrainer(PpoModels models, PpoOptions options)
    : m_(std::move(models)), o_(std::move(options)), shuffle_rng_(o_.generation.seed) {}

std::vector<float> PpoTrainer::log_probs(nn::Transformer& model, nn::Context ctx,
                                         nn::UnitHooks* hooks, const Tensor& seq,
                                         const Tensor& targets) {
  const Tensor t = targets.to(ctx.device, ctx.stream);
  ctx.mode = nn::Mode::kEval;
  ctx.targets = &t;
  const std::vector<double> losses =
      model.forward(ctx, seq.to(ctx.device, ctx.stream), hooks).to_doubles();
  const int64_t B = seq.size(0), T = seq.size(1), L = T - 1;
  std::vector<float> out(static_cast<size_t>(B * L));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      out[static_cast<size_t>(b * L + i)] = static_cast<float>(-losses[static_cast<size_t>(b * T + i)]);
    }
  }
  return out;
}

Result<PpoExperience> PpoTrainer::generate_experience(
    const std::vector<std::vector<int32_t>>& prompts) {
  if (prompts.empty()) return invalid_argument("PPO needs at least one prompt");
  const int64_t B = static_cast<int64_t>(prompts.size());
  int64_t P = 0, Pmin = std::numeric_limits<int64_t>::max();  // the longest and shortest
  for (const auto& p : prompts) {
    if (p.empty()) return invalid_argument("PPO prompts need at least one token");
    P = std::max<int64_t>(P, static_cast<int64_t>(p.size()));
    Pmin = std::min<int64_t>(Pmin, static_cast<int64_t>(p.size()));
  }
  if (o_.max_answer_len < 1) return invalid_argument("max_answer_len must be at least 1");
  const nn::TransformerConfig& ac = m_.actor.transformer_config();
  Engine& actor_engine = m_.actor_engine;
  const int64_t T = P + o_.max_answer_len;
  const bool too_long = T > ac.max_positions;
  // Every rank learns the others' shortest and longest prompts (collective generation runs
  // from the one to the other) and whether any rank's round is refused, before any collective
  // of the round (one alone would wait for the others).
  int64_t group_min = Pmin, group_max = P;
  if (actor_engine.world_size() > 1) {
    std::vector<double> span{-static_cast<double>(Pmin), static_cast<double>(P),
                             too_long ? 1.0 : 0.0};
    ZT_RETURN_IF_ERROR(actor_engine.all_reduce_job(span, ReduceOp::kMax)
                           .with_context("agreeing on the prompts' lengths: "));
    group_min = static_cast<int64_t>(-span[0]);
    group_max = static_cast<int64_t>(span[1]);
    if (span[2] != 0.0 && !too_long) {
      return invalid_argument("another rank's prompt + answer exceed the actor's context of {}",
                              ac.max_positions);
    }
  }
  if (too_long) {
    return invalid_argument("prompt {} + answer {} tokens exceed the actor's context of {}", P,
                            o_.max_answer_len, ac.max_positions);
  }
  PpoExperience e;
  e.B = B;
  e.T = T;
  e.prompt_len = P;
  for (const auto& p : prompts) e.shift.push_back(P - static_cast<int64_t>(p.size()));
  nn::GenerateOptions g = o_.generation;
  g.max_new_tokens = o_.max_answer_len;
  g.vocab_size = ac.vocab_size;
  g.max_seq_len = static_cast<int>(ac.max_positions);
  g.num_layers = ac.n_layer;
  g.seed = o_.generation.seed + static_cast<uint64_t>(generations_++) * 1000003ULL;
  // The hybrid engine: the whole weights held for generation and the actor's log-probs (and
  // released on every way out); forwards then need no hooks and ranks no agreement.
  TpInference* tp = o_.hybrid_engine ? o_.tp_inference : nullptr;
  const bool held = o_.hybrid_engine && tp == nullptr && actor_engine.config().zero.stage == 3;
  if (held) ZT_RETURN_IF_ERROR(actor_engine.hold_full_weights());
  struct Release {
    Engine* e;
    ~Release() {
      if (e != nullptr) e->release_full_weights();
    }
  } release{held ? &actor_engine : nullptr};
  nn::UnitHooks* actor_hooks = held ? nullptr : actor_engine.hooks();
  Status sync = Status::ok();
  if (!held && tp == nullptr && actor_engine.world_size() > 1) {
    // The forwards are collective: every rank runs as many, from the shortest prompt of any
    // rank to the longest one's end.
    g.group_min_prompt = group_min;
    g.group_max_prompt = group_max;
    // Every rank decodes until the last rank's rows have finished (the actor's forwards are
    // collective under ZeRO-3; a rank whose rows ended early keeps stepping them, discarding).
    // A failed agreement stops generation and is the round's error.
    Engine& engine = m_.actor_engine;
    g.everyone_done = [&engine, &sync](bool local_done) {
      std::vector<double> not_done{local_done ? 0.0 : 1.0};
      sync = engine.all_reduce_job(not_done, ReduceOp::kMax);
      return !sync.is_ok() || not_done[0] == 0.0;
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> answers;
  if (tp != nullptr) {
    // The tensor-parallel layout: filled, generated on by the group, freed (all counted as
    // generation time, as the hybrid engine's switch is part of it).
    Status filled = tp->fill();
    auto a = filled.is_ok() ? tp->generate(prompts, g)
                            : Result<std::vector<std::vector<int32_t>>>(filled);
    tp->release();
    if (!a) return a.status();
    answers = std::move(a).value();
  } else {
    answers = nn::generate_batch(m_.actor, actor_engine.eval_context(), prompts, g, actor_hooks);
  }
  e.generate_s = seconds_since(t0);
  ZT_RETURN_IF_ERROR(sync.with_context("generation: "));

  // seq = prompt + answer + padding (each row from position 0: the models see no padding
  // before a prompt); the mask of real tokens, shifted: the action mask. The per-position
  // arrays are then moved right by each row's shift into the PPO layout.
  e.seq = Tensor::empty({B, T}, DType::i32);
  int32_t* s = e.seq.data<int32_t>();
  std::vector<float> real(static_cast<size_t>(B * T), 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[static_cast<size_t>(b)];
    const auto& a = answers[static_cast<size_t>(b)];
    const auto Pb = static_cast<int64_t>(p.size());
    e.generated_tokens += static_cast<int64_t>(a.size());
    for (int64_t i = 0; i < T; ++i) {
      int32_t v = o_.pad_id;
      if (i < Pb) {
        v = p[static_cast<size_t>(i)];
      } else if (i - Pb < static_cast<int64_t>(a.size())) {
        v = a[static_cast<size_t>(i - Pb)];
      }
      s[b * T + i] = v;
      real[static_cast<size_t>(b * T + i)] =
          i < Pb + static_cast<int64_t>(a.size()) ? 1.0f : 0.0f;
    }
    e.last.push_back(Pb + static_cast<int64_t>(a.size()) - 1);
  }
  const int64_t L = T - 1;
  std::vector<float> action(static_cast<size_t>(B * L));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      action[static_cast<size_t>(b * L + i)] = real[static_cast<size_t>(b * T + i + 1)];
    }
  }
  e.action_mask = to_ppo_layout(action, e.shift, L);
  e.targets = next_token_targets(e.seq);
  e.log_probs = to_ppo_layout(
      log_probs(m_.actor, actor_engine.eval_context(), actor_hooks, e.seq, e.targets), e.shift, L);
  if (held) {
    actor_engine.release_full_weights();
    release.e = nullptr;
  }
  e.ref_log_probs = to_ppo_layout(
      log_probs(m_.ref.model, m_.ref.context, m_.ref.hooks, e.seq, e.targets), e.shift, L);
  {
    nn::Context ctx = m_.critic_engine.eval_context();
    const std::vector<double> v =
        m_.critic.forward(ctx, e.seq.to(ctx.device, ctx.stream), m_.critic_engine.hooks())
            .to_doubles();
    std::vector<float> values(static_cast<size_t>(B * L));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < L; ++i) {
        values[static_cast<size_t>(b * L + i)] = static_cast<float>(v[static_cast<size_t>(b * T + i)]);
      }
    }
    e.values = to_ppo_layout(values, e.shift, L);
  }
  ZT_ASSIGN_OR_RETURN(e.reward_score, m_.reward(e.seq, e.last));
  if (static_cast<int64_t>(e.reward_score.size()) != B) {
    return invalid_argument("the reward gave {} scores for {} rows", e.reward_score.size(), B);
  }
  return e;
}

namespace {

// What an experience's training steps read, computed once without gradient: rewards, then
// advantages and returns over the zeroed rows, and the columns from `start` on.
struct Prepared {
  int64_t start = 0, n = 0;
  std::vector<float> adv, ret, old_lp, old_v, mask;
};

Prepared prepare(const PpoExperience& e, const ppo::PpoConfig& cfg) {
  const int64_t B = e.B, L = e.T - 1;
  Prepared p;
  p.start = e.prompt_len - 1;
  p.n = L - p.start;
  std::vector<float> rewards(static_cast<size_t>(B * L));
  ppo::compute_rewards(e.log_probs, e.ref_log_probs, e.reward_score, e.action_mask, B, L, p.start,
                       cfg, rewards);
  const std::vector<int64_t> ends = ppo::answer_ends(e.action_mask, B, L, p.start);
  std::vector<float> old_values = e.values;
  ppo::zero_after_ends(rewards, ends, B, L);
  ppo::zero_after_ends(old_values, ends, B, L);
  p.adv.resize(static_cast<size_t>(B * p.n));
  p.ret.resize(static_cast<size_t>(B * p.n));
  ppo::advantages_and_returns(old_values, rewards, B, L, p.start, cfg, p.adv, p.ret);
  p.old_lp = ppo::columns_from(e.log_probs, B, L, p.start);
  p.old_v = ppo::columns_from(old_values, B, L, p.start);
  p.mask = ppo::columns_from(e.action_mask, B, L, p.start);
  return p;
}

}  // namespace

Result<PpoRoundStats> PpoTrainer::train_rlhf(std::span<const PpoExperience> exps) {
  if (exps.empty()) return invalid_argument("train_rlhf needs at least one experience");
  const ppo::PpoConfig& cfg = o_.ppo;
  const auto G = static_cast<double>(exps.size());
  PpoRoundStats st;
  double kl = 0, counted = 0;
  int64_t generated = 0, rows = 0, trained = 0;
  std::vector<Prepared> prepared;
  for (const PpoExperience& e : exps) {
    const int64_t L = e.T - 1, start = e.prompt_len - 1;
    for (float r : e.reward_score) st.reward_mean += r;
    rows += e.B;
    for (size_t i = 0; i < e.action_mask.size(); ++i) {
      if (e.action_mask[i] == 0.0f || static_cast<int64_t>(i) % L < start) continue;
      kl += e.log_probs[i] - e.ref_log_probs[i];
      counted += 1;
    }
    generated += e.generated_tokens;
    st.generate_s += e.generate_s;
    trained += e.B * e.T;
    prepared.push_back(prepare(e, cfg));
  }
  st.reward_mean /= static_cast<double>(rows);
  st.kl = counted > 0 ? kl / counted : 0;
  // DeepSpeed-Chat's unsupervised batches: one per experience, collected with them and reused
  // by every PPO epoch.
  std::vector<std::pair<Tensor, Tensor>> unsup;
  if (o_.unsup_next) {
    for (size_t i = 0; i < exps.size(); ++i) {
      ZT_ASSIGN_OR_RETURN(auto batch, o_.unsup_next());
      unsup.push_back(std::move(batch));
    }
  }
  std::vector<size_t> exp_order(exps.size()), unsup_order(unsup.size());
  std::iota(exp_order.begin(), exp_order.end(), size_t{0});
  std::iota(unsup_order.begin(), unsup_order.end(), size_t{0});
  const double steps = o_.ppo_epochs * G;
  const auto t0 = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < o_.ppo_epochs; ++epoch) {
    for (size_t i = 0; i < exps.size(); ++i) {
      const size_t x = exp_order[i];
      const PpoExperience& e = exps[x];
      const Prepared& p = prepared[x];
      const int64_t B = e.B, T = e.T, start = p.start, n = p.n;
      // The actor: the clipped policy loss over the answer columns, through the head's
      // per-token cross-entropy (-log p) weighted by -d loss / d log p.
      ZT_ASSIGN_OR_RETURN(std::vector<double> losses,
                          m_.actor_engine.forward_token_losses(e.seq, e.targets));
      std::vector<float> lp = answer_columns(losses, e, start, n);
      for (float& x : lp) x = -x;  // -log p -> log p
      const ppo::ActorLossInputs ai{.log_probs = lp, .old_log_probs = p.old_lp,
                                    .advantages = p.adv, .mask = p.mask, .B = B, .n = n};
      const double actor_loss = ppo::actor_loss(ai, cfg);
      std::vector<float> dlp(lp.size());
      ppo::actor_loss_backward(ai, cfg, dlp);
      for (float& x : dlp) x = -x;  // d loss / d (-log p)
      const std::vector<float> w = at_positions(dlp, e, start, n);
      ZT_RETURN_IF_ERROR(m_.actor_engine.backward_weighted(w, static_cast<float>(actor_loss)));
      ZT_RETURN_IF_ERROR(m_.actor_engine.step());

      // The critic: the clipped value loss over the same columns, from its (B,T) values.
      ZT_ASSIGN_OR_RETURN(Tensor values, m_.critic_engine.forward_outputs(e.seq));
      const std::vector<float> v = answer_columns(values.to_doubles(), e, start, n);
      const ppo::CriticLossInputs ci{.values = v, .old_values = p.old_v, .returns = p.ret,
                                     .mask = p.mask, .B = B, .n = n};
      const double critic_loss = ppo::critic_loss(ci, cfg);
      std::vector<float> dv(v.size());
      ppo::critic_loss_backward(ci, cfg, dv);
      const std::vector<float> dout = at_positions(dv, e, start, n);
      ZT_RETURN_IF_ERROR(m_.critic_engine.backward_outputs(
          Tensor::from_floats(dout, {B, T}, DType::f32), static_cast<float>(critic_loss)));
      ZT_RETURN_IF_ERROR(m_.critic_engine.step());
      st.actor_loss += actor_loss / steps;
      st.critic_loss += critic_loss / steps;
      if (!unsup.empty()) {
        // The actor on a language-model batch: its mean loss over the counted targets, times
        // unsup_coef (DeepSpeed-Chat's actor_model.backward(unsup_coef * loss)).
        const auto& [tokens, targets] = unsup[unsup_order[i]];
        ZT_ASSIGN_OR_RETURN(const double mean,
                            scaled_lm_step(m_.actor_engine, tokens, targets, o_.unsup_coef));
        st.unsup_loss += mean / steps;
      }
      if (after_actor_step_) ZT_RETURN_IF_ERROR(after_actor_step_());
    }
    // As DeepSpeed-Chat after each PPO epoch: the experiences and the unsupervised batches in
    // new (independent) orders; the same on every rank.
    std::shuffle(exp_order.begin(), exp_order.end(), shuffle_rng_);
    std::shuffle(unsup_order.begin(), unsup_order.end(), shuffle_rng_);
  }
  st.train_s = seconds_since(t0);
  st.answer_len_mean = static_cast<double>(generated) / static_cast<double>(rows);
  st.generate_tokens_per_s = st.generate_s > 0 ? static_cast<double>(generated) / st.generate_s : 0;
  st.train_tokens_per_s =
      st.train_s > 0 ? 2.0 * o_.ppo_epochs * static_cast<double>(trained) / st.train_s : 0;
  return st;
}

Result<PpoRoundStats> PpoTrainer::round(
    const std::vector<std::vector<std::vector<int32_t>>>& batches) {
  std::vector<PpoExperience> exps;
  for (const auto& prompts : batches) {
    ZT_ASSIGN_OR_RETURN(PpoExperience e, generate_experience(prompts));
    exps.push_back(std::move(e));
  }
  return train_rlhf(exps);
}

}  // namespace zt::tasks
