// The pipeline bubble against theory: a model split over P stages (one per rank of `zt launch`)
// trains batches of m micro-batches through the pipeline engine's 1F1B schedule, for each m of
// --micro-batches; each rank measures its batch's wall time and the part its forward and backward
// passes took (PipelineOptions::time_passes: the device is synchronised around each pass), and
// rank 0 prints one JSON line per m with every stage's idle share, 1 - busy / batch, next to
// DeepSpeed's and GPipe's theory for balanced stages, (P - 1) / (m + P - 1). What theory leaves
// out shows as the difference: unbalanced stages, the sends and receives, the reductions and the
// optimizer step at the end of the batch (which are neither busy nor bubble: they count as idle).
//
//   zt launch --num_procs P zt_bench_pipe [--model gpt2] [--seq 1024] [--micro-batch 4]
//       [--dtype bf16|fp32] [--micro-batches 1,2,4,8,16] [--steps 5] [--warmup 2]
//       [--partition-method uniform] [--device cpu|cuda]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/checkpoint/model_open.h"
#include "zt/comm/communicator.h"
#include "zt/comm/env.h"
#include "zt/core/device.h"
#include "zt/pipe/pipe_engine.h"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "zt_bench_pipe: %s\n", what.c_str());
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

zt::Tensor random_ids(int64_t rows, int64_t cols, int32_t vocab, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = static_cast<float>(x % static_cast<uint64_t>(vocab));
  }
  return zt::Tensor::from_floats(v, {rows, cols}, zt::DType::i32);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zt;
  std::string model_name = "gpt2", dtype = "bf16", method = "uniform", device_flag;
  int64_t seq = 1024, micro_batch = 4;
  int steps = 5, warmup = 2;
  std::vector<int> counts = {1, 2, 4, 8, 16};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") model_name = value();
    else if (a == "--seq") seq = std::stoll(value());
    else if (a == "--micro-batch") micro_batch = std::stoll(value());
    else if (a == "--dtype") dtype = value();
    else if (a == "--steps") steps = std::stoi(value());
    else if (a == "--warmup") warmup = std::stoi(value());
    else if (a == "--partition-method") method = value();
    else if (a == "--device") device_flag = value();
    else if (a.rfind("--local_rank", 0) == 0) continue;  // set by launchers; LOCAL_RANK is read
    else if (a == "--micro-batches") {
      counts.clear();
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) counts.push_back(std::stoi(item));
    } else {
      die("unknown flag " + a);
    }
  }
  if (dtype != "bf16" && dtype != "fp32") die("--dtype must be bf16 or fp32");
  auto env = dist_env_from_environment();
  if (!env.is_ok()) die(env.status().message());
  Device device = cuda_device_count() > 0 ? Device::cuda(env->local_rank) : Device::cpu();
  if (device_flag == "cpu") device = Device::cpu();
  auto comm = communicator_create(*env, device);
  if (!comm.is_ok()) die(comm.status().message());
  Communicator& world = **comm;
  const int stages = world.world_size();
  auto probe = ckpt::model_open(model_name);
  if (!probe.is_ok()) die(probe.status().message());
  const int32_t vocab = static_cast<int32_t>(probe->model->vocab_size());
  const pipe::ModelFactory factory =
      [&](const pipe::ModelShard&) -> Result<std::unique_ptr<nn::Model>> {
    ZT_ASSIGN_OR_RETURN(ckpt::ModelChoice c, ckpt::model_open(model_name));
    return std::unique_ptr<nn::Model>(std::move(c.model));
  };
  for (int m : counts) {
    nlohmann::json cfg_json = {
        {"train_batch_size", micro_batch * m},
        {"train_micro_batch_size_per_gpu", micro_batch},
        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-5}}}}},
        {"bf16", {{"enabled", dtype == "bf16"}}}};
    auto cfg = config_parse(cfg_json.dump(), "zt_bench_pipe", 1);
    if (!cfg.is_ok()) die(cfg.status().message());
    auto pe = pipe::PipelineEngine::create(
        factory, *cfg,
        {.stages = stages,
         .partition_method = method,
         .seq_len = seq,
         .engine = {.device = device, .seed = 1, .comm = &world},
         .time_passes = true});
    if (!pe.is_ok()) die(pe.status().message());
    std::vector<double> batch, busy;
    for (int s = 0; s < warmup + steps; ++s) {
      int k = 0;
      auto loss = (*pe)->train_batch([&]() -> Result<pipe::MicroBatch> {
        const uint64_t seed = static_cast<uint64_t>(s * 1000 + k++);
        return pipe::MicroBatch{.tokens = random_ids(micro_batch, seq, vocab, seed),
                                .targets = random_ids(micro_batch, seq, vocab, seed + 500)};
      });
      if (!loss.is_ok()) die(loss.status().message());
      if (s >= warmup) {
        batch.push_back((*pe)->batch_ms());
        busy.push_back((*pe)->busy_ms());
      }
    }
    // Every stage's medians to rank 0 (each rank fills its slot of a summed vector).
    std::vector<double> mine(static_cast<size_t>(2 * stages), 0.0);
    const int stage = (*pe)->grid().stage_id;
    mine[static_cast<size_t>(2 * stage)] = median(batch);
    mine[static_cast<size_t>(2 * stage + 1)] = median(busy);
    Tensor t = Tensor::from_doubles(mine, {2 * stages}, DType::f64, device);
    if (Status st = world.all_reduce(t, ReduceOp::kSum, (*pe)->engine().stream()).wait();
        !st.is_ok()) {
      die(st.message());
    }
    const std::vector<double> all = t.to_doubles();
    if (world.rank() != 0) continue;
    nlohmann::json idle = nlohmann::json::array(), busy_ms = nlohmann::json::array();
    double idle_sum = 0;
    for (int s = 0; s < stages; ++s) {
      const double b = all[static_cast<size_t>(2 * s)], u = all[static_cast<size_t>(2 * s + 1)];
      idle.push_back(b > 0 ? 1.0 - u / b : 0.0);
      busy_ms.push_back(u);
      idle_sum += b > 0 ? 1.0 - u / b : 0.0;
    }
    const double batch_ms = all[0];
    nlohmann::json line = {
        {"bench", "pipe"},
        {"model", model_name},
        {"device", device.str()},
        {"dtype", dtype},
        {"stages", stages},
        {"micro_batches", m},
        {"micro_batch", micro_batch},
        {"seq", seq},
        {"partition", (*pe)->parts()},
        {"batch_ms_median", batch_ms},
        {"busy_ms_median", busy_ms},
        {"idle_share", idle},
        {"idle_share_mean", idle_sum / stages},
        {"bubble_theory", static_cast<double>(stages - 1) / (m + stages - 1)},
        {"tokens_per_s", batch_ms > 0 ? micro_batch * m * seq / (batch_ms / 1000.0) : 0.0}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
