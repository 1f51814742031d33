// The CPU Adam step that ZeRO-Offload runs on the host (kernels/cpu/adam.cc), on N fp32
// parameters with a bf16 compute copy written in the same pass, as offload does. Prints one JSON
// line: the median milliseconds of a step over --steps after 2 warm-up, and elements per second.
// Its peer is bench/cpu_adam_torch.py (PyTorch's fused CPU AdamW) on the same machine.
//
//   zt_bench_cpu_adam [--elements 100000000] [--steps 10]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <omp.h>

#include "zt/core/tensor.h"
#include "zt/kernels/ops.h"

int main(int argc, char** argv) {
  int64_t n = 100000000;
  int steps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--elements") {
      n = std::atoll(argv[i + 1]);
    } else if (k == "--steps") {
      steps = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "zt_bench_cpu_adam: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  using zt::DType;
  using zt::Tensor;
  Tensor p = Tensor::empty({n}, DType::f32), g = Tensor::empty({n}, DType::f32);
  Tensor m = Tensor::zeros({n}, DType::f32), v = Tensor::zeros({n}, DType::f32);
  Tensor lowp = Tensor::empty({n}, DType::bf16);
  float* pp = p.data<float>();
  float* gp = g.data<float>();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    pp[i] = static_cast<float>(i % 1000) * 1e-3f;
    gp[i] = static_cast<float>((i * 7) % 1000) * 1e-4f - 0.05f;
  }
  zt::kernels::OptimChunk c;
  c.param = pp;
  c.grad = gp;
  c.state1 = m.data<float>();
  c.state2 = v.data<float>();
  c.param_lowp = lowp.data();
  c.lowp_dtype = DType::bf16;
  c.n = n;
  std::vector<double> ms;
  for (int s = 0; s < steps + 2; ++s) {
    zt::kernels::AdamArgs a;
    a.lr = 1e-3f;
    a.weight_decay = 0.1f;
    a.step = s + 1;
    const auto t0 = std::chrono::steady_clock::now();
    zt::kernels::adam_step(a, std::span<const zt::kernels::OptimChunk>(&c, 1), zt::Device::cpu());
    const auto t1 = std::chrono::steady_clock::now();
    if (s >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  std::printf(
      "{\"impl\": \"zerotrain-cpu-adam\", \"elements\": %lld, \"threads\": %d, "
      "\"ms_median\": %.3f, \"elements_per_s\": %.4g}\n",
      static_cast<long long>(n), omp_get_max_threads(), med, n / (med * 1e-3));
  return 0;
}
