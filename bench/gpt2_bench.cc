// ZeroTrain's training throughput: steps of a model (a named size of any family, gpt2 ...
// gpt-65b, llama-tiny ... llama-70b, or a Hugging Face model directory) on random tokens through
// the public engine API, each step timed with CUDA events after warm-up; prints one JSON line with
// the median step time, tokens/s, model FLOPs utilisation (6 N + 12 L T C per token, against
// the H100's dense bf16 peak) and peak device memory. Its peers are bench/gpt2_torch.py (GPT-2
// shapes) and bench/llama_torch.py (transformers' Llama), run with the same model, batch, sequence
// length and precision by scripts/gpu_check.sh.
//
//   zt_bench_gpt2 [--model gpt2] [--batch 16] [--seq 1024] [--dtype bf16] [--steps 20] [--warmup 5]
//                 [--stage N] [--offload-optimizer none|cpu] [--pin-memory true|false]
//                 [--zero-keys '"reduce_bucket_size": 5e7, "overlap_comm": true']
//                 [--ds-keys '"aio": {"queue_depth": 32}']
//                 [--gradient-checkpointing] [--lora-dim R [--lora-alpha A] [--only-optimize-lora]]
//                 [--kernel-trace N] [--cuda-graph] [--keep-activations]
//
// --gradient-checkpointing: activation checkpointing (EngineOptions::activation_checkpointing, as
// `zt train --gradient-checkpointing`): each block keeps only its input and recomputes the rest
// before its backward. --lora-dim R adds rank-R LoRA adapters (scale alpha / R, --lora-alpha,
// default 1) to every linear module of the blocks (tasks/lora.h, before the engine is built);
// --only-optimize-lora freezes everything else: in bf16 the frozen units keep only their bf16
// compute copy (no gradient, no fp32 master, no Adam state), the adapters fp32 master weights and
// AdamW state. The JSON line says "lora_dim" (0: none), "lora_alpha", "only_optimize_lora",
// "trainable_params" and "checkpointing". Model FLOPs (for MFU) count 6 per trainable matmul
// parameter and 4 per frozen one (forward and input gradient; a frozen weight has no weight
// gradient), the same convention as bench/llama_torch.py --lora; recomputation is not counted.
//
// --cuda-graph: each step is Engine::train_batch with EngineOptions::cuda_graph (the whole step
// captured as a CUDA graph after the engine's two warm-up steps, then replayed); the JSON line
// says "cuda_graph": true. --keep-activations: EngineOptions::keep_activations (the MLP's
// activation output kept for backward instead of recomputed).
// --kernel-trace N: after the timed steps, N more steps run under CUPTI's activity tracing and
// the GPU time of each kernel (summed by name, per step) goes to stderr as a table and into the
// JSON line as "kernels" (the timed steps are not traced), followed by the GPU's idle stretches
// between records (the longest, with the work on either side; "gpu_idle_ms_per_step", and
// "gpu_idle": the gaps by size and by the pair of kernels around them).
// --zero-keys adds members to the zero_optimization block (needs --stage); --ds-keys adds
// top-level members (the aio block, wall_clock_breakdown).
// --offload-optimizer cpu (needs --stage 1, 2 or 3) sets zero_optimization.offload_optimizer
// {device: cpu, pin_memory: --pin-memory, default true}: ZeRO-Offload, the fp32 master weights and
// Adam state in host memory, stepped by the CPU; the JSON line then also has the median host
// step (offload_step_ms_median) and its CPU part (offload_cpu_ms_median). Every line has the
// model-state bytes on the device and in host memory (model_state_bytes_device, _host).
//
// Data parallel: under `zt launch --num_gpus N` each rank reads its rank from the environment,
// trains on cuda:LOCAL_RANK with its own random tokens and --batch as its micro-batch (the
// config's train_batch_size is batch * N); --stage N sets zero_optimization.stage. Only rank 0
// prints; its tokens_per_s counts every rank's tokens (batch * seq * N / step time) and its
// peak_mem_bytes is its own. The peers on several GPUs are bench/zero_torch.py (DDP, FSDP2), run
// by scripts/gpu_dist_check.sh. Without a launcher's environment it is one process, as before.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/checkpoint/model_open.h"
#include "zt/comm/communicator.h"
#include "zt/comm/env.h"
#include "zt/runtime/engine.h"
#include "zt/tasks/lora.h"
#include "zt/zero/optimizer_offload.h"

#include "kernel_trace.h"

namespace {

struct Args {
  std::string model = "gpt2";
  int batch = 16;
  int seq = 1024;
  std::string dtype = "bf16";
  int steps = 20;
  int warmup = 5;
  std::string device = "cuda";
  int stage = -1;  // -1: no zero_optimization block (DeepSpeed's default, stage 0)
  std::string offload_optimizer = "none";
  std::string pin_memory = "true";
  std::string zero_keys;       // more zero_optimization keys, as JSON members ("k": v, ...)
  std::string ds_keys;         // more top-level keys ("aio": {...}, "wall_clock_breakdown": ...)
  bool checkpointing = false;  // --gradient-checkpointing
  bool cuda_graph = false;     // --cuda-graph
  bool keep_activations = false;  // --keep-activations
  int kernel_trace = 0;        // --kernel-trace N
  int lora_dim = 0;            // 0: no adapters
  float lora_alpha = 1.0f;
  bool lora_alpha_set = false;
  bool only_optimize_lora = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    // Launchers pass --local_rank=N (or --local_rank N); the rank comes from LOCAL_RANK instead.
    if (k.rfind("--local_rank=", 0) == 0) continue;
    // Switches (no value).
    if (k == "--gradient-checkpointing") {
      a.checkpointing = true;
      continue;
    }
    if (k == "--cuda-graph") {
      a.cuda_graph = true;
      continue;
    }
    if (k == "--keep-activations") {
      a.keep_activations = true;
      continue;
    }
    if (k == "--only-optimize-lora") {
      a.only_optimize_lora = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "zt_bench_gpt2: option %s needs a value\n", k.c_str());
      std::exit(2);
    }
    std::string v = argv[++i];
    if (k == "--local_rank") continue;
    if (k == "--model") {
      a.model = v;
    } else if (k == "--batch") {
      a.batch = std::atoi(v.c_str());
    } else if (k == "--seq") {
      a.seq = std::atoi(v.c_str());
    } else if (k == "--dtype") {
      a.dtype = v;
    } else if (k == "--steps") {
      a.steps = std::atoi(v.c_str());
    } else if (k == "--warmup") {
      a.warmup = std::atoi(v.c_str());
    } else if (k == "--device") {
      a.device = v;
    } else if (k == "--stage") {
      a.stage = std::atoi(v.c_str());
    } else if (k == "--offload-optimizer") {
      a.offload_optimizer = v;
    } else if (k == "--pin-memory") {
      a.pin_memory = v;
    } else if (k == "--zero-keys") {
      a.zero_keys = v;
    } else if (k == "--ds-keys") {
      a.ds_keys = v;
    } else if (k == "--kernel-trace") {
      a.kernel_trace = std::atoi(v.c_str());
    } else if (k == "--lora-dim") {
      char* end = nullptr;
      const long r = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || r < 1) {
        std::fprintf(stderr, "zt_bench_gpt2: --lora-dim is a positive rank, not %s\n", v.c_str());
        std::exit(2);
      }
      a.lora_dim = static_cast<int>(r);
    } else if (k == "--lora-alpha") {
      char* end = nullptr;
      a.lora_alpha = std::strtof(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0') {
        std::fprintf(stderr, "zt_bench_gpt2: --lora-alpha must be a number, not %s\n", v.c_str());
        std::exit(2);
      }
      a.lora_alpha_set = true;
    } else {
      std::fprintf(stderr, "zt_bench_gpt2: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (a.offload_optimizer != "none" && a.offload_optimizer != "cpu") {
    std::fprintf(stderr, "zt_bench_gpt2: --offload-optimizer is none or cpu, not %s\n",
                 a.offload_optimizer.c_str());
    std::exit(2);
  }
  if (a.pin_memory != "true" && a.pin_memory != "false") {
    std::fprintf(stderr, "zt_bench_gpt2: --pin-memory is true or false, not %s\n",
                 a.pin_memory.c_str());
    std::exit(2);
  }
  if (a.offload_optimizer == "cpu" && a.stage < 1) {
    std::fprintf(stderr, "zt_bench_gpt2: --offload-optimizer cpu needs --stage 1, 2 or 3\n");
    std::exit(2);
  }
  if ((a.lora_alpha_set || a.only_optimize_lora) && a.lora_dim == 0) {
    std::fprintf(stderr,
                 "zt_bench_gpt2: --lora-alpha and --only-optimize-lora need --lora-dim R\n");
    std::exit(2);
  }
  if (!a.zero_keys.empty() && a.stage < 0) {
    std::fprintf(stderr, "zt_bench_gpt2: --zero-keys needs --stage\n");
    std::exit(2);
  }
  return a;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  Args a = parse(argc, argv);
  auto choice = zt::ckpt::model_open(a.model);
  if (!choice) {
    std::fprintf(stderr, "%s\n", choice.status().message().c_str());
    return 1;
  }
  zt::nn::Transformer& model = *choice->model;
  const zt::nn::TransformerConfig& mc = model.transformer_config();
  // LoRA adapters go on before the engine is built (it shards them and freezes the base).
  if (a.lora_dim > 0) {
    const zt::tasks::LoraOptions lo{
        .r = a.lora_dim, .alpha = a.lora_alpha, .only_optimize = a.only_optimize_lora};
    if (zt::Status st = zt::tasks::lora_apply(model, lo); !st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
  }
  auto env = zt::dist_env_from_environment();
  if (!env) {
    std::fprintf(stderr, "%s\n", env.status().message().c_str());
    return 1;
  }
  const int world = env->world_size;
  auto dev = zt::device_parse(a.device);
  // Each rank uses the GPU of its local rank, as zt train does ("cuda" means cuda:LOCAL_RANK).
  if (dev && dev->is_cuda() && a.device == "cuda") *dev = zt::Device::cuda(env->local_rank);
  if (!dev || !zt::device_check(*dev).is_ok()) {
    std::fprintf(stderr, "zt_bench_gpt2: device %s unavailable\n", a.device.c_str());
    return 1;
  }
  std::string precision = a.dtype == "bf16"   ? R"("bf16": {"enabled": true})"
                          : a.dtype == "fp16" ? R"("fp16": {"enabled": true, "loss_scale": 1024})"
                                              : R"("bf16": {"enabled": false})";
  std::string offload_json =
      a.offload_optimizer == "none"
          ? ""
          : fmt::format(R"(, "offload_optimizer": {{"device": "cpu", "pin_memory": {}}})",
                        a.pin_memory);
  std::string zero = a.stage < 0
                         ? ""
                         : fmt::format(R"(, "zero_optimization": {{"stage": {}{}{}}})", a.stage,
                                       offload_json, a.zero_keys.empty() ? "" : ", " + a.zero_keys);
  std::string json = fmt::format(
      R"({{"train_batch_size": {}, "train_micro_batch_size_per_gpu": {}, "gradient_clipping": 1.0,
          "optimizer": {{"type": "AdamW", "params": {{"lr": 6e-4, "betas": [0.9, 0.95],
          "weight_decay": 0.1}}}}, {}{}{}}})",
      a.batch * world, a.batch, precision, zero, a.ds_keys.empty() ? "" : ", " + a.ds_keys);
  auto cfg = zt::config_parse(json, "bench", world);
  if (!cfg) {
    std::fprintf(stderr, "%s\n", cfg.status().message().c_str());
    return 1;
  }
  // The data-parallel group; one process trains alone with the engine's own communicator.
  std::unique_ptr<zt::Communicator> comm;
  if (world > 1) {
    auto c = zt::communicator_create(*env, *dev);
    if (!c) {
      std::fprintf(stderr, "%s\n", c.status().message().c_str());
      return 1;
    }
    comm = std::move(c).value();
  }
  const bool print = env->rank == 0;
  auto engine = zt::initialize(
      model, *cfg,
      {.device = *dev,
       .seed = 1,
       .comm = comm.get(),
       .activation_checkpointing = a.checkpointing,
       .keep_activations = a.keep_activations,
       .cuda_graph = a.cuda_graph});
  if (!engine) {
    std::fprintf(stderr, "%s\n", engine.status().message().c_str());
    return 1;
  }
  zt::Engine& e = **engine;
  // Random tokens (fixed seed, another stream per rank), a new batch each step.
  std::vector<int32_t> buf(static_cast<size_t>(a.batch) * (a.seq + 1));
  uint64_t x = 88172645463325252ull ^ (static_cast<uint64_t>(env->rank) * 0x9E3779B97F4A7C15ull);
  auto next_batch = [&](zt::Tensor& tok, zt::Tensor& tgt) {
    for (auto& t : buf) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      t = static_cast<int32_t>(x % static_cast<uint64_t>(mc.vocab_size));
    }
    tok = zt::Tensor::empty({a.batch, a.seq}, zt::DType::i32);
    tgt = zt::Tensor::empty({a.batch, a.seq}, zt::DType::i32);
    for (int b = 0; b < a.batch; ++b) {
      std::memcpy(tok.data<int32_t>() + b * a.seq, &buf[b * (a.seq + 1)], a.seq * 4);
      std::memcpy(tgt.data<int32_t>() + b * a.seq, &buf[b * (a.seq + 1) + 1], a.seq * 4);
    }
  };
  std::vector<float> ms;
  std::vector<double> losses;
  std::vector<double> offload_ms, offload_cpu_ms;
  const zt::zero::OptimizerOffload* offload = e.zero_state().offload();
  zt::Event start(*dev), stop(*dev), after_forward(*dev), after_backward(*dev);
  // Per timed step (not with --cuda-graph): the GPU time from the step's start to the end of
  // forward, of backward and of the optimizer step (events), and the host's time in each call;
  // their medians go into the JSON line as "phases", to tell GPU idle time from host time.
  std::vector<double> gpu_fwd, gpu_bwd, gpu_opt, host_fwd, host_bwd, host_opt;
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  // ZT_BENCH_MEMORY=1: on the first timed step, rank 0 prints (stderr) the memory allocated after
  // each phase and the peak within it, to see where the peak comes from.
  const bool trace_memory = std::getenv("ZT_BENCH_MEMORY") != nullptr && print;
  auto phase = [&](const char* name, int step) {
    if (!trace_memory || step != a.warmup || !dev->is_cuda()) return;
    e.stream().synchronize();
    const auto st = zt::allocator_stats(*dev);
    std::fprintf(stderr, "memory after %-8s allocated %8.1f MiB, peak in phase %8.1f MiB\n", name,
                 st.allocated_bytes / 1048576.0, st.peak_allocated_bytes / 1048576.0);
    zt::allocator_reset_peak(*dev);
  };
  // One training step; false (after saying why) when it fails.
  auto train_step = [&](int s) -> bool {
    zt::Tensor tok, tgt;
    next_batch(tok, tgt);
    if (s == a.warmup) zt::allocator_reset_peak(*dev);
    phase("start", s);
    start.record(e.stream());
    if (a.cuda_graph) {
      // The whole step in one call (replayed as a CUDA graph after the engine's warm-up).
      if (auto st = e.train_batch(tok, tgt); !st.is_ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return false;
      }
    } else {
      Clock::time_point t0 = Clock::now();
      auto loss = e.forward(tok, tgt);
      const double h_fwd = ms_since(t0);
      after_forward.record(e.stream());
      phase("forward", s);
      if (!loss) {
        std::fprintf(stderr, "%s\n", loss.status().message().c_str());
        return false;
      }
      t0 = Clock::now();
      if (auto st = e.backward(*loss); !st.is_ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return false;
      }
      const double h_bwd = ms_since(t0);
      after_backward.record(e.stream());
      phase("backward", s);
      t0 = Clock::now();
      if (auto st = e.step(); !st.is_ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return false;
      }
      const double h_opt = ms_since(t0);
      phase("step", s);
      if (s >= a.warmup && !trace_memory) {
        host_fwd.push_back(h_fwd);
        host_bwd.push_back(h_bwd);
        host_opt.push_back(h_opt);
      }
    }
    stop.record(e.stream());
    stop.synchronize();
    losses.push_back(static_cast<float>(e.last_step()->loss));
    if (s >= a.warmup) {
      if (!a.cuda_graph && !trace_memory) {
        gpu_fwd.push_back(start.elapsed_ms(after_forward));
        gpu_bwd.push_back(after_forward.elapsed_ms(after_backward));
        gpu_opt.push_back(after_backward.elapsed_ms(stop));
      }
      ms.push_back(start.elapsed_ms(stop));
      if (offload != nullptr) {
        offload_ms.push_back(offload->last_times().total_ms);
        offload_cpu_ms.push_back(offload->last_times().cpu_ms);
      }
    }
    return true;
  };
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    if (!train_step(s)) return 1;
  }
  std::vector<zt::bench::KernelTotal> kernels;
  zt::bench::KernelTrace trace;
  if (a.kernel_trace > 0) {
    // Every rank runs the traced steps (their collectives need all ranks); rank 0 records them.
    const bool tracing = print && trace.start();
    const size_t timed = ms.size();
    for (int s = 0; s < a.kernel_trace; ++s) {
      if (!train_step(a.warmup + a.steps + s)) return 1;
    }
    e.stream().synchronize();
    if (tracing) kernels = trace.stop();
    ms.resize(timed);  // the traced steps are not timed
    for (auto* v : {&gpu_fwd, &gpu_bwd, &gpu_opt, &host_fwd, &host_bwd, &host_opt}) {
      v->resize(std::min(v->size(), timed));
    }
    losses.resize(static_cast<size_t>(a.warmup + a.steps));
  }
  std::vector<float> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  double tokens = static_cast<double>(a.batch) * a.seq * world;
  // Model FLOPs per token (PaLM's appendix B): 6 per parameter outside the embedding tables
  // (forward and backward of every matmul, the head included when it is tied, counted once) plus
  // attention's 12 L T (heads x head size); causal attention as usually counted, not halved.
  // A frozen unit's parameters count 4 (forward and input gradient: no weight gradient).
  double matmul_flops = 0;  // per token
  int64_t trainable_params = 0;
  const auto& units = model.units();
  for (size_t u = 0; u < units.size(); ++u) {
    int64_t n = 0;
    for (zt::nn::Param* p : units[u]->params()) n += p->numel();
    if (!units[u]->frozen()) trainable_params += n;
    if (u == 0) continue;  // the embedding lookup
    matmul_flops += (units[u]->frozen() ? 4.0 : 6.0) * static_cast<double>(n);
  }
  if (mc.tied == zt::nn::Tied::kYes) {
    matmul_flops += (units[0]->frozen() ? 4.0 : 6.0) * static_cast<double>(mc.vocab_size) *
                    static_cast<double>(mc.embed_dim);
  }
  const double flops_per_token =
      matmul_flops + 12.0 * mc.n_layer * a.seq * static_cast<double>(mc.n_head * mc.head_dim);
  const double peak_flops = 989e12 * world;  // H100 SXM dense bf16
  if (!print) return 0;
  nlohmann::json out = {{"impl", "zerotrain"},
                        {"model", a.model},
                        {"params", model.num_params()},
                        {"batch", a.batch},
                        {"seq", a.seq},
                        {"dtype", a.dtype},
                        {"world_size", world},
                        {"zero_keys", a.zero_keys},
                        {"stage", cfg->zero.stage},
                        {"steps", a.steps},
                        {"step_ms_median", median},
                        {"tokens_per_s", tokens / (median / 1000.0)},
                        {"mfu", flops_per_token * tokens / (median / 1000.0) / peak_flops},
                        {"peak_mem_bytes", zt::allocator_stats(*dev).peak_allocated_bytes},
                        {"first_loss", losses.front()},
                        {"last_loss", losses.back()},
                        {"offload_optimizer", cfg->zero.offload_optimizer.device},
                        {"offload_param", cfg->zero.offload_param.device},
                        {"ds_keys", a.ds_keys},
                        {"checkpointing", a.checkpointing},
                        {"cuda_graph", a.cuda_graph},
                        {"keep_activations", a.keep_activations},
                        {"lora_dim", a.lora_dim},
                        {"lora_alpha", a.lora_dim > 0 ? a.lora_alpha : 0.0f},
                        {"only_optimize_lora", a.only_optimize_lora},
                        {"trainable_params", trainable_params}};
  const zt::zero::ModelStateBytes b = e.model_state_bytes();
  out["model_state_bytes_device"] = b.total();
  out["model_state_bytes_host"] = b.host_total();
  out["model_state_bytes_host_params"] = b.host_params;
  out["model_state_bytes_nvme"] = b.nvme;
  if (!gpu_fwd.empty()) {
    out["phases"] = {{"gpu_forward_ms", median_of(gpu_fwd)},
                     {"gpu_backward_ms", median_of(gpu_bwd)},
                     {"gpu_step_ms", median_of(gpu_opt)},
                     {"host_forward_ms", median_of(host_fwd)},
                     {"host_backward_ms", median_of(host_bwd)},
                     {"host_step_ms", median_of(host_opt)}};
  }
  if (offload != nullptr) {
    out["pin_memory"] = a.pin_memory == "true";
    out["offload_step_ms_median"] = median_of(offload_ms);
    out["offload_cpu_ms_median"] = median_of(offload_cpu_ms);
    out["offload_pieces"] = offload->last_times().pieces;
  }
  if (!kernels.empty()) {
    zt::bench::kernel_totals_print(kernels, a.kernel_trace, 40, median);
    zt::bench::idle_gaps_print(trace, a.kernel_trace, 16);
    out["kernels"] = zt::bench::kernel_totals_json(kernels, a.kernel_trace, 40);
    out["gpu_idle_ms_per_step"] = trace.idle_ms() / a.kernel_trace;
    out["gpu_idle"] = zt::bench::idle_gaps_json(trace, a.kernel_trace, 24);
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Running out of GPU or pinned host memory is an outcome to report (the largest-model probes
  // look for it), not a crash: one line and exit 1, so the launcher stops the other ranks.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zt_bench_gpt2: error: %s\n", e.what());
    return 1;
  }
}
