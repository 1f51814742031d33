// `zt train`: trains a GPT model with a DeepSpeed config. Progress on stderr, an optional JSON
// Lines metrics file, and a generated sample at the end.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_args.h"
#include "commands.h"
#include "progress.h"
#include "zt/comm/communicator.h"
#include "zt/comm/env.h"
#include "zt/core/log.h"
#include "zt/data/batch_sampler.h"
#include "zt/data/byte_tokenizer.h"
#include "zt/data/prepare.h"
#include "zt/nn/generate.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace zt::cli {
namespace {

constexpr const char* kTrainUsage = R"(Usage: zt train --config ds_config.json [options]

Trains a GPT-2-family model with the DeepSpeed config's batch sizes, optimizer, scheduler,
precision and clipping. Without --data it trains on the default corpus (license texts every Debian
machine carries, byte-level tokens), prepared once into ~/.cache/zerotrain.

Options:
)";

const std::vector<FlagSpec> kFlags = {
    {"--config", FlagKind::kValue, "DeepSpeed config (ds_config.json)", "FILE"},
    {"--deepspeed_config", FlagKind::kValue, "same as --config (DeepSpeed's spelling)", "FILE"},
    {"--model", FlagKind::kValue,
     "gpt2-tiny (default), gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt-1.3b", "NAME"},
    {"--data", FlagKind::kValue, "token file (llm.c .bin, or nanoGPT raw uint16 .bin)", "FILE"},
    {"--steps", FlagKind::kValue, "optimizer steps to run (default 200)", "N"},
    {"--device", FlagKind::kValue, "cpu, cuda or cuda:N (default: cuda when a GPU is visible)",
     "DEV"},
    {"--seq-len", FlagKind::kValue,
     "tokens per sequence (default: the model's context, 128 for gpt2-tiny)", "T"},
    {"--metrics-out", FlagKind::kValue, "write JSON Lines metrics (one record per step)", "FILE"},
    {"--vocab-size", FlagKind::kValue, "override the model's vocabulary size", "V"},
    {"--order", FlagKind::kValue, "batch order: random (default) or sequential", "ORDER"},
    {"--seed", FlagKind::kValue, "seed for initialisation and batch order (default 1234)", "N"},
    {"--sample-tokens", FlagKind::kValue, "tokens to generate at the end (default 200, 0: none)",
     "N"},
    {"--prompt", FlagKind::kValue, "prompt for the sample (byte-level models)", "TEXT"},
    {"--local_rank", FlagKind::kValue, "set by launchers; ZeroTrain reads LOCAL_RANK", "N"},
    {"--dump-params", FlagKind::kValue,
     "after training, write the fp32 parameters (raw, unit order)", "FILE"},
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

nlohmann::json run_record(const Engine& e, const nn::Gpt2& model, int64_t seq_len,
                          const std::string& data) {
  const DeepSpeedConfig& c = e.config();
  zero::ModelStateBytes b = e.model_state_bytes();
  return {{"type", "run"},
          {"model", model.name()},
          {"n_layer", model.config().n_layer},
          {"n_embd", model.config().n_embd},
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

int cmd_train(const Args& args) {
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

  // Model.
  const std::string model_name = a.get("--model").value_or("gpt2-tiny");
  auto mc = nn::gpt2_config_named(model_name);
  if (!mc) return fail(mc.status());
  if (auto v = a.get("--vocab-size")) {
    auto vs = parse_int("--vocab-size", *v, 2);
    if (!vs) return fail(vs.status());
    mc->vocab_size = static_cast<int>(*vs);
    mc->padded_vocab_size = nn::gpt2_padded_vocab(mc->vocab_size);
  }
  auto seq = int_flag("--seq-len", model_name == "gpt2-tiny" ? 128 : mc->max_seq_len, 2);
  if (!seq) return fail(seq.status());
  if (*seq > mc->max_seq_len) {
    return fail(invalid_argument("--seq-len {} exceeds {}'s context of {}", *seq, model_name,
                                 mc->max_seq_len));
  }

  // Ranks: from the launcher's environment (zt launch, deepspeed, torchrun, mpirun, srun).
  auto env = dist_env_from_environment();
  if (!env) return fail(env.status());
  const int rank = env->rank, world = env->world_size;
  if (world > 1) set_log_rank(rank);

  // Device: each rank uses the GPU of its local rank.
  Device device = cuda_device_count() > 0 ? Device::cuda(env->local_rank) : Device::cpu();
  if (auto d = a.get("--device")) {
    auto pd = device_parse(*d);
    if (!pd) return fail(pd.status());
    device = *pd;
    if (device.is_cuda() && *d == "cuda") device = Device::cuda(env->local_rank);
  }
  if (Status s = device_check(device); !s.is_ok()) return fail(s);

  auto cfg = config_load(*config_path, world);
  if (!cfg) return fail(cfg.status());
  auto comm = communicator_create(*env, device);
  if (!comm) return fail(comm.status());

  // Data.
  std::string data_path;
  if (auto d = a.get("--data")) {
    data_path = *d;
  } else {
    auto dd = default_data();
    if (!dd) return fail(dd.status());
    data_path = *dd;
  }
  auto file = TokenFile::open(data_path);
  if (!file) return fail(file.status());
  auto shared_file = std::make_shared<const TokenFile>(std::move(file).value());
  SampleOrder order = SampleOrder::kRandom;
  if (auto o = a.get("--order")) {
    if (*o == "sequential") {
      order = SampleOrder::kSequential;
    } else if (*o != "random") {
      return fail(invalid_argument("--order must be random or sequential, got '{}'", *o));
    }
  }
  auto sampler =
      BatchSampler::create(shared_file, {.batch_size = cfg->train_micro_batch_size_per_gpu,
                                         .seq_len = *seq,
                                         .order = order,
                                         .seed = static_cast<uint64_t>(*seed),
                                         .rank = rank,
                                         .world_size = world,
                                         .vocab_size = mc->vocab_size});
  if (!sampler) return fail(sampler.status());

  nn::Gpt2 model(*mc);
  auto engine_r = initialize(
      model, *cfg, {.device = device, .seed = static_cast<uint64_t>(*seed), .comm = comm->get()});
  if (!engine_r) return fail(engine_r.status());
  Engine& engine = **engine_r;

  std::unique_ptr<std::ofstream> metrics;
  if (auto m = a.get("--metrics-out"); m && rank == 0) {
    metrics = std::make_unique<std::ofstream>(*m);
    if (!*metrics) return fail(io_error("cannot write metrics file {}", *m));
    *metrics << run_record(engine, model, *seq, data_path).dump() << "\n" << std::flush;
  }

  if (rank == 0) {
    ZT_LOG_INFO(
        "training {} ({:.2f}M parameters) on {} rank(s) for {} steps: batch {} = micro {} "
        "x accum {} x ranks {}, seq {}, {}, ZeRO stage {}",
        model_name, model.num_params() / 1e6, world, *steps, cfg->train_batch_size,
        cfg->train_micro_batch_size_per_gpu, cfg->gradient_accumulation_steps, world, *seq,
        dtype_name(cfg->compute_dtype()), cfg->zero.stage);
  }
  ProgressBar bar(*steps, rank == 0);
  const int64_t tokens_per_step = cfg->train_batch_size * *seq;
  double first_loss = -1, last_loss = 0;
  for (int64_t step = 0; step < *steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t m = 0; m < cfg->gradient_accumulation_steps; ++m) {
      auto batch = sampler->next();
      if (!batch) return fail(batch.status());
      auto loss = engine.forward(batch->tokens, batch->targets);
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
    if (metrics) {
      nlohmann::json r = {{"step", st.step},
                          {"loss", st.loss},
                          {"lr", st.lr},
                          {"loss_scale", st.loss_scale},
                          {"grad_norm", st.grad_norm},
                          {"skipped", st.skipped},
                          {"tokens_per_s", tps},
                          {"samples", st.samples}};
      *metrics << r.dump() << "\n" << std::flush;
    }
  }
  bar.finish();
  if (auto dump = a.get("--dump-params")) {
    auto full = engine.gather_master();
    if (!full) return fail(full.status());
    if (rank == 0) {
      std::ofstream f(*dump, std::ios::binary);
      for (size_t u = 0; u < full->size(); ++u) {
        const int64_t n = model.units()[u]->flat_numel();
        f.write(static_cast<const char*>((*full)[u].data()), n * 4);
      }
      if (!f) return fail(io_error("cannot write {}", *dump));
    }
  }
  if (rank == 0)
    std::printf("trained %lld steps: loss %.4f -> %.4f (ln(vocab) = %.4f)\n",
                static_cast<long long>(*steps), first_loss, last_loss,
                std::log(static_cast<double>(mc->vocab_size)));

  if (*sample_tokens > 0) {
    std::vector<int32_t> prompt;
    if (auto p = a.get("--prompt"); p && mc->vocab_size >= ByteTokenizer::kVocabSize) {
      prompt = ByteTokenizer::encode(*p);
    }
    if (prompt.empty()) {
      std::vector<uint32_t> first(std::min<int64_t>(16, shared_file->num_tokens()));
      shared_file->read_tokens(0, first);
      prompt.assign(first.begin(), first.end());
    }
    nn::GenerateOptions g{.max_new_tokens = static_cast<int>(*sample_tokens),
                          .sampling = nn::Sampling::kTopK,
                          .top_k = 40,
                          .temperature = 0.8f,
                          .seed = static_cast<uint64_t>(*seed),
                          .vocab_size = mc->vocab_size,
                          .max_seq_len = static_cast<int>(*seq)};
    std::vector<int32_t> out =
        nn::generate(model, engine.eval_context(), prompt, g, engine.hooks());
    if (rank != 0) return 0;
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), out.begin(), out.end());
    if (mc->vocab_size <= ByteTokenizer::kVocabSize) {
      std::printf("--- sample ---\n%s\n--------------\n", ByteTokenizer::decode(all).c_str());
    } else {
      std::printf("--- sample (token ids) ---\n");
      for (int32_t t : all) std::printf("%d ", t);
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace zt::cli
