// ZeroTrain's GPT-2 training throughput: steps of a named model on random tokens through the
// public engine API, each step timed with CUDA events after warm-up; prints one JSON line with
// the median step time, tokens/s and peak device memory. Its peer is bench/gpt2_torch.py, run
// with the same model, batch, sequence length and precision by scripts/gpu_check.sh.
//
//   zt_bench_gpt2 [--model gpt2] [--batch 16] [--seq 1024] [--dtype bf16] [--steps 20] [--warmup 5]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace {

struct Args {
  std::string model = "gpt2";
  int batch = 16;
  int seq = 1024;
  std::string dtype = "bf16";
  int steps = 20;
  int warmup = 5;
  std::string device = "cuda";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--batch") a.batch = std::atoi(v.c_str());
    else if (k == "--seq") a.seq = std::atoi(v.c_str());
    else if (k == "--dtype") a.dtype = v;
    else if (k == "--steps") a.steps = std::atoi(v.c_str());
    else if (k == "--warmup") a.warmup = std::atoi(v.c_str());
    else if (k == "--device") a.device = v;
    else {
      std::fprintf(stderr, "zt_bench_gpt2: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  auto mc = zt::nn::gpt2_config_named(a.model);
  if (!mc) {
    std::fprintf(stderr, "%s\n", mc.status().message().c_str());
    return 1;
  }
  auto dev = zt::device_parse(a.device);
  if (!dev || !zt::device_check(*dev).is_ok()) {
    std::fprintf(stderr, "zt_bench_gpt2: device %s unavailable\n", a.device.c_str());
    return 1;
  }
  std::string precision = a.dtype == "bf16" ? R"("bf16": {"enabled": true})"
                          : a.dtype == "fp16" ? R"("fp16": {"enabled": true, "loss_scale": 1024})"
                                              : R"("bf16": {"enabled": false})";
  std::string json = fmt::format(
      R"({{"train_batch_size": {}, "train_micro_batch_size_per_gpu": {}, "gradient_clipping": 1.0,
          "optimizer": {{"type": "AdamW", "params": {{"lr": 6e-4, "betas": [0.9, 0.95],
          "weight_decay": 0.1}}}}, {}}})",
      a.batch, a.batch, precision);
  auto cfg = zt::config_parse(json, "bench", 1);
  if (!cfg) {
    std::fprintf(stderr, "%s\n", cfg.status().message().c_str());
    return 1;
  }
  zt::nn::Gpt2 model(*mc);
  auto engine = zt::initialize(model, *cfg, {.device = *dev, .seed = 1});
  if (!engine) {
    std::fprintf(stderr, "%s\n", engine.status().message().c_str());
    return 1;
  }
  zt::Engine& e = **engine;
  // Random tokens (fixed seed), a new batch each step.
  std::vector<int32_t> buf(static_cast<size_t>(a.batch) * (a.seq + 1));
  uint64_t x = 88172645463325252ull;
  auto next_batch = [&](zt::Tensor& tok, zt::Tensor& tgt) {
    for (auto& t : buf) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      t = static_cast<int32_t>(x % static_cast<uint64_t>(mc->vocab_size));
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
  zt::Event start(*dev), stop(*dev);
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    zt::Tensor tok, tgt;
    next_batch(tok, tgt);
    if (s == a.warmup) zt::allocator_reset_peak(*dev);
    start.record(e.stream());
    auto loss = e.forward(tok, tgt);
    if (!loss) {
      std::fprintf(stderr, "%s\n", loss.status().message().c_str());
      return 1;
    }
    if (auto st = e.backward(*loss); !st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    if (auto st = e.step(); !st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    stop.record(e.stream());
    stop.synchronize();
    losses.push_back(*loss);
    if (s >= a.warmup) ms.push_back(start.elapsed_ms(stop));
  }
  std::vector<float> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  double tokens = static_cast<double>(a.batch) * a.seq;
  nlohmann::json out = {{"impl", "zerotrain"},
                        {"model", a.model},
                        {"params", model.num_params()},
                        {"batch", a.batch},
                        {"seq", a.seq},
                        {"dtype", a.dtype},
                        {"steps", a.steps},
                        {"step_ms_median", median},
                        {"tokens_per_s", tokens / (median / 1000.0)},
                        {"peak_mem_bytes", zt::allocator_stats(*dev).peak_allocated_bytes},
                        {"first_loss", losses.front()},
                        {"last_loss", losses.back()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
