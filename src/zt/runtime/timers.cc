#include "zt/runtime/timers.h"

#include <fmt/format.h>

namespace zt {

void EventTimers::start(const std::string& name, const Stream& stream) {
  timers_.try_emplace(name, device_).first->second.begin(stream);
}

void EventTimers::stop(const std::string& name, const Stream& stream) {
  timers_.try_emplace(name, device_).first->second.end(stream);
}

double EventTimers::elapsed_ms(const std::string& name, bool reset) {
  auto it = timers_.find(name);
  return it == timers_.end() ? 0.0 : it->second.elapsed_ms(reset);
}

std::string EventTimers::log_line(const std::vector<std::string>& names) {
  std::string line = "time (ms)";
  for (const std::string& n : names) {
    if (timers_.count(n) == 0) continue;
    line += fmt::format(" | {}: {:.2f}", n, elapsed_ms(n, /*reset=*/true));
  }
  return line;
}

}  // namespace zt
