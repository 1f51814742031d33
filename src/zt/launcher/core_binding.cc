// Core lists and their split among ranks (see core_binding.h).
#include "zt/launcher/core_binding.h"

#include <sched.h>

#include <charconv>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace zt::launcher {
namespace {

Result<int> core_parse(std::string_view text, std::string_view whole) {
  int v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0) {
    return invalid_argument(
        "--bind_core_list '{}': bad range: '{}', range must be either a number "
        "or two number separated by dash",
        whole, text);
  }
  return v;
}

// Reads one integer from a sysfs file; -1 when it cannot.
int sysfs_int(const std::string& path) {
  std::ifstream in(path);
  int v = -1;
  if (!(in >> v)) return -1;
  return v;
}

}  // namespace

Result<std::vector<int>> core_list_parse(std::string_view text) {
  std::vector<int> cores;
  int last = -1;
  std::string_view rest = text;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    size_t dash = item.find('-');
    int lo = 0;
    int hi = 0;
    if (dash == std::string_view::npos) {
      ZT_ASSIGN_OR_RETURN(lo, core_parse(item, text));
      hi = lo;
    } else {
      ZT_ASSIGN_OR_RETURN(lo, core_parse(item.substr(0, dash), text));
      ZT_ASSIGN_OR_RETURN(hi, core_parse(item.substr(dash + 1), text));
      if (lo > hi) {
        return invalid_argument(
            "--bind_core_list '{}': bad range: '{}', range end must larger "
            "than or equal to start",
            text, item);
      }
    }
    if (lo <= last) {
      return invalid_argument(
          "--bind_core_list '{}': bad range: sub ranges must not overlap with "
          "each other and should be in ascend order",
          text);
    }
    if (hi >= CPU_SETSIZE) {
      return invalid_argument(
          "--bind_core_list '{}': core {} is beyond the {} cores this build "
          "can pin",
          text, hi, CPU_SETSIZE);
    }
    for (int c = lo; c <= hi; ++c) cores.push_back(c);
    last = hi;
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return cores;
}

std::vector<int> machine_physical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> allowed;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) allowed.push_back(c);
    }
  }
  std::vector<int> cores;
  std::set<std::pair<int, int>> seen;  // (package, core id)
  for (int c : allowed) {
    std::string topo = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    int package = sysfs_int(topo + "physical_package_id");
    int core = sysfs_int(topo + "core_id");
    if (package < 0 || core < 0) return allowed;  // no topology: count logical CPUs
    if (seen.insert({package, core}).second) cores.push_back(c);
  }
  return cores;
}

Result<std::vector<std::vector<int>>> cores_split(const std::vector<int>& cores, int ranks) {
  if (ranks < 1) return invalid_argument("core binding needs at least one rank, got {}", ranks);
  size_t per_rank = cores.size() / static_cast<size_t>(ranks);
  if (per_rank < 1) {
    return invalid_argument(
        "--bind_cores_to_rank: At least one core needs to be assigned to each "
        "rank: {} core(s) for {} local ranks; run fewer ranks or give more "
        "cores with --bind_core_list",
        cores.size(), ranks);
  }
  std::vector<std::vector<int>> split(static_cast<size_t>(ranks));
  for (size_t r = 0; r < split.size(); ++r) {
    split[r].assign(cores.begin() + static_cast<std::ptrdiff_t>(per_rank * r),
                    cores.begin() + static_cast<std::ptrdiff_t>(per_rank * (r + 1)));
  }
  return split;
}

}  // namespace zt::launcher
