// How much host memory this process may still take: what the kernel reports available
// (/proc/meminfo MemAvailable), capped by the memory limit of the process's control group when it
// has one (a Slurm job's --mem, a container's limit), which /proc/meminfo does not show. The
// engine compares offloaded optimizer state with it before allocating any.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace zt {

struct HostMemory {
  int64_t available = 0;      // bytes this process may still take; 0 when nothing could be read
  int64_t mem_available = 0;  // /proc/meminfo MemAvailable
  std::optional<int64_t> cgroup_limit;  // the control group's limit, when one is set
  std::optional<int64_t> cgroup_usage;  // and what the group uses now
};

// Reads /proc/meminfo and the cgroup (v2: memory.max, memory.current; v1: memory.limit_in_bytes,
// memory.usage_in_bytes) of /proc/self/cgroup.
HostMemory host_memory();

// The parsing steps, on the files' text (for tests).
// MemAvailable of /proc/meminfo text, in bytes; nullopt when absent.
std::optional<int64_t> meminfo_available(std::string_view meminfo);
// A cgroup limit file's value: bytes, or nullopt for "max" (v2) or a v1 "no limit" value
// (at least 2^62), or text that is not a number.
std::optional<int64_t> cgroup_limit_value(std::string_view text);
// The cgroup path of the memory controller in /proc/self/cgroup text: the v1 line naming
// "memory", else the v2 line "0::<path>"; nullopt when neither is there.
struct CgroupPath {
  std::string_view path;
  bool v2 = false;
};
std::optional<CgroupPath> memory_cgroup_path(std::string_view proc_self_cgroup);
// `mem_available` capped by limit - usage when both are known.
int64_t host_available_bytes(int64_t mem_available, std::optional<int64_t> limit,
                             std::optional<int64_t> usage);

}  // namespace zt
