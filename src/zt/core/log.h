// Logging with levels and a rank prefix: "[zt][rank 0] INFO  message". The level comes from
// ZT_LOG_LEVEL (debug|info|warn|error) or set_log_level(); the rank from set_log_rank() (the
// engine sets it from the communicator). Lines go to stderr so stdout stays machine-readable.
#pragma once

#include <fmt/format.h>

#include <string>

namespace zt {

enum class LogLevel : unsigned char { kDebug = 0, kInfo, kWarn, kError, kOff };

void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_rank(int rank);  // -1: no rank prefix
void log_write(LogLevel level, const std::string& message);

template <typename... Args>
void log_at(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < log_level()) return;
  log_write(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace zt

#define ZT_LOG_DEBUG(...) ::zt::log_at(::zt::LogLevel::kDebug, __VA_ARGS__)
#define ZT_LOG_INFO(...) ::zt::log_at(::zt::LogLevel::kInfo, __VA_ARGS__)
#define ZT_LOG_WARN(...) ::zt::log_at(::zt::LogLevel::kWarn, __VA_ARGS__)
#define ZT_LOG_ERROR(...) ::zt::log_at(::zt::LogLevel::kError, __VA_ARGS__)
