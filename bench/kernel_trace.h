// Where a step's GPU time goes, kernel by kernel: CUPTI's activity records of every kernel,
// memcpy and memset launched between start() and stop(), summed by name. The benchmarks trace a
// few extra steps after the timed ones (tracing adds a little time per launch), so the timings
// they report are untouched. In a build without CUDA, start() says it is unavailable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt::bench {

struct KernelTotal {
  std::string name;  // shortened: the kernel's function name, or the cuBLAS kernel's symbol
  double ms = 0;     // summed device time
  int64_t count = 0;
};

class KernelTrace {
 public:
  // Begins recording. Returns false (and says why on stderr) when CUPTI is not available.
  bool start();
  // Ends recording and returns the totals, largest first.
  std::vector<KernelTotal> stop();
};

// The totals as JSON (per step: divided by `steps`), the `top` largest and the rest summed.
nlohmann::json kernel_totals_json(const std::vector<KernelTotal>& totals, int steps, int top);
// The same as a table on stderr, with each kernel's share of the traced time.
void kernel_totals_print(const std::vector<KernelTotal>& totals, int steps, int top,
                         double step_ms);

}  // namespace zt::bench
