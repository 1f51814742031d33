// Status and Result<T>: errors a user can cause (bad config, missing file, dead peer, out of
// memory) travel back as values whose message names the key, file, rank or size involved and
// what to do. Broken invariants are not Status: they are ZT_ASSERT (assert.h) and abort.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace zt {

enum class StatusCode : unsigned char {
  kOk = 0,
  kInvalidArgument,  // bad config value, bad flag, impossible batch triad
  kNotFound,         // missing file, unknown model name
  kIoError,          // read/write failure
  kUnavailable,      // device not present, peer unreachable
  kTimeout,          // collective or rendezvous timeout
  kOutOfMemory,
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Prepends context ("reading ds_config.json: ") to the message.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status io_error(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::kIoError, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status unavailable(fmt::format_string<Args...> f, Args&&... args) {
  return {StatusCode::kUnavailable, fmt::format(f, std::forward<Args>(args)...)};
}

// Result<T>: a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace zt

#define ZT_CONCAT_INNER(a, b) a##b
#define ZT_CONCAT(a, b) ZT_CONCAT_INNER(a, b)

// ZT_RETURN_IF_ERROR(expr): returns the Status of `expr` from the enclosing function if not ok.
#define ZT_RETURN_IF_ERROR(expr)                          \
  do {                                                    \
    ::zt::Status zt_status_ = (expr);                     \
    if (!zt_status_.is_ok()) return zt_status_;           \
  } while (0)

// ZT_ASSIGN_OR_RETURN(lhs, expr): evaluates a Result<T>; returns its Status on error, else
// assigns the value to `lhs` (which may be a declaration: `auto x`).
#define ZT_ASSIGN_OR_RETURN(lhs, expr) \
  ZT_ASSIGN_OR_RETURN_IMPL(ZT_CONCAT(zt_result_, __LINE__), lhs, expr)
#define ZT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.is_ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
