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

// A stretch of the traced time with nothing on the GPU: from the end of `after` (the work that
// finished last) to the start of `before`.
struct IdleGap {
  double ms = 0;
  std::string after, before;
  double at_ms = 0;  // where it begins, from the first record of the trace
};

class KernelTrace {
 public:
  // Begins recording. Returns false (and says why on stderr) when CUPTI is not available.
  bool start();
  // Ends recording and returns the totals, largest first.
  std::vector<KernelTotal> stop();
  // After stop(): the idle stretches between the first and the last record, longest first, and
  // their sum (GPU idle time of the traced steps, host gaps included).
  const std::vector<IdleGap>& gaps() const { return gaps_; }
  double idle_ms() const { return idle_ms_; }

 private:
  std::vector<IdleGap> gaps_;
  double idle_ms_ = 0;
};

// The `top` longest gaps (per-step idle time = idle_ms / steps) on stderr.
void idle_gaps_print(const KernelTrace& trace, int steps, int top);
// The idle time as JSON, per step: "by_size" (count and ms of the gaps under 2, 5, 20 and 100 us
// and longer), and "by_pair" (the `top` (after, before) pairs of work by summed gap time, with
// their counts), and "longest" (the 12 longest gaps with where they begin in the trace), so a
// run's output says whether a step idles in many short gaps or a few long ones, and where.
nlohmann::json idle_gaps_json(const KernelTrace& trace, int steps, int top);

// The totals as JSON (per step: divided by `steps`), the `top` largest and the rest summed.
nlohmann::json kernel_totals_json(const std::vector<KernelTotal>& totals, int steps, int top);
// The same as a table on stderr, with each kernel's share of the traced time.
void kernel_totals_print(const std::vector<KernelTotal>& totals, int steps, int top,
                         double step_ms);

}  // namespace zt::bench
