// ZT_ASSERT: a broken invariant (a bug in ZeroTrain, not a user mistake). Prints file:line and
// the message, then aborts. User-caused errors use Status (status.h) instead.
#pragma once

#include <fmt/format.h>

namespace zt::detail {
[[noreturn]] void assert_fail(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace zt::detail

#define ZT_ASSERT(cond, ...)                                                             \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      ::zt::detail::assert_fail(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                    \
  } while (0)

// Checks the Status of an expression that cannot fail unless ZeroTrain itself is wrong.
#define ZT_CHECK_OK(expr)                                                                 \
  do {                                                                                    \
    ::zt::Status zt_s_ = (expr);                                                          \
    if (!zt_s_.is_ok()) ::zt::detail::assert_fail(__FILE__, __LINE__, #expr, zt_s_.message()); \
  } while (0)
