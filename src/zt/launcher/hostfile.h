// Hostfile grammar, as DeepSpeed's runner.py `_parse_hostfile` (reference §5): MPI-style lines
// "HOST slots=N", stripped; blank lines and lines starting with '#' are skipped; a line that does
// not start with `HOST<whitespace>slots=<digits>` is an error quoting the line, and so are a host
// listed twice and a file with no host. Text after the digits is ignored, as DeepSpeed's regex
// `^(\S+)\s+slots=(\d+)` ignores it. A hostfile is small (one line per machine).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt::launcher {

// One host and the slot ids on it that may run a rank (GPU indices, or CPU rank slots).
struct HostSlots {
  std::string host;
  std::vector<int> slots;
  friend bool operator==(const HostSlots&, const HostSlots&) = default;
};

// Hosts in hostfile order: that order fixes the global rank order, as in DeepSpeed.
using Resources = std::vector<HostSlots>;

// The most slots one host may declare; more is a typo, not a machine.
inline constexpr int kMaxSlotsPerHost = 1 << 16;

// Parses hostfile text; `source` (the path) names it in error messages. A host with slots=N gets
// slot ids 0..N-1.
Result<Resources> hostfile_parse(std::string_view text, std::string_view source);

// Reads and parses `path`; kNotFound when it does not exist.
Result<Resources> hostfile_read(const std::string& path);

}  // namespace zt::launcher
