// The line relay (see output_relay.h).
#include "zt/launcher/output_relay.h"

#include <unistd.h>

#include <cerrno>

namespace zt::launcher {

// A line longer than this is written in pieces (each still prefixed): a program that never
// writes '\n' must not make the launcher hold unbounded memory.
constexpr size_t kMaxPendingLine = 1 << 16;

LineRelay::LineRelay(std::string prefix, int out_fd, Intercept intercept)
    : prefix_(std::move(prefix)), out_fd_(out_fd), intercept_(std::move(intercept)) {}

void LineRelay::feed(std::string_view data) {
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      pending_.append(data);
      if (pending_.size() >= kMaxPendingLine) {
        line_emit(pending_);
        pending_.clear();
      }
      return;
    }
    if (pending_.empty()) {
      line_emit(data.substr(0, nl));
    } else {
      pending_.append(data.substr(0, nl));
      line_emit(pending_);
      pending_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LineRelay::finish() {
  if (pending_.empty()) return;
  line_emit(pending_);
  pending_.clear();
}

void LineRelay::line_emit(std::string_view line) {
  if (intercept_ && intercept_(line)) return;
  std::string out;
  out.reserve(prefix_.size() + line.size() + 1);
  out.append(prefix_).append(line).push_back('\n');
  write_all(out_fd_, out);
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace zt::launcher
