#include "zt/core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace zt {
namespace {

LogLevel level_from_env() {
  const char* v = std::getenv("ZT_LOG_LEVEL");
  if (v == nullptr) return LogLevel::kInfo;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(v, "warn") == 0) return LogLevel::kWarn;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  if (std::strcmp(v, "off") == 0) return LogLevel::kOff;
  return LogLevel::kInfo;
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{level_from_env()};
  return level;
}
std::atomic<int> g_rank{-1};
std::mutex g_mutex;

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO ";
    case LogLevel::kWarn: return "WARN ";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kOff: return "";
  }
  return "";
}

}  // namespace

void set_log_level(LogLevel level) { level_ref().store(level); }
LogLevel log_level() { return level_ref().load(); }
void set_log_rank(int rank) { g_rank.store(rank); }

void log_write(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  int rank = g_rank.load();
  if (rank >= 0) {
    std::fprintf(stderr, "[zt][rank %d] %s %s\n", rank, level_name(level), message.c_str());
  } else {
    std::fprintf(stderr, "[zt] %s %s\n", level_name(level), message.c_str());
  }
  std::fflush(stderr);
}

}  // namespace zt
