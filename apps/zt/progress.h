// Training progress for people: a one-line bar redrawn in place on a terminal (step, loss, lr,
// tokens/s, ETA); plain lines every few steps when stderr is not a terminal (logs, CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace zt::cli {

class ProgressBar {
 public:
  // `rate_unit` names what the throughput counts ("tok/s"; image training: "img/s").
  ProgressBar(int64_t total_steps, bool enabled, std::string rate_unit = "tok/s");
  void update(int64_t step, double loss, double lr, double per_s, bool skipped);
  void finish();

 private:
  int64_t total_;
  bool enabled_;
  bool tty_;
  int64_t plain_every_;
  std::string rate_unit_;
  std::chrono::steady_clock::time_point start_;
};

std::string format_duration(double seconds);

}  // namespace zt::cli
