#include "zt/core/assert.h"

#include <cstdio>
#include <cstdlib>

namespace zt::detail {

void assert_fail(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "ZeroTrain internal error at %s:%d: check `%s` failed%s%s\n", file, line,
               cond, msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace zt::detail
