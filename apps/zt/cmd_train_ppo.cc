// `zt train --task ppo`: DeepSpeed-Chat's step 3 (tasks/ppo.h). The actor (an SFT model: step 1)
// and the critic (a reward model: step 2, which also scores the answers, frozen) each train in
// an engine with the DeepSpeed config (its optimizer lr replaced by --actor-lr / --critic-lr and
// its ZeRO stage by --actor-zero-stage / --critic-zero-stage when given); the reference actor and
// the reward model are evaluated only, from weights bound for inference (runtime/inference.h).
// Each step is one round: every data-parallel rank answers train_micro_batch_size_per_gpu
// prompts (of neighbouring lengths), then the PPO epochs train both models on that experience.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_args.h"
#include "commands.h"
#include "model_args.h"
#include "progress.h"
#include "train_support.h"
#include "zt/checkpoint/model_open.h"
#include "zt/comm/communicator.h"
#include "zt/comm/env.h"
#include "zt/core/file_io.h"
#include "zt/core/log.h"
#include "zt/data/batch_sampler.h"
#include "zt/data/token_file.h"
#include "zt/runtime/inference.h"
#include "zt/tasks/ema.h"
#include "zt/tasks/lora.h"
#include "zt/tasks/ppo.h"
#include "zt/tasks/reward.h"
#include "zt/tasks/tp_inference.h"

namespace zt::cli {
namespace {

// Flags of other tasks that mean nothing here.
constexpr const char* kOtherTasks[] = {
    "--model", "--seq-len", "--eval-data", "--train-on-prompt", "--pack", "--lora-dim",
    "--pipeline-parallel-size", "--tensor-parallel-size", "--sequence-parallel", "--cuda-graph",
    "--mlm-probability", "--save-16bit-model", "--dump-params", "--save-async", "--load"};

Result<double> number_flag(const ParsedArgs& a, const char* flag, double def) {
  auto v = a.get(flag);
  if (!v) return def;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0') {
    return invalid_argument("{} must be a number, got '{}'", flag, *v);
  }
  return x;
}

// The config file with the optimizer's lr and the ZeRO stage replaced where given.
Result<DeepSpeedConfig> model_config(const std::string& path, int world, std::optional<double> lr,
                                     std::optional<int64_t> stage) {
  ZT_ASSIGN_OR_RETURN(std::string text, file_read_all(path, "DeepSpeed config"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const std::exception& e) {
    // Not plain JSON (hjson, duplicate keys...): the config's own reader says what is wrong.
    if (!lr && !stage) return config_load(path, world);
    return invalid_argument("{}: --actor-lr/--critic-lr and --*-zero-stage need a JSON config: {}",
                            path, e.what());
  }
  if (lr) j["optimizer"]["params"]["lr"] = *lr;
  if (stage) j["zero_optimization"]["stage"] = *stage;
  return config_parse(j.dump(), path, world);
}

}  // namespace

int cmd_train_ppo(const ParsedArgs& a, const std::vector<std::string>& data_values) {
  for (const char* f : kOtherTasks) {
    if (a.has(f)) {
      return fail(invalid_argument(
          "{} does not apply to --task ppo (give --actor and --critic; docs/rlhf.md)", f));
    }
  }
  auto config_path = a.get("--config");
  if (!config_path) config_path = a.get("--deepspeed_config");
  const auto actor_name = a.get("--actor"), critic_name = a.get("--critic");
  if (!actor_name || !critic_name || data_values.size() != 1) {
    return fail(invalid_argument(
        "--task ppo needs --actor DIR (the SFT model), --critic DIR (the reward model) and "
        "--data prompts.jsonl"));
  }
  auto int_flag = [&](const char* flag, int64_t def, int64_t min) -> Result<int64_t> {
    auto v = a.get(flag);
    if (!v) return def;
    return parse_int(flag, *v, min);
  };
  auto steps = int_flag("--steps", 200, 1);
  auto seed = int_flag("--seed", 1234, 0);
  auto ppo_epochs = int_flag("--ppo-epochs", 1, 1);
  auto gen_batches = int_flag("--generation-batches", 1, 1);
  auto max_prompt = int_flag("--max-prompt-seq-len", 256, 1);
  auto max_answer = int_flag("--max-answer-seq-len", 256, 1);
  for (const auto* r : {&steps, &seed, &ppo_epochs, &gen_batches, &max_prompt, &max_answer}) {
    if (!*r) return fail(r->status());
  }
  tasks::PpoOptions po;
  auto inference_tp = int_flag("--inference-tp-size", 1, 1);
  if (!inference_tp) return fail(inference_tp.status());
  po.ppo_epochs = static_cast<int>(*ppo_epochs);
  po.max_answer_len = static_cast<int>(*max_answer);
  for (auto [flag, dst] : {std::pair{"--kl-ctl", &po.ppo.kl_ctl},
                           std::pair{"--clip-reward-value", &po.ppo.clip_reward_value},
                           std::pair{"--cliprange", &po.ppo.cliprange},
                           std::pair{"--cliprange-value", &po.ppo.cliprange_value},
                           std::pair{"--gamma", &po.ppo.gamma}, std::pair{"--lam", &po.ppo.lam}}) {
    auto v = number_flag(a, flag, *dst);
    if (!v) return fail(v.status());
    *dst = *v;
  }
  std::optional<double> actor_lr, critic_lr;
  std::optional<int64_t> actor_stage, critic_stage;
  for (auto [flag, dst] : {std::pair{"--actor-lr", &actor_lr}, std::pair{"--critic-lr", &critic_lr}}) {
    if (!a.has(flag)) continue;
    auto v = number_flag(a, flag, 0);
    if (!v) return fail(v.status());
    *dst = *v;
  }
  for (auto [flag, dst] : {std::pair{"--actor-zero-stage", &actor_stage},
                           std::pair{"--critic-zero-stage", &critic_stage}}) {
    if (!a.has(flag)) continue;
    auto v = parse_int(flag, *a.get(flag), 0);
    if (!v) return fail(v.status());
    if (*v > 3) return fail(invalid_argument("{} must be 0, 1, 2 or 3, got {}", flag, *v));
    *dst = *v;
  }

  // Ranks, device, configs.
  auto env = dist_env_from_environment();
  if (!env) return fail(env.status());
  const int rank = env->rank, world = env->world_size;
  if (world > 1) set_log_rank(rank);
  auto device_r = train_device(a, env->local_rank);
  if (!device_r) return fail(device_r.status());
  const Device device = *device_r;
  auto actor_cfg = model_config(*config_path, world, actor_lr, actor_stage);
  if (!actor_cfg) return fail(actor_cfg.status().with_context("actor: "));
  auto critic_cfg = model_config(*config_path, world, critic_lr, critic_stage);
  if (!critic_cfg) return fail(critic_cfg.status().with_context("critic: "));
  if (actor_cfg->gradient_accumulation_steps != 1) {
    return fail(invalid_argument(
        "--task ppo trains each round's experience in one micro-step: set "
        "gradient_accumulation_steps to 1 (train_micro_batch_size_per_gpu is the prompts a rank "
        "answers per round)"));
  }
  auto comm = communicator_create(*env, device);
  if (!comm) return fail(comm.status());
  // The hybrid engine: --enable-hybrid-engine / --inference-tp-size, or the config's
  // hybrid_engine block (enabled, inference_tp_size), as DeepSpeed-Chat writes it; flags win.
  {
    const nlohmann::json he = actor_cfg->blocks.is_object() && actor_cfg->blocks.contains("hybrid_engine")
                                  ? actor_cfg->blocks["hybrid_engine"]
                                  : nlohmann::json();
    const bool in_config = he.is_object();
    po.hybrid_engine = a.has("--enable-hybrid-engine") ||
                       (in_config && he.contains("enabled") && he["enabled"] == true);
    if (!a.has("--inference-tp-size") && in_config && he.contains("inference_tp_size")) {
      const auto& v = he["inference_tp_size"];
      if (!v.is_number_integer() || v.get<int64_t>() < 1) {
        return fail(invalid_argument("{}: hybrid_engine.inference_tp_size must be a positive "
                                     "integer, got {}",
                                     *config_path, v.dump()));
      }
      *inference_tp = v.get<int64_t>();
    }
    if (*inference_tp > 1 && !po.hybrid_engine) {
      return fail(invalid_argument(
          "{} {} splits the hybrid engine's generation: give --enable-hybrid-engine too (or "
          "hybrid_engine.enabled: true)",
          a.has("--inference-tp-size") ? "--inference-tp-size" : "hybrid_engine.inference_tp_size",
          *inference_tp));
    }
  }

  // Models: actor (trained) and reference (frozen) from --actor (--ref); critic (trained) and
  // reward (frozen) from --critic, a value head added to a causal model.
  auto open_lm = [&](const std::string& name) -> Result<ckpt::ModelChoice> {
    ZT_ASSIGN_OR_RETURN(ckpt::ModelChoice c, ckpt::model_open(name));
    if (c.model->transformer_config().task != nn::Task::kCausalLM) {
      return invalid_argument("{} is not a causal language model (the actor of step 3 is the "
                              "SFT model of step 1)",
                              name);
    }
    return c;
  };
  auto open_value = [&](const std::string& name) -> Result<std::unique_ptr<nn::Transformer>> {
    ZT_ASSIGN_OR_RETURN(ckpt::ModelChoice c, ckpt::model_open(name));
    const nn::Task t = c.model->transformer_config().task;
    if (t == nn::Task::kCausalLM) return tasks::reward_model_from(*c.model);
    if (t != nn::Task::kReward) {
      return invalid_argument("{} is neither a reward model nor a causal decoder to put a value "
                              "head on",
                              name);
    }
    return std::move(c.model);
  };
  auto actor_choice = open_lm(*actor_name);
  if (!actor_choice) return fail(actor_choice.status().with_context("--actor: "));
  auto ref_choice = open_lm(a.get("--ref").value_or(*actor_name));
  if (!ref_choice) return fail(ref_choice.status().with_context("--ref: "));
  auto critic = open_value(*critic_name);
  if (!critic) return fail(critic.status().with_context("--critic: "));
  auto reward_model = open_value(*critic_name);
  if (!reward_model) return fail(reward_model.status().with_context("--critic: "));
  nn::Transformer& actor = *actor_choice->model;
  const nn::TransformerConfig& ac = actor.transformer_config();
  // LoRA on the actor (DeepSpeed-Chat's --actor_lora_dim, with --only-optimize-lora and
  // --lora-alpha, its lora_scaling); the reference stays the plain model.
  if (auto r = a.get("--actor-lora-dim")) {
    auto rank_r = parse_int("--actor-lora-dim", *r, 1);
    if (!rank_r) return fail(rank_r.status());
    tasks::LoraOptions lo{.r = static_cast<int>(*rank_r), .only_optimize = a.has("--only-optimize-lora")};
    auto alpha = number_flag(a, "--lora-alpha", lo.alpha);
    if (!alpha) return fail(alpha.status());
    lo.alpha = static_cast<float>(*alpha);
    if (Status s = tasks::lora_apply(actor, lo); !s.is_ok()) return fail(s.with_context("--actor-lora-dim: "));
  } else if (a.has("--only-optimize-lora") || a.has("--lora-alpha")) {
    return fail(invalid_argument("--only-optimize-lora and --lora-alpha need --actor-lora-dim R "
                                 "with --task ppo"));
  }
  if ((*critic)->transformer_config().vocab_size < ac.vocab_size) {
    return fail(invalid_argument("the critic's vocabulary ({}) is smaller than the actor's ({}): "
                                 "step 2's reward model reads the actor's tokens",
                                 (*critic)->transformer_config().vocab_size, ac.vocab_size));
  }
  if (*max_prompt + *max_answer > ac.max_positions) {
    return fail(invalid_argument(
        "--max-prompt-seq-len {} + --max-answer-seq-len {} exceed the actor's context of {}",
        *max_prompt, *max_answer, ac.max_positions));
  }
  const EngineOptions eo{.device = device, .seed = static_cast<uint64_t>(*seed), .comm = comm->get()};
  auto actor_e = initialize(actor, *actor_cfg, eo);
  if (!actor_e) return fail(actor_e.status().with_context("actor: "));
  auto critic_e = initialize(**critic, *critic_cfg, eo);
  if (!critic_e) return fail(critic_e.status().with_context("critic: "));
  const DType dt = actor_cfg->compute_dtype();
  // --offload-reference-model: the reference lives and runs on the host (f32), its log-probs
  // copied over; the GPU holds none of it.
  const bool ref_on_host = a.has("--offload-reference-model");
  auto ref_w = InferenceWeights::bind(*ref_choice->model, ref_on_host ? Device::cpu() : device,
                                      ref_on_host ? DType::f32 : dt, static_cast<uint64_t>(*seed));
  if (!ref_w) return fail(ref_w.status().with_context("reference: "));
  auto rm_w = InferenceWeights::bind(**reward_model, device, dt, static_cast<uint64_t>(*seed));
  if (!rm_w) return fail(rm_w.status().with_context("reward model: "));

  // Prompts: the tokenizer of the actor; each prompt's last --max-prompt-seq-len tokens; B per
  // rank a round.
  // The tokenizer is opened for the first text prompt (pre-tokenized records need none).
  std::shared_ptr<const Tokenizer> tok;
  std::ifstream in(data_values[0]);
  if (!in) return fail(not_found("--data {}: cannot open it", data_values[0]));
  std::vector<std::vector<int32_t>> all_prompts;
  std::string line;
  int64_t line_no = 0, prompts = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      return fail(invalid_argument("{} line {}: not JSON ({})", data_values[0], line_no, e.what()));
    }
    Result<std::vector<int32_t>> ids = std::vector<int32_t>{};
    if (j.is_object() && j.contains("input_ids") && j["input_ids"].is_array()) {
      for (const auto& v : j["input_ids"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= ac.vocab_size) {
          return fail(invalid_argument("{} line {}: input_ids hold token ids below the actor's "
                                       "vocabulary of {}",
                                       data_values[0], line_no, ac.vocab_size));
        }
        ids->push_back(v.get<int32_t>());
      }
    } else if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) {
      if (!tok) {
        auto t = model_tokenizer(a, *actor_choice, ac.vocab_size);
        if (!t) return fail(t.status());
        tok = *t;
      }
      ids = tok->encode(j["prompt"].get<std::string>(), true);
      if (!ids) {
        return fail(ids.status().with_context(fmt::format("{} line {}: ", data_values[0], line_no)));
      }
    } else {
      return fail(invalid_argument(
          "{} line {}: a step-3 record is {{\"prompt\": \"...\"}} or {{\"input_ids\": [...]}}",
          data_values[0], line_no));
    }
    if (ids->empty()) continue;
    if (static_cast<int64_t>(ids->size()) > *max_prompt) {
      ids->erase(ids->begin(), ids->end() - *max_prompt);
    }
    all_prompts.push_back(std::move(*ids));
    ++prompts;
  }
  const int64_t B = actor_cfg->train_micro_batch_size_per_gpu;
  // Batches of B x world prompts of neighbouring lengths (sorted by length, so a batch's rows
  // differ little and generation feeds few prompt tokens one by one), in a seeded order (the
  // same on every rank); a last partial batch is left out.
  std::stable_sort(all_prompts.begin(), all_prompts.end(),
                   [](const auto& x, const auto& y) { return x.size() < y.size(); });
  std::vector<std::vector<std::vector<int32_t>>> batches;
  const auto per_batch = static_cast<size_t>(B * world);
  for (size_t i = 0; i + per_batch <= all_prompts.size(); i += per_batch) {
    batches.emplace_back(all_prompts.begin() + static_cast<std::ptrdiff_t>(i),
                         all_prompts.begin() + static_cast<std::ptrdiff_t>(i + per_batch));
  }
  const auto G = static_cast<size_t>(*gen_batches);
  if (batches.empty()) {
    return fail(invalid_argument(
        "{}: {} prompts, fewer than a round's train_micro_batch_size_per_gpu {} x {} ranks",
        data_values[0], prompts, B, world));
  }
  std::mt19937_64 order(static_cast<uint64_t>(*seed));
  std::shuffle(batches.begin(), batches.end(), order);
  if (rank == 0) {
    ZT_LOG_INFO("ppo: {} prompts from {} ({} left out of the last batch), {} rounds' batches of {} "
                "per rank; actor {} (ZeRO {}), "
                "critic {} (ZeRO {}), answers up to {} tokens, {} generation batch(es) and {} PPO "
                "epoch(s) a round{}{}",
                prompts, data_values[0], all_prompts.size() % per_batch, batches.size(), B,
                *actor_name, actor_cfg->zero.stage,
                *critic_name, critic_cfg->zero.stage, *max_answer, G, *ppo_epochs,
                !po.hybrid_engine ? ""
                : *inference_tp > 1
                    ? fmt::format(", hybrid engine generating over {} ranks", *inference_tp)
                    : std::string(", hybrid engine"),
                a.has("--enable-ema") ? ", EMA" : "");
  }

  // The unsupervised mix: windows of max_prompt + max_answer tokens of a token file, each PPO
  // epoch one actor step on coef x their language-model loss.
  std::optional<BatchSampler> unsup;
  if (auto f = a.get("--unsupervised-dataset")) {
    auto file = TokenFile::open(*f);
    if (!file) return fail(file.status().with_context("--unsupervised-dataset: "));
    auto sampler = BatchSampler::create(std::make_shared<const TokenFile>(std::move(file).value()),
                                        {.batch_size = B,
                                         .seq_len = *max_prompt + *max_answer,
                                         .order = SampleOrder::kRandom,
                                         .seed = static_cast<uint64_t>(*seed),
                                         .rank = rank,
                                         .world_size = world,
                                         .vocab_size = ac.vocab_size});
    if (!sampler) return fail(sampler.status().with_context("--unsupervised-dataset: "));
    unsup.emplace(std::move(sampler).value());
    auto coef = number_flag(a, "--unsup-coef", po.unsup_coef);
    if (!coef) return fail(coef.status());
    po.unsup_coef = *coef;
    po.unsup_next = [&unsup]() -> Result<std::pair<Tensor, Tensor>> {
      ZT_ASSIGN_OR_RETURN(Batch b, unsup->next());
      return std::make_pair(b.tokens, b.targets);
    };
  } else if (a.has("--unsup-coef")) {
    return fail(invalid_argument("--unsup-coef needs --unsupervised-dataset FILE (a token file)"));
  }
  po.generation.sampling = nn::Sampling::kGreedy;  // DeepSpeed-Chat generates greedily
  po.generation.seed = static_cast<uint64_t>(*seed);
  if (auto eos = model_eos_id(actor_choice->source_dir)) {
    po.generation.eos_token_ids = {*eos};
    po.pad_id = *eos;
  }
  // --inference-tp-size T: generation on a tensor-parallel layout of the actor over groups of T
  // ranks (tasks/tp_inference.h).
  std::unique_ptr<tasks::TpInference> tp_inference;
  if (*inference_tp > 1) {
    auto t = tasks::TpInference::create(actor, **actor_e, **comm, static_cast<int>(*inference_tp));
    if (!t) return fail(t.status());
    tp_inference = std::move(t).value();
    po.tp_inference = tp_inference.get();
  }
  tasks::PpoTrainer trainer(
      {.actor = actor,
       .actor_engine = **actor_e,
       .critic = **critic,
       .critic_engine = **critic_e,
       .ref = {*ref_choice->model, ref_w->context(), nullptr},
       .reward = tasks::reward_model_scores({**reward_model, rm_w->context(), nullptr})},
      po);

  // --enable-ema: DeepSpeed-Chat's moving average of the actor (beta 0.992) after each of its
  // PPO steps, saved as DIR/actor_ema (Hugging Face layout, the training dtype) with --save.
  std::optional<tasks::WeightsEma> ema;
  if (a.has("--enable-ema")) {
    auto e = tasks::WeightsEma::start(**actor_e);
    if (!e) return fail(e.status().with_context("--enable-ema: "));
    ema.emplace(std::move(e).value());
    trainer.set_after_actor_step([&ema, &actor_e] { return ema->update(**actor_e); });
  }

  auto write_policy = write_error_policy(a.get("--on-write-error").value_or("fail"));
  if (!write_policy) return fail(write_policy.status());
  MetricsWriter metrics(*write_policy);
  if (auto m = a.get("--metrics-out"); m && rank == 0) {
    if (Status s = metrics.open(*m); !s.is_ok()) return fail(s);
  }
  // The config's monitors (TensorBoard, CSV), rank 0: every number of a round's record against
  // the prompts answered so far.
  std::vector<std::unique_ptr<tools::Monitor>> monitors;
  if (rank == 0) {
    auto m = tools::monitors_from_config(actor_cfg->blocks);
    if (!m) return fail(m.status());
    monitors = std::move(m).value();
  }
  ProgressBar bar(*steps, rank == 0, "tok/s");
  for (int64_t step = 0; step < *steps; ++step) {
    // --generation-batches: that many batches' experiences, then the PPO epochs over them.
    std::vector<std::vector<std::vector<int32_t>>> mine;
    for (size_t g = 0; g < G; ++g) {
      const auto& all = batches[(static_cast<size_t>(step) * G + g) % batches.size()];
      mine.emplace_back(all.begin() + rank * B, all.begin() + (rank + 1) * B);
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto st = trainer.round(mine);
    const double round_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st) {
      bar.finish();
      return fail(st.status());
    }
    bar.update(step + 1, st->actor_loss, (*actor_e)->last_step()->lr, st->generate_tokens_per_s,
               false);
    nlohmann::json r = {{"step", step + 1},
                        {"reward_mean", st->reward_mean},
                        {"answer_len_mean", st->answer_len_mean},
                        {"kl", st->kl},
                        {"actor_loss", st->actor_loss},
                        {"critic_loss", st->critic_loss},
                        {"unsup_loss", st->unsup_loss},
                        {"round_s", round_s},
                        {"generate_s", st->generate_s},
                        {"train_s", st->train_s},
                        {"generate_tokens_per_s", st->generate_tokens_per_s},
                        {"train_tokens_per_s", st->train_tokens_per_s}};
    if (Status s = record_metrics(metrics, monitors, r, (step + 1) * static_cast<int64_t>(G) * B * world);
        !s.is_ok()) {
      bar.finish();
      return fail(s);
    }
  }
  bar.finish();
  if (auto dir = a.get("--save")) {
    for (auto [name, e] : {std::pair{"actor", actor_e->get()}, std::pair{"critic", critic_e->get()}}) {
      if (Status s = e->save_checkpoint(*dir + "/" + name, "", {{"task", "ppo"}}); !s.is_ok()) {
        return fail(s.with_context(std::string(name) + ": "));
      }
    }
    if (ema) {
      if (Status s = ema->save(**actor_e, *dir + "/actor_ema"); !s.is_ok()) return fail(s);
    }
  }
  if (Status s = metrics.close(); !s.is_ok()) return fail(s);
  return 0;
}

}  // namespace zt::cli
