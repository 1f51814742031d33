// ZeroTrain's collective bandwidth over NCCL: all_reduce, reduce_scatter and all_gather of bf16
// buffers from 1 MiB to 1 GiB (powers of 4) through the public Communicator API, measured as
// nccl-tests measures them: warm-up calls, then timed calls on one stream, each between two CUDA
// events; the median time gives the bus bandwidth by nccl-tests' formulas (its
// doc/PERFORMANCE.md): all_reduce 2(n-1)/n * S/t, reduce_scatter and all_gather (n-1)/n * S/t, S
// the full buffer (the all_reduce buffer, reduce_scatter's input, all_gather's output). Rank 0
// prints one JSON line per (op, size); its peer is bench/comm_torch.py, and
// scripts/gpu_dist_check.sh runs both and tabulates them.
//
//   zt launch --num_gpus 2 build/bin/zt_comm_bench [--min-bytes 1048576] [--max-bytes 1073741824]
//                                                   [--iters 20] [--warmup 5] [--device cuda]
//
// Assumes one rank per GPU: each rank uses cuda:LOCAL_RANK (zt launch makes every selected GPU
// visible to every rank, as DeepSpeed's launcher does). Timings are rank 0's; after the warm-up
// the ranks run in lockstep, so rank 0's time includes no skew of its peer's arrival.
// `--device cpu` (under `zt launch --num_procs 2`) runs the same loop over Gloo, each call waited
// inside its timing since CPU events are wall-clock marks: a smoke test for machines without GPUs.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zt/comm/communicator.h"
#include "zt/comm/env.h"
#include "zt/core/device.h"
#include "zt/core/tensor.h"

namespace {

struct Args {
  int64_t min_bytes = int64_t{1} << 20;
  int64_t max_bytes = int64_t{1} << 30;
  int iters = 20;
  int warmup = 5;
  std::string device = "cuda";
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "zt_comm_bench: %s\nusage: zt launch --num_gpus 2 zt_comm_bench [--min-bytes N] "
               "[--max-bytes N] [--iters N] [--warmup N] [--device cuda|cpu]\n",
               what.c_str());
  std::exit(2);
}

int64_t parse_positive(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || v < 1) {
    usage_error(flag + " needs a positive integer, got '" + value + "'");
  }
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    // Launchers pass --local_rank=N (or --local_rank N); the rank comes from LOCAL_RANK instead.
    if (k.rfind("--local_rank=", 0) == 0) continue;
    if (i + 1 >= argc) usage_error("option " + k + " needs a value");
    std::string v = argv[++i];
    if (k == "--local_rank") continue;
    if (k == "--min-bytes") {
      a.min_bytes = parse_positive(k, v);
    } else if (k == "--max-bytes") {
      a.max_bytes = parse_positive(k, v);
    } else if (k == "--iters") {
      a.iters = static_cast<int>(parse_positive(k, v));
    } else if (k == "--warmup") {
      a.warmup = static_cast<int>(parse_positive(k, v));
    } else if (k == "--device") {
      if (v != "cuda" && v != "cpu") usage_error("--device must be cuda or cpu, got '" + v + "'");
      a.device = v;
    } else {
      usage_error("unknown option " + k);
    }
  }
  if (a.min_bytes > a.max_bytes) usage_error("--min-bytes exceeds --max-bytes");
  return a;
}

enum class Op : unsigned char { kAllReduce, kReduceScatter, kAllGather };
constexpr Op kOps[] = {Op::kAllReduce, Op::kReduceScatter, Op::kAllGather};

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAllGather:
      return "all_gather";
  }
  return "?";
}

// nccl-tests' bus-bandwidth factor: the fraction of S each rank's busiest link carries.
double busbw_factor(Op op, int n) {
  const double f = static_cast<double>(n - 1) / n;
  return op == Op::kAllReduce ? 2 * f : f;
}

// Waits every handle; the first failure, else ok.
zt::Status wait_all(std::vector<zt::CommHandle>& handles) {
  zt::Status first;
  for (auto& h : handles) {
    zt::Status s = h.wait();
    if (first.is_ok() && !s.is_ok()) first = s;
  }
  handles.clear();
  return first;
}

int fail(const zt::Status& s) {
  std::fprintf(stderr, "zt_comm_bench: %s\n", s.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  auto env = zt::dist_env_from_environment();
  if (!env) return fail(env.status());
  if (env->world_size < 2) {
    return fail(zt::invalid_argument(
        "needs at least 2 ranks (found WORLD_SIZE {}); run it under `zt launch --num_gpus 2`",
        env->world_size));
  }
  const zt::Device dev = a.device == "cpu" ? zt::Device::cpu() : zt::Device::cuda(env->local_rank);
  if (zt::Status s = zt::device_check(dev); !s.is_ok()) return fail(s);
  auto comm_r = zt::communicator_create(*env, dev);
  if (!comm_r) return fail(comm_r.status());
  zt::Communicator& comm = **comm_r;
  const int n = comm.world_size();
  const bool print = comm.rank() == 0;

  const zt::Stream stream = zt::Stream::create(dev);
  const int64_t elem = zt::dtype_size(zt::DType::bf16);
  // One full-size buffer and one 1/n buffer, allocated once at the largest size; each size uses
  // their leading elements. Zeros keep the reductions free of NaN/inf (no effect on speed).
  const int64_t max_numel = a.max_bytes / elem / n * n;
  zt::Tensor full = zt::Tensor::zeros({max_numel}, zt::DType::bf16, dev, stream);
  zt::Tensor part = zt::Tensor::zeros({max_numel / n}, zt::DType::bf16, dev, stream);
  std::vector<std::unique_ptr<zt::Event>> starts, stops;
  for (int i = 0; i < a.iters; ++i) {
    starts.push_back(std::make_unique<zt::Event>(dev));
    stops.push_back(std::make_unique<zt::Event>(dev));
  }

  for (Op op : kOps) {
    for (int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 4) {
      const int64_t numel = bytes / elem / n * n;  // divisible by n for the sharded ops
      zt::Tensor buf = full.view(0, {numel});
      zt::Tensor shard = part.view(0, {numel / n});
      std::function<zt::CommHandle()> issue = [&]() -> zt::CommHandle {
        switch (op) {
          case Op::kAllReduce:
            return comm.all_reduce(buf, zt::ReduceOp::kSum, stream);
          case Op::kReduceScatter:
            return comm.reduce_scatter(shard, buf, zt::ReduceOp::kSum, stream);
          case Op::kAllGather:
            return comm.all_gather(buf, shard, stream);
        }
        return {};
      };
      std::vector<zt::CommHandle> handles;
      // Warm-up, waited before timing so that both ranks enter the timed calls together.
      for (int i = 0; i < a.warmup; ++i) handles.push_back(issue());
      if (zt::Status s = wait_all(handles); !s.is_ok()) return fail(s);
      for (int i = 0; i < a.iters; ++i) {
        starts[i]->record(stream);
        handles.push_back(issue());
        if (dev.is_cpu()) {
          if (zt::Status s = wait_all(handles); !s.is_ok()) return fail(s);
        }
        stops[i]->record(stream);
      }
      if (zt::Status s = wait_all(handles); !s.is_ok()) return fail(s);
      stops[a.iters - 1]->synchronize();
      std::vector<double> us;
      for (int i = 0; i < a.iters; ++i) us.push_back(1000.0 * starts[i]->elapsed_ms(*stops[i]));
      std::sort(us.begin(), us.end());
      const double median_us = us[us.size() / 2];
      const double actual_bytes = static_cast<double>(numel * elem);
      const double busbw = busbw_factor(op, n) * actual_bytes / (median_us * 1e-6) / 1e9;
      if (print) {
        nlohmann::json out = {{"impl", "zerotrain"},   {"op", op_name(op)},
                              {"bytes", numel * elem}, {"time_us", median_us},
                              {"busbw_gbps", busbw},   {"world_size", n},
                              {"dtype", "bf16"},       {"iters", a.iters}};
        std::printf("%s\n", out.dump().c_str());
        std::fflush(stdout);
      }
    }
  }
  // Every rank leaves together: rank 0 serves the rendezvous store for the communicator's life.
  std::vector<zt::CommHandle> last;
  last.push_back(comm.barrier(stream));
  if (zt::Status s = wait_all(last); !s.is_ok()) return fail(s);
  return 0;
}
