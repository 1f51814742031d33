// The engine's wall-clock breakdown (DeepSpeed's wall_clock_breakdown): named timers whose spans
// are recorded as events on the compute stream (CUDA events on a GPU, the host clock on the CPU),
// so a GPU span measures the device work between the two points, not the host's enqueueing.
// Elapsed times are read (and the events synchronised) only when a line is logged.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "zt/core/device.h"

namespace zt {

class EventTimers {
 public:
  explicit EventTimers(Device device) : device_(device) {}
  void start(const std::string& name, const Stream& stream);
  void stop(const std::string& name, const Stream& stream);
  // Milliseconds of every finished span of `name` since the last reset (0 for an unknown name);
  // with `reset` the spans are dropped.
  double elapsed_ms(const std::string& name, bool reset);
  // DeepSpeed's line: "time (ms) | fwd: 12.34 | bwd: 23.45" for the names that have spans;
  // resets them.
  std::string log_line(const std::vector<std::string>& names);

 private:
  Device device_;
  std::map<std::string, EventSpans> timers_;
};

}  // namespace zt
