#include "zt/core/status.h"

namespace zt {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  return {code_, fmt::format("{}{}", context, message_)};
}

}  // namespace zt
