// Small helpers the file benchmarks share (ckpt_bench.cc, disk_bench.cc).
#pragma once

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <stdexcept>

#include "zt/core/status.h"

namespace zt::bench {

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Writes dirty pages out and drops the page cache, so that a read that follows comes from the
// disk; false where the process may not (not root).
inline bool drop_caches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f.flush());
}

// A benchmark stops at the first error, with its message.
inline void check(const zt::Status& s) {
  if (!s.is_ok()) throw std::runtime_error(s.message());
}

}  // namespace zt::bench
