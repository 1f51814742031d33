// `zt train`: trains a causal language model (a named size or a Hugging Face model directory)
// with a DeepSpeed config. Progress on stderr, an optional JSON
// Lines metrics file, and a generated sample at the end.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli_args.h"
#include "commands.h"
#include "progress.h"
#include "train_support.h"
#include "zt/checkpoint/checkpoint_dir.h"
#include "zt/comm/communicator.h"
#include "zt/core/file_io.h"
#include "zt/comm/env.h"
#include "zt/core/log.h"
#include "zt/data/batch_sampler.h"
#include "zt/data/blend.h"
#include "zt/launcher/heartbeat.h"
#include "model_args.h"
#include "zt/tasks/mlm.h"
#include "zt/tools/monitor.h"
#include "zt/tasks/reward.h"
#include "zt/tasks/sft.h"
#include "zt/data/prepare.h"
#include "zt/nn/generate.h"
#include "zt/checkpoint/model_open.h"
#include "zt/tasks/lora.h"
#include "zt/runtime/engine.h"
#include "zt/pipe/pipe_engine.h"
#include "zt/nn/models/alexnet.h"

namespace zt::cli {

// cmd_train_vision.cc: `zt train --model alexnet` (image classification).
int cmd_train_vision(const ParsedArgs& a, const std::vector<std::string>& data_values);
// cmd_train_ppo.cc: `zt train --task ppo` (DeepSpeed-Chat's step 3).
int cmd_train_ppo(const ParsedArgs& a, const std::vector<std::string>& data_values);

namespace {

constexpr const char* kTrainUsage = R"(Usage: zt train --config ds_config.json [options]

Trains a causal language model (GPT-2, Llama, Qwen2, OPT: a named size, or a Hugging Face model
directory whose weights it fine-tunes) with the DeepSpeed config's batch sizes, optimizer,
scheduler, precision and clipping. --task sft fine-tunes on JSON Lines of prompt/response records,
--task reward trains a reward model on prompt/chosen/rejected pairs (docs/finetuning.md). Without
--data it trains on the default corpus (license texts every Debian machine carries, byte-level
tokens), prepared once into ~/.cache/zerotrain.

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"--config", FlagKind::kValue, "DeepSpeed config (ds_config.json)", "FILE"},
    {"--deepspeed_config", FlagKind::kValue, "same as --config (DeepSpeed's spelling)", "FILE"},
    {"--model", FlagKind::kValue,
     "a Hugging Face model directory (config.json + *.safetensors), or a named size: "
     "gpt2-tiny (default), gpt2 ... gpt2-xl, gpt-1.3b ... gpt-65b, llama-tiny, llama-1b, "
     "llama-8b, llama-70b; or alexnet (image classification on CIFAR-10: --data DIR)",
     "DIR|NAME"},
    {"--data", FlagKind::kValue,
     "token file (llm.c .bin, or nanoGPT raw uint16 .bin), or a blend of WEIGHT FILE pairs: "
     "--data 0.7 a.bin 0.3 b.bin (weights normalized); with --model alexnet, CIFAR-10's "
     "binary files (cifar-10-batches-bin/ or one data_batch_N.bin)",
     "FILE"},
    {"--steps", FlagKind::kValue, "optimizer steps to run (default 200)", "N"},
    {"--device", FlagKind::kValue, "cpu, cuda or cuda:N (default: cuda when a GPU is visible)",
     "DEV"},
    {"--seq-len", FlagKind::kValue,
     "tokens per sequence (default: the model's context up to 2048; 128 for the tiny models)",
     "T"},
    {"--metrics-out", FlagKind::kValue, "write JSON Lines metrics (one record per step)", "FILE"},
    {"--vocab-size", FlagKind::kValue, "override the model's vocabulary size", "V"},
    {"--order", FlagKind::kValue, "batch order: random (default) or sequential", "ORDER"},
    {"--seed", FlagKind::kValue, "seed for initialisation and batch order (default 1234)", "N"},
    {"--sample-tokens", FlagKind::kValue, "tokens to generate at the end (default 200, 0: none)",
     "N"},
    {"--prompt", FlagKind::kValue, "prompt for the sample (needs a tokenizer)", "TEXT"},
    {"--task", FlagKind::kValue,
     "pretrain (default: token files), sft (supervised fine-tuning on JSON Lines of "
     "prompt/response, prompt/chosen, text or input_ids+labels: the loss counts the response and "
     "its eos), reward (a value head on a causal model, trained on JSON Lines of "
     "prompt/chosen/rejected pairs: the loss is -log sigmoid(r_chosen - r_rejected)) or mlm (BERT "
     "masked-LM pre-training on token files, or on JSON Lines of text or input_ids: one padded row "
     "per record)",
     "TASK"},
    {"--train-on-prompt", FlagKind::kSwitch, "sft: count every next-token prediction, prompt too"},
    {"--gradient-checkpointing", FlagKind::kSwitch,
     "recompute each block's activations in backward, keeping only its input (the config's "
     "activation_checkpointing.cpu_checkpointing keeps those in host memory)"},
    {"--activation-checkpoint-interval", FlagKind::kValue,
     "DeepSpeed PipelineModule's activation_checkpoint_interval: checkpoint units in segments of "
     "N (each keeps its first unit's input and is recomputed whole before its last unit's "
     "backward; a pipeline counts each stage's own units); 0: off (default, unless "
     "--gradient-checkpointing: N = 1)",
     "N"},
    {"--keep-activations", FlagKind::kSwitch,
     "keep what backward would recompute (each MLP's activation, a pre-LN block's norm "
     "outputs): faster, for one (tokens x MLP width) and two (tokens x width) activations more "
     "per block (zt estimate --keep-activations shows the memory)"},
    {"--cuda-graph", FlagKind::kSwitch,
     "one GPU, one micro-batch a step: capture the whole training step as a CUDA graph after two "
     "warm-up steps and replay it (no host launch gaps; the log says why when a run cannot)"},
    {"--lora-dim", FlagKind::kValue,
     "LoRA: add rank-R adapters to the blocks' linear modules (DeepSpeed-Chat's lora_dim)", "R"},
    {"--lora-alpha", FlagKind::kValue,
     "LoRA: the adapters' scale is alpha / R (default 1, DeepSpeed-Chat's lora_scaling)", "A"},
    {"--lora-dropout", FlagKind::kValue, "LoRA: dropout on the adapters' input (default 0)", "P"},
    {"--lora-modules", FlagKind::kValue,
     "LoRA: comma-separated Hugging Face module names (q_proj,v_proj; c_attn; ...), default every "
     "linear module of the blocks",
     "LIST"},
    {"--only-optimize-lora", FlagKind::kSwitch,
     "LoRA: train the adapters only; the base weights are frozen (no gradients, no optimizer "
     "state)"},
    {"--mlm-probability", FlagKind::kValue, "mlm: share of positions selected (default 0.15)", "P"},
    {"--mask-share", FlagKind::kValue, "mlm: selected positions that become the mask (default 0.8)", "P"},
    {"--random-share", FlagKind::kValue, "mlm: selected positions that become a random token (default 0.1)", "P"},
    {"--mask-id", FlagKind::kValue, "mlm: the mask token id (default: the tokenizer's [MASK] or <mask>)", "ID"},
    {"--pack", FlagKind::kSwitch, "sft: pack whole examples into rows instead of padding each"},
    {"--skip-bad", FlagKind::kSwitch, "sft, reward, mlm: skip (and count) bad JSON Lines records"},
    {"--eval-data", FlagKind::kValue,
     "sft, reward: held-out JSON Lines; its loss (reward: and accuracy) every --eval-interval steps",
     "FILE"},
    {"--eval-interval", FlagKind::kValue, "steps between evaluations (default 100)", "N"},
    {"--eval-steps", FlagKind::kValue, "batches per evaluation (default: the whole file)", "M"},
    {"--tokenizer", FlagKind::kValue,
     "the tokenizer of the data, for --prompt and the sample's text: tokenizer.json, a folder "
     "holding one, or 'bytes' (default: the model directory's tokenizer.json; bytes for the "
     "built-in corpus; else the sample is printed as ids)",
     "PATH"},
    {"--local_rank", FlagKind::kValue, "set by launchers; ZeroTrain reads LOCAL_RANK", "N"},
    {"--dump-params", FlagKind::kValue,
     "after training, write the fp32 parameters (raw, unit order)", "FILE"},
    {"--save", FlagKind::kValue, "save checkpoints into DIR (every --save-interval steps and at the end)",
     "DIR"},
    {"--save-interval", FlagKind::kValue, "optimizer steps between checkpoints (default: only at the end)",
     "N"},
    {"--keep-last", FlagKind::kValue, "keep only the newest K checkpoints in --save DIR", "K"},
    {"--save-async", FlagKind::kSwitch,
     "write checkpoints in the background from a host copy (training stalls only for the copy)"},
    {"--save-on-signal", FlagKind::kSwitch,
     "on SIGTERM or SIGUSR1, finish the step, save a checkpoint and exit 0 (needs --save)"},
    {"--save-16bit-model", FlagKind::kValue,
     "at the end, the model's weights in the training precision as DIR/model.safetensors + "
     "config.json (stage 3: needs stage3_gather_16bit_weights_on_model_save)",
     "DIR"},
    {"--load", FlagKind::kValue,
     "resume from the checkpoint `latest` names in DIR (none yet: start fresh, with a warning)",
     "DIR"},
    {"--load-tag", FlagKind::kValue, "load this tag instead of the one `latest` names", "TAG"},
    {"--load-module-only", FlagKind::kSwitch,
     "load only the weights: optimizer, scheduler and step counters start fresh"},
    {"--no-load-optimizer-states", FlagKind::kSwitch,
     "do not load the optimizer state (nor the fp16 loss scaler)"},
    {"--no-load-lr-scheduler-states", FlagKind::kSwitch, "do not load the LR scheduler's state"},
    {"--on-write-error", FlagKind::kValue,
     "when writing --metrics-out fails: fail (default: stop with the error) or warn (warn once, "
     "stop writing metrics, train on)",
     "POLICY"},
    // --task ppo (DeepSpeed-Chat step 3; docs/rlhf.md).
    {"--actor", FlagKind::kValue, "ppo: the SFT model (step 1) to train, a directory or named size",
     "DIR"},
    {"--critic", FlagKind::kValue,
     "ppo: the reward model (step 2): scores the answers (frozen) and starts the critic", "DIR"},
    {"--ref", FlagKind::kValue, "ppo: the reference model of the KL penalty (default: --actor)",
     "DIR"},
    {"--actor-lr", FlagKind::kValue, "ppo: the actor's learning rate (default: the config's)", "LR"},
    {"--critic-lr", FlagKind::kValue, "ppo: the critic's learning rate (default: the config's)",
     "LR"},
    {"--actor-zero-stage", FlagKind::kValue, "ppo: the actor's ZeRO stage (default: the config's)",
     "S"},
    {"--critic-zero-stage", FlagKind::kValue,
     "ppo: the critic's ZeRO stage (default: the config's)", "S"},
    {"--ppo-epochs", FlagKind::kValue, "ppo: training passes over each round's experience (1)", "N"},
    {"--generation-batches", FlagKind::kValue,
     "ppo: prompt batches answered a round before its PPO epochs train on all of them (1)", "N"},
    {"--max-prompt-seq-len", FlagKind::kValue, "ppo: a prompt's last N tokens (256)", "N"},
    {"--max-answer-seq-len", FlagKind::kValue, "ppo: answer tokens generated at most (256)", "N"},
    {"--kl-ctl", FlagKind::kValue, "ppo: the KL penalty's weight (0.1)", "X"},
    {"--clip-reward-value", FlagKind::kValue, "ppo: reward scores clipped to +-X (5)", "X"},
    {"--cliprange", FlagKind::kValue, "ppo: the policy ratio's clip (0.2)", "X"},
    {"--cliprange-value", FlagKind::kValue, "ppo: the value clip around the old values (0.2)", "X"},
    {"--gamma", FlagKind::kValue, "ppo: the discount (1.0)", "X"},
    {"--lam", FlagKind::kValue, "ppo: GAE's lambda (0.95)", "X"},
    {"--enable-ema", FlagKind::kSwitch,
     "ppo: a moving average of the actor (beta 0.992) after each step, saved as DIR/actor_ema"},
    {"--unsupervised-dataset", FlagKind::kValue,
     "ppo: a token file whose language-model loss trains the actor too, one step after each PPO "
     "step",
     "FILE"},
    {"--unsup-coef", FlagKind::kValue, "ppo: the unsupervised loss's weight (27.8)", "X"},
    {"--offload-reference-model", FlagKind::kSwitch,
     "ppo: the reference model kept and run on the host (f32)"},
    {"--actor-lora-dim", FlagKind::kValue,
     "ppo: LoRA adapters of rank R on the actor (with --only-optimize-lora, --lora-alpha)", "R"},
    {"--enable-hybrid-engine", FlagKind::kSwitch,
     "ppo: DeepSpeed's hybrid engine: the actor's ZeRO-3 shards gathered once per generation "
     "phase, generation without per-token collectives, the copy released before training"},
    {"--inference-tp-size", FlagKind::kValue,
     "ppo, with --enable-hybrid-engine: generation on the actor split over groups of T ranks "
     "(heads, MLP width, vocabulary)",
     "T"},
    {"--pipeline-parallel-size", FlagKind::kValue,
     "pipeline parallelism: split the model's units into P stages (DeepSpeed's PipelineModule "
     "num_stages), the ranks into P x (ranks / P) data-parallel pipelines; each batch's "
     "gradient_accumulation_steps micro-batches run through the 1F1B schedule (ZeRO stage 0 or 1, "
     "--task pretrain)",
     "P"},
    {"--tensor-parallel-size", FlagKind::kValue,
     "tensor parallelism (Megatron's): split each block's attention heads and MLP width over T "
     "ranks, which all-reduce the partial results; the ranks form pipe x data x T groups, tensor "
     "groups adjacent (ZeRO stage 0 or 1, no checkpoints yet)",
     "T"},
    {"--sequence-parallel", FlagKind::kSwitch,
     "with --tensor-parallel-size T: each rank runs the norms and residual adds on 1/T of the "
     "tokens (Megatron's sequence parallelism), attention and the MLP all-gather their input and "
     "reduce-scatter their output instead of all-reducing it (pretrain and sft; the sequence "
     "length a multiple of T)"},
    {"--partition-method", FlagKind::kValue,
     "pipeline: how units are split into stages: parameters (default: balanced on parameter "
     "counts), uniform, type:REGEX (balanced on the units whose class matches), or compute "
     "(ZeroTrain's: balanced on each unit's forward FLOPs at --seq-len)",
     "METHOD"},
    {"--help", FlagKind::kSwitch, "this help"},
};

std::string cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/zerotrain";
  }
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return std::string(h) + "/.cache/zerotrain";
  }
  return "/tmp/zerotrain";
}

// Holds an exclusive lock (flock) on a file for its lifetime; released when the process exits.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT, 0644)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing drops the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

Result<std::string> default_data() {
  std::string path = cache_dir() + "/default-corpus.bin";
  if (std::filesystem::exists(path)) return path;
  std::error_code ec;
  std::filesystem::create_directories(cache_dir(), ec);
  if (ec) return io_error("cannot create cache folder {}: {}", cache_dir(), ec.message());
  // Ranks of one machine share the cache: one prepares, the others wait for it and then find
  // the file. (Without the lock the write is still atomic, but every rank would do the work.)
  FileLock lock(path + ".lock");
  if (std::filesystem::exists(path)) return path;
  ZT_ASSIGN_OR_RETURN(auto files, default_corpus_paths());
  ZT_LOG_INFO("preparing the default corpus ({} files) into {}", files.size(), path);
  ZT_ASSIGN_OR_RETURN(auto summary, data_prepare(files, path));
  ZT_LOG_INFO("default corpus: {} tokens", summary.tokens);
  return path;
}

nlohmann::json run_record(const Engine& e, const nn::Transformer& model, int64_t seq_len,
                          const std::string& data) {
  const DeepSpeedConfig& c = e.config();
  zero::ModelStateBytes b = e.model_state_bytes();
  return {{"type", "run"},
          {"model", model.name()},
          {"n_layer", model.transformer_config().n_layer},
          {"n_embd", model.transformer_config().hidden},
          {"parameters", model.num_params()},
          {"world_size", c.world_size},
          {"train_batch_size", c.train_batch_size},
          {"train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu},
          {"gradient_accumulation_steps", c.gradient_accumulation_steps},
          {"seq_len", seq_len},
          {"dtype", std::string(dtype_name(c.compute_dtype()))},
          {"device", e.device().str()},
          {"optimizer", optim::optimizer_name(e.optimizer_spec())},
          {"zero_stage", c.zero.stage},
          {"data", data},
          // The first five on the training device; host_*: what offload_optimizer moved to host
          // memory (zero::ModelStateBytes).
          {"model_state_bytes",
           {{"params", b.params},
            {"grads", b.grads},
            {"master", b.master},
            {"optimizer", b.optimizer},
            {"total", b.total()},
            {"host_master", b.host_master},
            {"host_optimizer", b.host_optimizer},
            {"host_buffers", b.host_buffers},
            {"host_total", b.host_total()}}}};
}

}  // namespace

int cmd_train(const Args& raw_args) {
  // --data takes several values (a blend), which parse_args does not know; it is taken out first.
  Args args = raw_args;
  auto data_values = data_args_extract(args);
  if (!data_values) return fail(data_values.status());
  auto parsed = parse_args("zt train", kFlags, args);
  if (!parsed) return fail(parsed.status());
  const ParsedArgs& a = *parsed;
  if (a.has("--help")) {
    std::printf("%s%s", kTrainUsage, usage_flags(kFlags).c_str());
    return 0;
  }
  if (!a.positional.empty()) {
    return fail(invalid_argument("zt train: unexpected argument '{}'", a.positional[0]));
  }
  auto config_path = a.get("--config");
  if (!config_path) config_path = a.get("--deepspeed_config");
  if (!config_path) {
    return fail(
        invalid_argument("zt train needs --config ds_config.json (examples/ holds "
                         "ready-made ones, e.g. examples/ds_config_tiny.json)"));
  }
  if (auto m = a.get("--model"); m && nn::is_vision_model(*m)) {
    return cmd_train_vision(a, data_values->value_or(std::vector<std::string>{}));
  }
  if (a.get("--task") == std::optional<std::string>("ppo")) {
    return cmd_train_ppo(a, data_values->value_or(std::vector<std::string>{}));
  }
  for (const char* f : {"--actor", "--critic", "--ref", "--actor-lr", "--critic-lr", "--ppo-epochs",
                        "--generation-batches", "--max-prompt-seq-len", "--max-answer-seq-len",
                        "--kl-ctl", "--clip-reward-value", "--cliprange", "--cliprange-value",
                        "--gamma", "--lam", "--actor-zero-stage", "--critic-zero-stage"}) {
    if (a.has(f)) return fail(invalid_argument("{} belongs to --task ppo", f));
  }
  auto int_flag = [&](const char* flag, int64_t def, int64_t min) -> Result<int64_t> {
    auto v = a.get(flag);
    if (!v) return def;
    return parse_int(flag, *v, min);
  };
  auto steps = int_flag("--steps", 200, 1);
  if (!steps) return fail(steps.status());
  auto seed = int_flag("--seed", 1234, 0);
  if (!seed) return fail(seed.status());
  auto sample_tokens = int_flag("--sample-tokens", 200, 0);
  if (!sample_tokens) return fail(sample_tokens.status());
  auto eval_interval = int_flag("--eval-interval", 100, 1);
  if (!eval_interval) return fail(eval_interval.status());
  auto eval_steps = int_flag("--eval-steps", 0, 1);
  if (!eval_steps) return fail(eval_steps.status());
  auto pipe_size = int_flag("--pipeline-parallel-size", 1, 1);
  if (!pipe_size) return fail(pipe_size.status());
  const int pipe = static_cast<int>(*pipe_size);
  auto tensor_size = int_flag("--tensor-parallel-size", 1, 1);
  if (!tensor_size) return fail(tensor_size.status());
  const int tensor = static_cast<int>(*tensor_size);
  if (tensor > 1 && a.has("--lora-dim")) {
    return fail(invalid_argument(
        "--lora-dim does not work with --tensor-parallel-size yet (docs/parallelism.md lists what "
        "tensor parallelism supports)"));
  }
  if (a.has("--sequence-parallel")) {
    if (tensor < 2) {
      return fail(invalid_argument(
          "--sequence-parallel splits the tokens of a tensor-parallel group: it needs "
          "--tensor-parallel-size 2 or more"));
    }
    const std::string task = a.get("--task").value_or("pretrain");
    if (task != "pretrain" && task != "sft") {
      return fail(invalid_argument(
          "--sequence-parallel works with --task pretrain and sft (the {} head reads whole rows); "
          "train --task {} with --tensor-parallel-size alone",
          task, task));
    }
  }
  if (a.has("--partition-method") && pipe == 1) {
    return fail(invalid_argument("--partition-method needs --pipeline-parallel-size P above 1"));
  }
  if (pipe > 1 || tensor > 1) {
    // What the pipeline engine does not run yet: each refused by name.
    for (const char* f : {"--save-async", "--save-16bit-model", "--dump-params", "--eval-data",
                          "--cuda-graph"}) {
      if (a.has(f)) {
        return fail(invalid_argument(
            "{} does not work with {} yet (docs/parallelism.md lists what pipelines and tensor "
            "parallelism support; a checkpoint saved with --save exports with zt ckpt export-hf "
            "and to-fp32)",
            f, pipe > 1 ? "--pipeline-parallel-size" : "--tensor-parallel-size"));
      }
    }
  }

  // Model.
  const std::string model_name = a.get("--model").value_or("gpt2-tiny");
  ckpt::ModelOverrides overrides;
  if (auto v = a.get("--vocab-size")) {
    auto vs = parse_int("--vocab-size", *v, 2);
    if (!vs) return fail(vs.status());
    overrides.vocab_size = static_cast<int>(*vs);
  }
  auto choice = ckpt::model_open(model_name, overrides);
  if (!choice) return fail(choice.status());
  const std::string task = a.get("--task").value_or("pretrain");
  if (task != "pretrain" && task != "sft" && task != "mlm" && task != "reward") {
    return fail(invalid_argument("--task must be pretrain, sft, reward, mlm or ppo, not '{}'", task));
  }
  if (task == "reward") {
    const nn::TransformerConfig& c = choice->model->transformer_config();
    if (c.task == nn::Task::kCausalLM) {
      choice->model = tasks::reward_model_from(*choice->model);  // the value head added
    } else if (c.task != nn::Task::kReward) {
      return fail(invalid_argument(
          "--task reward: --model {} is a {} {} model; a reward model is a causal decoder (gpt2, "
          "llama, mistral, qwen2, opt) or a <Family>ForSequenceClassification directory with "
          "num_labels 1",
          model_name, c.model_type,
          c.task == nn::Task::kMaskedLM ? "masked-LM" : "sequence-classification"));
    }
  } else if (choice->model->transformer_config().task == nn::Task::kReward) {
    return fail(invalid_argument(
        "--model {}: a reward model (a value head, ...ForSequenceClassification); train it with "
        "--task reward (JSON Lines of prompt/chosen/rejected)",
        model_name));
  }
  nn::Transformer& model = *choice->model;
  const nn::TransformerConfig& mc = model.transformer_config();
  if (task == "mlm" && mc.task != nn::Task::kMaskedLM) {
    return fail(invalid_argument("--task mlm: --model {} is not a masked-LM (BERT) model",
                                 model_name));
  }
  if (task != "mlm" && task != "reward" && mc.task != nn::Task::kCausalLM) {
    return fail(invalid_argument(
        "--model {}: a {} masked-LM model; train it with --task mlm, or evaluate "
        "it with zt eval --task mlm",
        model_name, mc.model_type));
  }
  // LoRA adapters, before the engine is built (it shards them and freezes the base).
  for (const char* f : {"--lora-alpha", "--lora-dropout", "--lora-modules", "--only-optimize-lora"}) {
    if (a.has(f) && !a.has("--lora-dim")) {
      return fail(invalid_argument("{} needs --lora-dim R (the adapters' rank)", f));
    }
  }
  std::optional<tasks::LoraOptions> lora;  // (a pipeline applies them to each model it builds)
  if (auto r = a.get("--lora-dim")) {
    auto rank_r = parse_int("--lora-dim", *r, 1);
    if (!rank_r) return fail(rank_r.status());
    tasks::LoraOptions lo{.r = static_cast<int>(*rank_r),
                          .only_optimize = a.has("--only-optimize-lora")};
    for (auto [flag, dst] : {std::pair{"--lora-alpha", &lo.alpha},
                             std::pair{"--lora-dropout", &lo.dropout}}) {
      if (auto v = a.get(flag)) {
        char* end = nullptr;
        *dst = std::strtof(v->c_str(), &end);
        if (end == v->c_str() || *end != '\0') {
          return fail(invalid_argument("{} must be a number, got '{}'", flag, *v));
        }
      }
    }
    if (auto m = a.get("--lora-modules")) {
      std::stringstream list(*m);
      for (std::string item; std::getline(list, item, ',');) {
        if (!item.empty()) lo.modules.push_back(item);
      }
    }
    if (Status st = tasks::lora_apply(model, lo); !st.is_ok()) return fail(st);
    lora = lo;
  }
  const bool tiny = model_name == "gpt2-tiny" || model_name == "llama-tiny";
  auto seq = int_flag("--seq-len", tiny ? 128 : std::min<int64_t>(mc.max_positions, 2048), 2);
  if (!seq) return fail(seq.status());
  if (*seq > mc.max_positions) {
    return fail(invalid_argument("--seq-len {} exceeds {}'s context of {}", *seq, model_name,
                                 mc.max_positions));
  }
  if (a.has("--sequence-parallel") && *seq % tensor != 0) {
    return fail(invalid_argument(
        "--sequence-parallel splits each row's {} positions over --tensor-parallel-size {}: use "
        "a --seq-len that is a multiple of {}",
        *seq, tensor, tensor));
  }

  // Ranks: from the launcher's environment (zt launch, deepspeed, torchrun, mpirun, srun).
  auto env = dist_env_from_environment();
  if (!env) return fail(env.status());
  const int rank = env->rank, world = env->world_size;
  if (world > 1) set_log_rank(rank);
  // Pipelines: the ranks form a [pipe, data] grid (data fastest, as DeepSpeed's topology); the
  // config's batch sizes and the data are per data-parallel pipeline.
  auto topology = pipe::topology_for_world(world, {.pipeline = pipe, .tensor = tensor});
  if (!topology) return fail(topology.status());
  const int data_world = topology->dim(pipe::kAxisData);
  const int data_rank = topology->coord_of(rank, pipe::kAxisData);

  // Device: each rank uses the GPU of its local rank.
  auto device_r = train_device(a, env->local_rank);
  if (!device_r) return fail(device_r.status());
  const Device device = *device_r;

  auto cfg = config_load(*config_path, data_world);
  if (!cfg) return fail(cfg.status());
  auto comm = communicator_create(*env, device);
  if (!comm) return fail(comm.status());

  // Data: one token file, or a weighted blend of several (zt/data/blend.h).
  std::vector<BlendSpec> data_specs;
  std::string data_path;  // what the run record and the checkpoint keep: the --data values
  bool default_corpus = false;
  if (*data_values) {
    auto specs = blend_spec_parse(**data_values, "--data");
    if (!specs) return fail(specs.status());
    data_specs = std::move(specs).value();
    data_path = fmt::format("{}", fmt::join(**data_values, " "));
  } else {
    default_corpus = true;  // prepared with the byte tokenizer
    auto dd = default_data();
    if (!dd) return fail(dd.status());
    data_path = *dd;
    data_specs.push_back({.weight = 1, .path = data_path});
  }
  for (const char* f : {"--train-on-prompt", "--pack"}) {
    if (task != "sft" && a.has(f)) {
      return fail(invalid_argument("{} belongs to --task sft", f));
    }
  }
  if (task != "sft" && task != "reward" && task != "mlm" && a.has("--skip-bad")) {
    return fail(invalid_argument("--skip-bad belongs to --task sft, reward or mlm"));
  }
  if (task == "pretrain" && a.has("--eval-data")) {
    return fail(invalid_argument("--eval-data belongs to --task sft, reward or mlm"));
  }
  std::optional<tasks::SftData> sft, sft_eval_data;
  std::shared_ptr<const Tokenizer> data_tokenizer;
  if (task == "sft") {
    if (!*data_values || data_specs.size() != 1) {
      return fail(invalid_argument("--task sft needs --data FILE.jsonl (one JSON Lines file)"));
    }
    auto t = model_tokenizer(a, *choice, mc.vocab_size);
    if (t) {
      data_tokenizer = *t;
    } else if (a.has("--tokenizer")) {
      return fail(t.status());  // else: pre-tokenized records need none
    }
    tasks::SftOptions so{.seq_len = *seq,
                         .micro_batch = cfg->train_micro_batch_size_per_gpu,
                         .train_on_prompt = a.has("--train-on-prompt"),
                         .pack = a.has("--pack"),
                         .skip_bad = a.has("--skip-bad"),
                         .seed = static_cast<uint64_t>(*seed),
                         .shuffle = a.get("--order").value_or("random") == "random",
                         .rank = data_rank,
                         .world_size = data_world,
                         .vocab_size = mc.vocab_size,
                         .eos_id = model_eos_id(choice->source_dir)};
    auto d = tasks::SftData::open(data_specs[0].path, data_tokenizer, so);
    if (!d) return fail(d.status());
    sft.emplace(std::move(d).value());
    if (rank == 0) {
      ZT_LOG_INFO("sft: {} examples from {} ({}), {} truncated to {} tokens, {} skipped, {} "
                  "batches per epoch per rank; {}",
                  sft->dataset().size(), data_specs[0].path,
                  jsonl_format_name(sft->dataset().format()), sft->dataset().truncated(), *seq,
                  sft->dataset().skipped(), sft->batches_per_epoch(),
                  data_tokenizer ? data_tokenizer->describe() : std::string("pre-tokenized"));
    }
    if (auto e = a.get("--eval-data")) {
      so.shuffle = false;
      auto ed = tasks::SftData::open(*e, data_tokenizer, so);
      if (!ed) return fail(ed.status().with_context("--eval-data"));
      sft_eval_data.emplace(std::move(ed).value());
    }
    data_specs.clear();
  }
  std::optional<tasks::RewardData> reward, reward_eval_data;
  if (task == "reward") {
    if (!*data_values || data_specs.size() != 1) {
      return fail(invalid_argument(
          "--task reward needs --data FILE.jsonl (one JSON Lines file of prompt/chosen/rejected)"));
    }
    auto t = model_tokenizer(a, *choice, mc.vocab_size);
    if (!t) return fail(t.status());
    data_tokenizer = *t;
    tasks::RewardOptions ro{.seq_len = *seq,
                            .micro_batch = cfg->train_micro_batch_size_per_gpu,
                            .skip_bad = a.has("--skip-bad"),
                            .seed = static_cast<uint64_t>(*seed),
                            .shuffle = a.get("--order").value_or("random") == "random",
                            .rank = data_rank,
                            .world_size = data_world,
                            .vocab_size = mc.vocab_size,
                            .eos_id = model_eos_id(choice->source_dir)};
    auto d = tasks::RewardData::open(data_specs[0].path, data_tokenizer, ro);
    if (!d) return fail(d.status());
    reward.emplace(std::move(d).value());
    if (rank == 0) {
      ZT_LOG_INFO(
          "reward: {} pairs from {}, {} truncated to {} tokens, {} skipped, {} batches of "
          "{} pairs ({} rows) per epoch per rank; {}",
          reward->dataset().size(), data_specs[0].path, reward->dataset().truncated(), *seq,
          reward->dataset().skipped(), reward->batches_per_epoch(),
          cfg->train_micro_batch_size_per_gpu, 2 * cfg->train_micro_batch_size_per_gpu,
          data_tokenizer->describe());
    }
    if (auto e = a.get("--eval-data")) {
      ro.shuffle = false;
      auto ed = tasks::RewardData::open(*e, data_tokenizer, ro);
      if (!ed) return fail(ed.status().with_context("--eval-data"));
      reward_eval_data.emplace(std::move(ed).value());
    }
    data_specs.clear();
  }
  bool jsonl = sft || reward;  // batches come from a JSON Lines dataset
  std::optional<tasks::MlmOptions> mlm;
  std::shared_ptr<const TokenFile> mlm_eval_file;
  std::optional<tasks::MlmTextData> mlm_text, mlm_text_eval;
  for (const char* f : {"--mlm-probability", "--mask-share", "--random-share", "--mask-id"}) {
    if (task != "mlm" && a.has(f)) return fail(invalid_argument("{} belongs to --task mlm", f));
  }
  if (task == "mlm") {
    tasks::MlmOptions mo;
    mo.vocab_size = mc.vocab_size;
    mo.seed = static_cast<uint64_t>(*seed);
    for (auto [flag, dst] : {std::pair{"--mlm-probability", &mo.probability},
                             std::pair{"--mask-share", &mo.mask_share},
                             std::pair{"--random-share", &mo.random_share}}) {
      if (auto v = a.get(flag)) {
        char* end = nullptr;
        *dst = std::strtod(v->c_str(), &end);
        if (end == v->c_str() || *end != '\0') {
          return fail(invalid_argument("{} must be a number, got '{}'", flag, *v));
        }
      }
    }
    auto t = model_tokenizer(a, *choice, mc.vocab_size);
    if (t) {
      for (int32_t id = 0; id < (*t)->vocab_size(); ++id) {
        if ((*t)->is_special(id)) mo.never_mask.push_back(id);
      }
      for (const char* name : {"[MASK]", "<mask>"}) {
        if (auto id = (*t)->token_to_id(name); id && mo.mask_id < 0) mo.mask_id = *id;
      }
    } else if (a.has("--tokenizer")) {
      return fail(t.status());
    }
    if (auto v = a.get("--mask-id")) {
      auto id = parse_int("--mask-id", *v, 0);
      if (!id) return fail(id.status());
      mo.mask_id = static_cast<int32_t>(*id);
    }
    if (Status st = tasks::mlm_options_check(mo); !st.is_ok()) return fail(st);
    mlm = std::move(mo);
    // JSON Lines (text or input_ids records, one padded row each) or token files (windows).
    tasks::MlmTextOptions to{.seq_len = *seq,
                             .micro_batch = cfg->train_micro_batch_size_per_gpu,
                             .skip_bad = a.has("--skip-bad"),
                             .shuffle = a.get("--order").value_or("random") == "random",
                             .seed = static_cast<uint64_t>(*seed),
                             .rank = data_rank,
                             .world_size = data_world};
    if (data_specs.size() == 1 && tasks::is_jsonl_path(data_specs[0].path)) {
      auto d = tasks::MlmTextData::open(data_specs[0].path, t ? *t : nullptr, to, *mlm);
      if (!d) return fail(d.status());
      mlm_text.emplace(std::move(d).value());
      if (rank == 0) {
        ZT_LOG_INFO("mlm: {} examples from {} ({}), {} truncated to {} tokens, {} skipped, {} "
                    "batches per epoch per rank",
                    mlm_text->dataset().size(), data_specs[0].path,
                    jsonl_format_name(mlm_text->dataset().format()),
                    mlm_text->dataset().truncated(), *seq, mlm_text->dataset().skipped(),
                    mlm_text->batches_per_epoch());
      }
      data_specs.clear();
    } else if (a.has("--skip-bad")) {
      return fail(invalid_argument("--skip-bad belongs to JSON Lines data (--data FILE.jsonl)"));
    }
    if (auto e = a.get("--eval-data")) {
      if (tasks::is_jsonl_path(*e)) {
        to.shuffle = false;
        auto ed = tasks::MlmTextData::open(*e, t ? *t : nullptr, to, *mlm);
        if (!ed) return fail(ed.status().with_context("--eval-data"));
        mlm_text_eval.emplace(std::move(ed).value());
      } else {
        auto f = TokenFile::open(*e);
        if (!f) return fail(f.status().with_context("--eval-data"));
        mlm_eval_file = std::make_shared<const TokenFile>(std::move(f).value());
      }
    }
  }
  jsonl = jsonl || mlm_text;
  std::vector<BlendSource> sources;
  std::vector<std::string> data_files;
  for (const BlendSpec& spec : data_specs) {
    auto file = TokenFile::open(spec.path);
    if (!file) return fail(file.status());
    sources.push_back({std::make_shared<const TokenFile>(std::move(file).value()), spec.weight});
    data_files.push_back(spec.path);
  }
  const std::shared_ptr<const TokenFile> shared_file = jsonl ? nullptr : sources.front().file;
  if (!jsonl) data_fault_handler_install(data_files);
  SampleOrder order = SampleOrder::kRandom;
  if (auto o = a.get("--order")) {
    if (*o == "sequential") {
      order = SampleOrder::kSequential;
    } else if (*o != "random") {
      return fail(invalid_argument("--order must be random or sequential, got '{}'", *o));
    }
  }
  const BatchSamplerOptions sampler_options{.batch_size = cfg->train_micro_batch_size_per_gpu,
                                            .seq_len = *seq,
                                            .order = order,
                                            .seed = static_cast<uint64_t>(*seed),
                                            .rank = data_rank,
                                            .world_size = data_world,
                                            .vocab_size = mc.vocab_size};
  // One file trains exactly as before (BatchSampler); several go through BlendSampler.
  std::optional<BatchSampler> single_sampler;
  std::optional<BlendSampler> blend_sampler;
  if (jsonl) {
    // batches come from the JSON Lines dataset
  } else if (sources.size() == 1) {
    auto s = BatchSampler::create(shared_file, sampler_options);
    if (!s) return fail(s.status());
    single_sampler.emplace(std::move(s).value());
  } else {
    auto s = BlendSampler::create(sources, sampler_options);
    if (!s) return fail(s.status());
    blend_sampler.emplace(std::move(s).value());
    if (rank == 0) {
      for (int i = 0; i < blend_sampler->num_datasets(); ++i) {
        ZT_LOG_INFO("data blend: {:.4f} of the windows from {} ({} tokens)",
                    blend_sampler->weights()[static_cast<size_t>(i)], blend_sampler->file(i).path(),
                    blend_sampler->file(i).num_tokens());
      }
    }
  }
  int64_t sft_position = 0;
  const auto next_batch = [&]() -> Result<Batch> {
    if (sft) return sft->batch_at(sft_position++);
    if (reward) return reward->batch_at(sft_position++);
    if (mlm_text) return mlm_text->batch_at(sft_position++);
    Result<Batch> b = single_sampler ? single_sampler->next() : blend_sampler->next();
    if (b && mlm) tasks::mlm_batch(*b, data_rank, data_world, *mlm);
    return b;
  };
  const auto seek_batch = [&](int64_t g) {
    if (jsonl) {
      sft_position = g;
    } else if (single_sampler) {
      single_sampler->seek(g);
    } else {
      blend_sampler->seek(g);
    }
  };

  EngineOptions engine_options{.device = device,
                               .seed = static_cast<uint64_t>(*seed),
                               .comm = comm->get(),
                               .cuda_graph = a.has("--cuda-graph")};
  if (Status s = checkpoint_flags(a, engine_options); !s.is_ok()) return fail(s);
  std::unique_ptr<Engine> single_engine;
  std::unique_ptr<pipe::PipelineEngine> pipeline;
  if (pipe > 1 || tensor > 1) {
    // Each pipeline buffer's copy of the stage's units comes from a whole model of its own.
    // The same model as `model`: the task's head (reward) and the adapters (LoRA) too; with
    // tensor parallelism, the shard's part of every block.
    const pipe::ModelFactory factory =
        [&](const pipe::ModelShard& shard) -> Result<std::unique_ptr<nn::Model>> {
      ZT_ASSIGN_OR_RETURN(ckpt::ModelChoice c, ckpt::model_open(model_name, overrides));
      std::unique_ptr<nn::Transformer> m = std::move(c.model);
      if (shard.tp_size > 1) {
        ZT_ASSIGN_OR_RETURN(m, nn::tensor_parallel_part(*m, shard.tp_rank, shard.tp_size));
      }
      if (task == "reward" && m->transformer_config().task == nn::Task::kCausalLM) {
        m = tasks::reward_model_from(*m);
      }
      if (lora) ZT_RETURN_IF_ERROR(tasks::lora_apply(*m, *lora));
      return std::unique_ptr<nn::Model>(std::move(m));
    };
    auto p = pipe::PipelineEngine::create(
        factory, *cfg,
        {.stages = pipe,
         .tensor = tensor,
         .sequence_parallel = a.has("--sequence-parallel"),
         .partition_method = a.get("--partition-method").value_or(
             std::string(pipe::kDefaultPartitionMethod)),
         .seq_len = *seq,
         .engine = engine_options});
    if (!p) return fail(p.status());
    pipeline = std::move(p).value();
  } else {
    auto engine_r = initialize(model, *cfg, engine_options);
    if (!engine_r) return fail(engine_r.status());
    single_engine = std::move(engine_r).value();
  }
  Engine& engine = pipeline ? pipeline->engine() : *single_engine;

  // Checkpoint flags.
  auto sf = save_flags(a);
  if (!sf) return fail(sf.status());
  const std::optional<std::string> save_dir = sf->dir;
  const int64_t save_interval = sf->interval, keep_last = sf->keep_last;
  const bool save_on_signal = sf->on_signal;
  const bool save_async = sf->async;
  auto load_options = load_flags(a);
  if (!load_options) return fail(load_options.status());
  auto write_policy = write_error_policy(a.get("--on-write-error").value_or("fail"));
  if (!write_policy) return fail(write_policy.status());

  // What the data sampler needs to continue where it stopped: the batch order is a pure
  // function of (seed, batch number), so the step count and these are its whole state.
  const nlohmann::json data_state = {{"path", data_path},
                                     {"seed", *seed},
                                     {"order", order == SampleOrder::kRandom ? "random" : "sequential"},
                                     {"seq_len", *seq},
                                     {"model", model_name},
                                     {"task", task}};
  if (auto load_dir = a.get("--load")) {
    auto loaded = engine.load_checkpoint(*load_dir, *load_options);
    if (!loaded) return fail(loaded.status());
    if (*loaded && rank == 0) {
      const nlohmann::json saved = (*loaded)->client_state.value("data", nlohmann::json::object());
      for (const char* key : {"seed", "order", "seq_len", "path"}) {
        if (saved.contains(key) && saved[key] != data_state[key]) {
          ZT_LOG_WARN("the checkpoint was trained with {} {}, this run uses {}: the batches "
                      "differ from the uninterrupted run's",
                      key, saved[key].dump(), data_state[key].dump());
        }
      }
    }
  }
  // The sampler continues at the global batch after the last one trained. Global batch g is
  // W * B windows; at another world size or micro batch the same samples count gives the
  // nearest batch boundary (the config decides the new batch).
  const int64_t rows_per_batch = cfg->train_micro_batch_size_per_gpu * data_world;
  const int64_t start_step = engine.global_steps();
  if (engine.global_samples() % rows_per_batch != 0 && rank == 0) {
    ZT_LOG_WARN("resuming {} samples into the data at a batch of {} rows per micro-step: the "
                "data continues at the next whole batch",
                engine.global_samples(), rows_per_batch);
  }
  seek_batch((engine.global_samples() + rows_per_batch - 1) / rows_per_batch);
  if (start_step >= *steps && rank == 0) {
    ZT_LOG_WARN("the checkpoint is at step {}, at or past --steps {}: nothing to train",
                start_step, *steps);
  }

  MetricsWriter metrics(*write_policy);
  if (auto m = a.get("--metrics-out"); m && rank == 0) {
    if (Status s = metrics.open(*m); !s.is_ok()) return fail(s);
    nlohmann::json rr = run_record(engine, model, *seq, data_path);
    rr["pipeline_parallel_size"] = pipe;  // (world_size: the data-parallel ranks)
    rr["tensor_parallel_size"] = tensor;
    rr["sequence_parallel"] = a.has("--sequence-parallel");
    if (Status s = metrics.write(rr); !s.is_ok()) {
      return fail(s);
    }
  }
  if (save_on_signal) signal_save_install();

  if (rank == 0) {
    ZT_LOG_INFO(
        "training {} ({:.2f}M parameters) on {} rank(s){} for {} steps{}: batch {} = micro {} "
        "x accum {} x ranks {}, seq {}, {}, ZeRO stage {}",
        model_name, model.num_params() / 1e6, world,
        pipeline ? fmt::format(" as {}", pipeline->topology().describe())
                 : std::string(),
        *steps, start_step > 0 ? fmt::format(" (from step {})", start_step) : std::string(),
        cfg->train_batch_size, cfg->train_micro_batch_size_per_gpu,
        cfg->gradient_accumulation_steps, data_world, *seq, dtype_name(cfg->compute_dtype()),
        cfg->zero.stage);
  }
  const nlohmann::json client_state = {{"data", data_state}};
  int64_t saved_at = -1;
  // Saves may run in the background (--save-async); every way out of the loop below waits for
  // the one in flight (checkpoint_wait) before the process ends.
  auto save = [&]() -> Status {
    saved_at = engine.global_steps();
    if (save_async) {
      return engine.save_checkpoint_async(*save_dir, "", client_state,
                                          static_cast<int>(keep_last));
    }
    ZT_RETURN_IF_ERROR(engine.save_checkpoint(*save_dir, "", client_state));
    if (keep_last > 0 && rank == 0) {
      return ckpt::tags_prune(*save_dir, static_cast<int>(keep_last));
    }
    return Status::ok();
  };
  // TensorBoard and CSV monitors (the config's tensorboard and csv_monitor blocks), rank 0:
  // every number of a metrics record as Train/Samples/<name> against global samples, with
  // DeepSpeed's train_loss for the step loss.
  std::vector<std::unique_ptr<tools::Monitor>> monitors;
  if (rank == 0) {
    auto m = tools::monitors_from_config(cfg->blocks);
    if (!m) return fail(m.status());
    monitors = std::move(m).value();
    for (const auto& mon : monitors) ZT_LOG_INFO("monitor: {}", mon->describe());
  }
  const auto record = [&](const nlohmann::json& rec) -> Status {
    return record_metrics(metrics, monitors, rec, engine.global_samples());
  };
  ProgressBar bar(*steps, rank == 0);
  const int64_t tokens_per_step = cfg->train_batch_size * *seq;
  double first_loss = -1, last_loss = 0;
  for (int64_t step = start_step; step < *steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    if (pipeline) {
      // The first and the last stage draw the batch's micro-batches, in order.
      auto loss = pipeline->train_batch([&]() -> Result<pipe::MicroBatch> {
        ZT_ASSIGN_OR_RETURN(Batch b, next_batch());
        return pipe::MicroBatch{
            .tokens = b.tokens, .targets = b.targets, .attention_mask = b.attention_mask};
      });
      if (!loss) {
        bar.finish();
        return fail(loss.status());
      }
    }
    for (int64_t m = 0; !pipeline && m < cfg->gradient_accumulation_steps; ++m) {
      auto batch = next_batch();
      if (!batch) return fail(batch.status());
      if (a.has("--cuda-graph") && !batch->attention_mask.defined()) {
        // (one micro-step; with several a step, the engine says once why it does not capture)
        if (Status s = engine.train_batch(batch->tokens, batch->targets); !s.is_ok()) {
          bar.finish();
          return fail(s);
        }
        continue;
      }
      auto loss = engine.forward(batch->tokens, batch->targets,
                                 batch->attention_mask.defined() ? &batch->attention_mask
                                                                 : nullptr);
      if (!loss) return fail(loss.status());
      if (Status s = engine.backward(*loss); !s.is_ok()) {
        bar.finish();
        return fail(s);
      }
      if (Status s = engine.step(); !s.is_ok()) {
        bar.finish();
        return fail(s);
      }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const StepStats& st = *engine.last_step();
    double tps = tokens_per_step / std::max(secs, 1e-9);
    if (first_loss < 0) first_loss = st.loss;
    last_loss = st.loss;
    bar.update(st.step, st.loss, st.lr, tps, st.skipped);
    launcher::heartbeat_set_step(st.step);
    nlohmann::json r = {{"step", st.step},
                        {"loss", st.loss},
                        {"lr", st.lr},
                        {"loss_scale", st.loss_scale},
                        {"grad_norm", st.grad_norm},
                        {"skipped", st.skipped},
                        {"tokens_per_s", tps},
                        {"samples", st.samples}};
    // wall_clock_breakdown: DeepSpeed's Train/Samples/elapsed_time_ms_* in the monitors.
    for (const auto& [name, ms] : st.elapsed_ms) r["elapsed_time_ms_" + name] = ms;
    if (Status s = record(r); !s.is_ok()) {
      bar.finish();
      return fail(s);
    }
    if (sft_eval_data && (st.step % *eval_interval == 0 || st.step == *steps)) {
      auto ev = tasks::sft_eval(model, engine.eval_context(), *sft_eval_data, *eval_steps,
                                engine.hooks());
      if (!ev) {
        bar.finish();
        return fail(ev.status());
      }
      const double eval_loss = ev->mean();
      if (rank == 0) {
        ZT_LOG_INFO("step {}: eval loss {:.4f}, perplexity {:.2f} over {} tokens of {}", st.step,
                    eval_loss, std::exp(eval_loss), ev->count, *a.get("--eval-data"));
      }
      nlohmann::json er = {{"step", st.step},
                           {"eval_loss", eval_loss},
                           {"eval_perplexity", std::exp(eval_loss)},
                           {"eval_tokens", ev->count}};
      if (Status s = record(er); !s.is_ok()) {
        bar.finish();
        return fail(s);
      }
    }
    if ((mlm_eval_file || mlm_text_eval) &&
        (st.step % *eval_interval == 0 || st.step == *steps)) {
      Result<tasks::MlmMetrics> ev = tasks::MlmMetrics{};
      if (mlm_eval_file) {
        ev = tasks::mlm_eval(model, engine.eval_context(), *mlm_eval_file, *seq,
                             cfg->train_micro_batch_size_per_gpu,
                             *eval_steps > 0 ? *eval_steps * cfg->train_micro_batch_size_per_gpu
                                             : 0,
                             mc.vocab_size, *mlm, engine.hooks());
      } else {
        int64_t n = mlm_text_eval->batches_per_epoch();
        if (*eval_steps > 0) n = std::min<int64_t>(n, *eval_steps);
        ev = tasks::mlm_eval_batches(
            model, engine.eval_context(), n,
            [&](int64_t b) { return mlm_text_eval->eval_batch(b); }, mc.vocab_size,
            engine.hooks());
      }
      if (!ev) {
        bar.finish();
        return fail(ev.status());
      }
      if (rank == 0) {
        ZT_LOG_INFO("step {}: eval loss {:.4f}, masked-token accuracy {:.4f} over {} positions of {}",
                    st.step, ev->loss, ev->accuracy, ev->positions, *a.get("--eval-data"));
      }
      nlohmann::json er = {{"step", st.step},
                           {"eval_loss", ev->loss},
                           {"eval_accuracy", ev->accuracy},
                           {"eval_positions", ev->positions}};
      if (Status s = record(er); !s.is_ok()) {
        bar.finish();
        return fail(s);
      }
    }
    if (reward_eval_data && (st.step % *eval_interval == 0 || st.step == *steps)) {
      auto ev = tasks::reward_eval(model, engine.eval_context(), *reward_eval_data, *eval_steps,
                                   engine.hooks());
      if (!ev) {
        bar.finish();
        return fail(ev.status());
      }
      if (rank == 0) {
        ZT_LOG_INFO(
            "step {}: eval loss {:.4f}, accuracy {:.4f}, chosen score {:.4f}, rejected "
            "score {:.4f} over {} pairs of {}",
            st.step, ev->loss, ev->accuracy, ev->chosen_score, ev->rejected_score, ev->pairs,
            *a.get("--eval-data"));
      }
      nlohmann::json er = {{"step", st.step},
                           {"eval_loss", ev->loss},
                           {"eval_accuracy", ev->accuracy},
                           {"eval_chosen_score", ev->chosen_score},
                           {"eval_rejected_score", ev->rejected_score},
                           {"eval_pairs", ev->pairs}};
      if (Status s = record(er); !s.is_ok()) {
        bar.finish();
        return fail(s);
      }
    }
    if (save_dir && save_interval > 0 && st.step % save_interval == 0 && st.step < *steps) {
      if (Status s = save(); !s.is_ok()) {
        bar.finish();
        return fail(s);
      }
    }
    if (save_on_signal) {
      auto sig = signal_save_requested(engine);
      if (!sig) {
        bar.finish();
        return fail(sig.status());
      }
      if (*sig) {
        bar.finish();
        if (rank == 0) ZT_LOG_INFO("signal received: saving at step {} and stopping", st.step);
        if (saved_at != engine.global_steps()) {
          if (Status s = save(); !s.is_ok()) return fail(s);
        }
        if (Status s = engine.checkpoint_wait(); !s.is_ok()) return fail(s);
        if (Status s = metrics.close(); !s.is_ok()) return fail(s);
        return 0;
      }
    }
  }
  bar.finish();
  if (save_dir && saved_at != engine.global_steps()) {
    if (Status s = save(); !s.is_ok()) return fail(s);
  }
  if (Status s = engine.checkpoint_wait(); !s.is_ok()) return fail(s);
  if (auto dir16 = a.get("--save-16bit-model")) {
    if (auto r = engine.save_16bit_model(*dir16); !r) return fail(r.status());
  }
  if (Status s = metrics.close(); !s.is_ok()) return fail(s);
  if (auto dump = a.get("--dump-params")) {
    auto full = engine.gather_master();
    if (!full) return fail(full.status());
    if (rank == 0) {
      auto f = OutputFile::create(*dump, {.what = "parameter dump"});
      if (!f) return fail(f.status());
      for (size_t u = 0; u < full->size(); ++u) {
        const int64_t n = model.units()[u]->flat_numel();
        if (Status s = f->write((*full)[u].data(), static_cast<size_t>(n) * 4); !s.is_ok()) {
          return fail(s);
        }
      }
      if (Status s = f->commit(); !s.is_ok()) return fail(s);
    }
  }
  if (rank == 0 && reward) {
    std::printf("trained %lld steps: loss %.4f -> %.4f (ln 2 = 0.6931: no preference)\n",
                static_cast<long long>(*steps), first_loss, last_loss);
  } else if (rank == 0) {
    std::printf("trained %lld steps: loss %.4f -> %.4f (ln(vocab) = %.4f)\n",
                static_cast<long long>(*steps), first_loss, last_loss,
                std::log(static_cast<double>(mc.vocab_size)));
  }

  // (a reward model does not generate; a pipeline's stages hold parts of the model)
  if (*sample_tokens > 0 && !mlm && !reward && !pipeline) {
    // The tokenizer of the data: named, the model directory's, or bytes for the built-in corpus.
    std::shared_ptr<const Tokenizer> tok = data_tokenizer;
    if (!tok && (a.has("--tokenizer") || !choice->source_dir.empty() || default_corpus)) {
      auto t = model_tokenizer(a, *choice, mc.vocab_size);
      if (!t) return fail(t.status());
      tok = *t;
    }
    std::vector<int32_t> prompt;
    if (auto p = a.get("--prompt")) {
      if (!tok) {
        return fail(invalid_argument("--prompt needs the data's tokenizer: give --tokenizer FILE "
                                     "(or --tokenizer bytes)"));
      }
      auto ids = tok->encode(*p, true);
      if (!ids) return fail(ids.status().with_context("--prompt"));
      prompt = std::move(*ids);
    }
    if (prompt.empty() && sft) {
      // The first example's prompt: its tokens up to the first counted label.
      auto ex = sft->dataset().example(0);
      if (!ex) return fail(ex.status());
      const TokenExample& e = ex->sequences[0];
      for (size_t t = 0; t < e.input_ids.size() && (e.labels.empty() || e.labels[t] == -100); ++t) {
        prompt.push_back(e.input_ids[t]);
      }
      if (prompt.empty()) prompt.push_back(e.input_ids[0]);
    }
    if (prompt.empty()) {
      std::vector<uint32_t> first(std::min<int64_t>(16, shared_file->num_tokens()));
      shared_file->read_tokens(0, first);
      prompt.assign(first.begin(), first.end());
    }
    nn::GenerateOptions g{.max_new_tokens = static_cast<int>(*sample_tokens),
                          .sampling = nn::Sampling::kSample,
                          .top_k = 40,
                          .temperature = 0.8f,
                          .seed = static_cast<uint64_t>(*seed),
                          .vocab_size = mc.vocab_size,
                          .max_seq_len = static_cast<int>(mc.max_positions),
                          .num_layers = mc.n_layer};
    std::vector<int32_t> out =
        nn::generate(model, engine.eval_context(), prompt, g, engine.hooks());
    if (rank != 0) return 0;
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), out.begin(), out.end());
    if (tok) {
      std::printf("--- sample ---\n%s\n--------------\n", tok->decode(all, true).c_str());
    } else {
      std::printf("--- sample (token ids) ---\n");
      for (int32_t t : all) std::printf("%d ", t);
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace zt::cli
