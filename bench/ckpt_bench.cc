// Checkpoint save and load speed through the public engine API: a named model on one GPU (or the
// CPU) after one training step (so the optimizer state exists), saved synchronously, loaded back
// into the same engine, and saved asynchronously (the training stall is the host snapshot). Prints
// one JSON line: bytes written, seconds and GB/s of save and load, the async stall and total.
// Its peer is bench/ckpt_torch.py (torch.distributed.checkpoint of the same state sizes), run by
// scripts/gpu_check.sh in the same call; the disk's own speed is measured there with dd.
//
//   zt_bench_ckpt --dir PATH [--model gpt-1.3b] [--dtype bf16] [--stage 0] [--offload]
//                 [--device cuda] [--no-async]
//
// Between the save and the load the page cache is dropped when the process may (root), so the
// load reads the disk; drop_caches says whether it could.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int64_t folder_bytes(const std::string& dir) {
  int64_t b = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) b += static_cast<int64_t>(e.file_size());
  }
  return b;
}

bool drop_caches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f.flush());
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, model = "gpt-1.3b", dtype = "bf16", device = "cuda";
  int stage = 0;
  bool offload = false, run_async = true;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--dir") dir = next();
    else if (k == "--model") model = next();
    else if (k == "--dtype") dtype = next();
    else if (k == "--stage") stage = std::stoi(next());
    else if (k == "--device") device = next();
    else if (k == "--offload") offload = true;
    else if (k == "--no-async") run_async = false;
    else {
      std::fprintf(stderr, "zt_bench_ckpt: unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "zt_bench_ckpt needs --dir PATH\n");
    return 2;
  }
  try {
    auto mc = zt::nn::gpt2_config_named(model);
    if (!mc) throw std::runtime_error(mc.status().message());
    std::string json = R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}})";
    if (dtype == "bf16") json += R"(, "bf16": {"enabled": true})";
    json += fmt::format(R"(, "zero_optimization": {{"stage": {}{}}}}})", stage,
                        offload ? R"(, "offload_optimizer": {"device": "cpu"})" : "");
    auto cfg = zt::config_parse(json, "bench", 1);
    if (!cfg) throw std::runtime_error(cfg.status().message());
    auto dev = zt::device_parse(device);
    if (!dev) throw std::runtime_error(dev.status().message());
    zt::nn::Gpt2 m(*mc);
    auto e = zt::initialize(m, *cfg, {.device = *dev, .seed = 1});
    if (!e) throw std::runtime_error(e.status().message());
    const int seq = 256;
    std::vector<int32_t> ids(seq);
    for (int i = 0; i < seq; ++i) ids[i] = (i * 7919) % mc->vocab_size;
    zt::Tensor tk = zt::Tensor::from_doubles(std::vector<double>(ids.begin(), ids.end()), {1, seq},
                                             zt::DType::i32);
    auto loss = (*e)->forward(tk, tk);
    if (!loss) throw std::runtime_error(loss.status().message());
    if (auto s = (*e)->backward(*loss); !s.is_ok()) throw std::runtime_error(s.message());
    if (auto s = (*e)->step(); !s.is_ok()) throw std::runtime_error(s.message());

    std::filesystem::remove_all(dir);
    auto t0 = std::chrono::steady_clock::now();
    if (auto s = (*e)->save_checkpoint(dir, "sync"); !s.is_ok()) throw std::runtime_error(s.message());
    const double save_s = seconds_since(t0);
    const int64_t bytes = folder_bytes(dir);
    const bool dropped = drop_caches();
    t0 = std::chrono::steady_clock::now();
    auto l = (*e)->load_checkpoint(dir, {.tag = "sync",
                                         .load_optimizer_states = true,
                                         .load_lr_scheduler_states = true,
                                         .load_module_only = false});
    if (!l) throw std::runtime_error(l.status().message());
    const double load_s = seconds_since(t0);
    double stall_s = -1, async_s = -1;
    if (run_async) {
      t0 = std::chrono::steady_clock::now();
      if (auto s = (*e)->save_checkpoint_async(dir, "async"); !s.is_ok()) {
        throw std::runtime_error(s.message());
      }
      stall_s = seconds_since(t0);
      if (auto s = (*e)->checkpoint_wait(); !s.is_ok()) throw std::runtime_error(s.message());
      async_s = seconds_since(t0);
      // A second async save reuses the snapshot buffer: the stall of every save after the first.
      t0 = std::chrono::steady_clock::now();
      if (auto s = (*e)->save_checkpoint_async(dir, "async2"); !s.is_ok()) {
        throw std::runtime_error(s.message());
      }
      stall_s = seconds_since(t0);
      if (auto s = (*e)->checkpoint_wait(); !s.is_ok()) throw std::runtime_error(s.message());
    }
    std::filesystem::remove_all(dir);
    nlohmann::json r = {{"impl", "zerotrain"},
                        {"model", model},
                        {"parameters", m.num_params()},
                        {"offload", offload},
                        {"bytes", bytes},
                        {"save_s", save_s},
                        {"load_s", load_s},
                        {"save_GBps", bytes / save_s / 1e9},
                        {"load_GBps", bytes / load_s / 1e9},
                        {"async_stall_s", stall_s},
                        {"async_total_s", async_s},
                        {"drop_caches", dropped}};
    std::printf("%s\n", r.dump().c_str());
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "zt_bench_ckpt: %s\n", ex.what());
    return 1;
  }
  return 0;
}
