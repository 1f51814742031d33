// Checkpoint save and load speed through the public engine API: a named model after one training
// step (so the optimizer state exists), saved synchronously, loaded back into the same engine,
// and saved asynchronously (the training stall is the host snapshot). Prints one JSON line: bytes
// written, seconds and GB/s of save and load, the async stall and total.
// Its peer is bench/ckpt_torch.py (torch.distributed.checkpoint of the same state sizes; with
// --fsdp2 under torchrun, of an FSDP2 model and its AdamW), run by scripts/gpu_check.sh (one
// GPU) and scripts/gpu_dist_check.sh part f (two) in the same call; the disk's own speed is
// measured there with dd.
//
//   zt_bench_ckpt --dir PATH [--model gpt-1.3b] [--dtype bf16] [--stage 0] [--offload]
//                 [--device cuda] [--no-async]
//
// Several ranks: under `zt launch --num_gpus N` (or --num_procs N with --device cpu) each rank
// trains on cuda:LOCAL_RANK with micro-batch 1 (train_batch_size N) and the engine writes and
// reads its own shard; every timed phase starts after a barrier, each rank times its own part and
// rank 0 prints the slowest rank's time (the phase ends when the last shard is written or read),
// with bytes = the whole checkpoint folder (every rank's shard and the metadata; one machine,
// one folder), so GB/s is the aggregate. Without a launcher's environment it is one process.
//
// Between the save and the load the page cache is dropped when the process may (root), so the
// load reads the disk; drop_caches says whether it could.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "zt/comm/communicator.h"
#include "zt/comm/env.h"
#include "zt/nn/models/gpt2.h"
#include "zt/runtime/engine.h"

namespace {

using zt::bench::check;
using zt::bench::drop_caches;
using zt::bench::seconds_since;

int64_t folder_bytes(const std::string& dir) {
  int64_t b = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) b += static_cast<int64_t>(e.file_size());
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, model = "gpt-1.3b", dtype = "bf16", device = "cuda";
  int stage = 0;
  bool offload = false, run_async = true;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    // Launchers pass --local_rank=N (or --local_rank N); the rank comes from LOCAL_RANK instead.
    if (k.rfind("--local_rank=", 0) == 0) continue;
    if (k == "--local_rank") next();
    else if (k == "--dir") dir = next();
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
    auto env = zt::dist_env_from_environment();
    if (!env) throw std::runtime_error(env.status().message());
    const int world = env->world_size, rank = env->rank;
    auto mc = zt::nn::gpt2_config_named(model);
    if (!mc) throw std::runtime_error(mc.status().message());
    std::string json = fmt::format(
        R"({{"train_batch_size": {}, "train_micro_batch_size_per_gpu": 1, "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-4}}}})",
        world);
    if (dtype == "bf16") json += R"(, "bf16": {"enabled": true})";
    json += fmt::format(R"(, "zero_optimization": {{"stage": {}{}}}}})", stage,
                        offload ? R"(, "offload_optimizer": {"device": "cpu"})" : "");
    auto cfg = zt::config_parse(json, "bench", world);
    if (!cfg) throw std::runtime_error(cfg.status().message());
    auto dev = zt::device_parse(device);
    if (!dev) throw std::runtime_error(dev.status().message());
    // Each rank uses the GPU of its local rank, as zt train does ("cuda" means cuda:LOCAL_RANK).
    if (dev->is_cuda() && device == "cuda") *dev = zt::Device::cuda(env->local_rank);
    check(zt::device_check(*dev));
    // The data-parallel group; one process runs alone with the engine's own communicator.
    std::unique_ptr<zt::Communicator> comm;
    if (world > 1) {
      auto c = zt::communicator_create(*env, *dev);
      if (!c) throw std::runtime_error(c.status().message());
      comm = std::move(c).value();
    }
    zt::nn::Gpt2 m(*mc);
    auto e = zt::initialize(m, *cfg, {.device = *dev, .seed = 1, .comm = comm.get()});
    if (!e) throw std::runtime_error(e.status().message());
    // Every rank at the same point (a no-op alone); the slowest rank's seconds of a phase.
    auto barrier = [&] {
      if (comm) check(comm->barrier().wait());
    };
    auto slowest = [&](std::vector<double> v) {
      check((*e)->zero_state().all_reduce_doubles(v, zt::ReduceOp::kMax));
      return v;
    };
    const int seq = 256;
    std::vector<int32_t> ids(seq);
    for (int i = 0; i < seq; ++i) ids[i] = (i * 7919 + rank * 131) % mc->vocab_size;
    zt::Tensor tk = zt::Tensor::from_doubles(std::vector<double>(ids.begin(), ids.end()), {1, seq},
                                             zt::DType::i32);
    auto loss = (*e)->forward(tk, tk);
    if (!loss) throw std::runtime_error(loss.status().message());
    check((*e)->backward(*loss));
    check((*e)->step());

    if (rank == 0) std::filesystem::remove_all(dir);
    barrier();
    auto t0 = std::chrono::steady_clock::now();
    check((*e)->save_checkpoint(dir, "sync"));
    const double save_local = seconds_since(t0);
    barrier();
    const int64_t bytes = rank == 0 ? folder_bytes(dir) : 0;
    const bool dropped = rank == 0 ? drop_caches() : false;
    barrier();
    t0 = std::chrono::steady_clock::now();
    auto l = (*e)->load_checkpoint(dir, {.tag = "sync",
                                         .load_optimizer_states = true,
                                         .load_lr_scheduler_states = true,
                                         .load_module_only = false});
    if (!l) throw std::runtime_error(l.status().message());
    const double load_local = seconds_since(t0);
    double stall_local = -1, async_local = -1;
    if (run_async) {
      barrier();
      t0 = std::chrono::steady_clock::now();
      check((*e)->save_checkpoint_async(dir, "async"));
      check((*e)->checkpoint_wait());
      async_local = seconds_since(t0);
      // A second async save reuses the snapshot buffer: the stall of every save after the first.
      barrier();
      t0 = std::chrono::steady_clock::now();
      check((*e)->save_checkpoint_async(dir, "async2"));
      stall_local = seconds_since(t0);
      check((*e)->checkpoint_wait());
    }
    const std::vector<double> t = slowest({save_local, load_local, stall_local, async_local});
    barrier();
    if (rank == 0) std::filesystem::remove_all(dir);
    const double save_s = t[0], load_s = t[1], stall_s = t[2], async_s = t[3];
    nlohmann::json r = {{"impl", "zerotrain"},
                        {"model", model},
                        {"parameters", m.num_params()},
                        {"world_size", world},
                        {"stage", stage},
                        {"dtype", dtype},
                        {"offload", offload},
                        {"bytes", bytes},
                        {"bytes_per_param", static_cast<double>(bytes) / m.num_params()},
                        {"save_s", save_s},
                        {"load_s", load_s},
                        {"save_GBps", bytes / save_s / 1e9},
                        {"load_GBps", bytes / load_s / 1e9},
                        {"save_s_rank0", save_local},
                        {"load_s_rank0", load_local},
                        {"async_stall_s", stall_s},
                        {"async_total_s", async_s},
                        {"drop_caches", dropped}};
    if (rank == 0) std::printf("%s\n", r.dump().c_str());
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "zt_bench_ckpt: %s\n", ex.what());
    return 1;
  }
  return 0;
}
