#include "zt/launcher/heartbeat.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <thread>

namespace zt::launcher {
namespace {

std::atomic<int64_t> g_step{-1};
std::atomic<bool> g_started{false};

}  // namespace

void heartbeat_set_step(int64_t step) {
  g_step.store(step, std::memory_order_relaxed);
}

void heartbeat_start_from_env() {
  const char* v = std::getenv("ZT_HEARTBEAT_FD");
  if (v == nullptr || g_started.exchange(true)) return;
  int fd = -1;
  const std::string_view text(v);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), fd);
  if (ec != std::errc() || end != text.data() + text.size() || fd < 0 ||
      fcntl(fd, F_GETFD) < 0) {
    return;
  }
  // Programs this one starts do not inherit it.
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  unsetenv("ZT_HEARTBEAT_FD");
  std::thread([fd] {
    // A launcher that is gone closes the pipe: the write fails with EPIPE (SIGPIPE is blocked
    // in this thread) and the thread ends; the rank's own death signal comes from the launcher.
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
    while (true) {
      const int64_t step = g_step.load(std::memory_order_relaxed);
      const ssize_t n = write(fd, &step, sizeof(step));
      if (n < 0 && errno != EINTR && errno != EAGAIN) break;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    close(fd);
  }).detach();
}

}  // namespace zt::launcher
