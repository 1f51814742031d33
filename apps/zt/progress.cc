#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fmt/format.h>

namespace zt::cli {

std::string format_duration(double s) {
  if (s < 0 || s > 1e7) return "--:--";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02d}:{:02d}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{:02d}:{:02d}", t / 60, t % 60);
}

ProgressBar::ProgressBar(int64_t total_steps, bool enabled, std::string rate_unit)
    : total_(total_steps),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      plain_every_(std::max<int64_t>(1, total_steps / 20)),
      rate_unit_(std::move(rate_unit)),
      start_(std::chrono::steady_clock::now()) {}

void ProgressBar::update(int64_t step, double loss, double lr, double per_s, bool skipped) {
  if (!enabled_) return;
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double eta = step > 0 ? elapsed / step * (total_ - step) : -1;
  std::string stats = fmt::format("loss {:.4f} | lr {:.2e} | {:.0f} {} | ETA {}{}", loss, lr, per_s,
                                  rate_unit_, format_duration(eta), skipped ? " | skipped" : "");
  if (tty_) {
    constexpr int kWidth = 24;
    int filled = total_ > 0 ? static_cast<int>(kWidth * step / total_) : kWidth;
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r\033[K[%s] step %lld/%lld | %s", bar.c_str(),
                 static_cast<long long>(step), static_cast<long long>(total_), stats.c_str());
    std::fflush(stderr);
  } else if (step % plain_every_ == 0 || step == total_ || step == 1) {
    std::fprintf(stderr, "step %lld/%lld | %s\n", static_cast<long long>(step),
                 static_cast<long long>(total_), stats.c_str());
  }
}

void ProgressBar::finish() {
  if (enabled_ && tty_) std::fprintf(stderr, "\n");
}

}  // namespace zt::cli
