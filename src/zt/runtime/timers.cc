#include "zt/runtime/timers.h"

#include <fmt/format.h>

#include "zt/core/assert.h"

namespace zt {

void EventTimers::start(const std::string& name, const Stream& stream) {
  Timer& t = timers_[name];
  ZT_ASSERT(!t.open, "timer '{}' started twice", name);
  t.open = std::make_unique<Event>(device_);
  t.open->record(stream);
}

void EventTimers::stop(const std::string& name, const Stream& stream) {
  Timer& t = timers_[name];
  ZT_ASSERT(t.open != nullptr, "timer '{}' stopped without a start", name);
  auto end = std::make_unique<Event>(device_);
  end->record(stream);
  t.spans.emplace_back(std::move(t.open), std::move(end));
}

double EventTimers::elapsed_ms(const std::string& name, bool reset) {
  auto it = timers_.find(name);
  if (it == timers_.end()) return 0;
  double ms = 0;
  for (auto& [begin, end] : it->second.spans) {
    end->synchronize();
    ms += begin->elapsed_ms(*end);
  }
  if (reset) it->second.spans.clear();
  return ms;
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
