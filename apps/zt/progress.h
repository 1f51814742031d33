// Training progress for people: a one-line bar redrawn in place on a terminal (step, loss, lr,
// tokens/s, ETA); plain lines every few steps when stderr is not a terminal (logs, CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace zt::cli {

class ProgressBar {
 public:
  ProgressBar(int64_t total_steps, bool enabled);
  void update(int64_t step, double loss, double lr, double tokens_per_s, bool skipped);
  void finish();

 private:
  int64_t total_;
  bool enabled_;
  bool tty_;
  int64_t plain_every_;
  std::chrono::steady_clock::time_point start_;
};

std::string format_duration(double seconds);

}  // namespace zt::cli
