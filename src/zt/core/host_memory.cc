#include "zt/core/host_memory.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace zt {
namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<int64_t> parse_int(std::string_view s) {
  s = trim(s);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::optional<int64_t> meminfo_available(std::string_view meminfo) {
  constexpr std::string_view key = "MemAvailable:";
  size_t at = 0;
  while (at < meminfo.size()) {
    size_t eol = meminfo.find('\n', at);
    if (eol == std::string_view::npos) eol = meminfo.size();
    std::string_view line = meminfo.substr(at, eol - at);
    at = eol + 1;
    if (!line.starts_with(key)) continue;
    line = trim(line.substr(key.size()));
    const size_t space = line.find(' ');
    const std::string_view unit = space == std::string_view::npos ? "" : trim(line.substr(space));
    auto v = parse_int(line.substr(0, space));
    if (!v) return std::nullopt;
    if (unit == "kB") return *v * 1024;
    if (unit.empty()) return *v;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<int64_t> cgroup_limit_value(std::string_view text) {
  auto v = parse_int(text);
  // cgroup v1 writes "no limit" as the largest page-aligned value (about 2^63).
  if (!v || *v >= (int64_t{1} << 62)) return std::nullopt;
  return v;
}

std::optional<CgroupPath> memory_cgroup_path(std::string_view text) {
  std::optional<CgroupPath> v2;
  size_t at = 0;
  while (at < text.size()) {
    size_t eol = text.find('\n', at);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(at, eol - at);
    at = eol + 1;
    // hierarchy-id:controller-list:path
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, c1);
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string_view path = line.substr(c2 + 1);
    if (id == "0" && controllers.empty()) {
      v2 = CgroupPath{path, true};
      continue;
    }
    size_t from = 0;
    while (from <= controllers.size()) {
      size_t comma = controllers.find(',', from);
      if (comma == std::string_view::npos) comma = controllers.size();
      if (controllers.substr(from, comma - from) == "memory") return CgroupPath{path, false};
      from = comma + 1;
    }
  }
  return v2;
}

int64_t host_available_bytes(int64_t mem_available, std::optional<int64_t> limit,
                             std::optional<int64_t> usage) {
  if (!limit || !usage) return mem_available;
  const int64_t headroom = std::max<int64_t>(0, *limit - *usage);
  return mem_available > 0 ? std::min(mem_available, headroom) : headroom;
}

HostMemory host_memory() {
  HostMemory m;
  if (auto text = read_text("/proc/meminfo"))
    m.mem_available = meminfo_available(*text).value_or(0);
  m.available = m.mem_available;
  auto self = read_text("/proc/self/cgroup");
  if (!self) return m;
  auto where = memory_cgroup_path(*self);
  if (!where) return m;
  const std::string root = where->v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
  const char* limit_file = where->v2 ? "/memory.max" : "/memory.limit_in_bytes";
  const char* usage_file = where->v2 ? "/memory.current" : "/memory.usage_in_bytes";
  // The tightest limit of the group and its ancestors (a job's limit is often set one level up
  // from the step its processes run in). Inside a cgroup namespace the path is "/" and the root
  // files are the container's own.
  std::string path(where->path);
  while (true) {
    const std::string dir = root + (path == "/" ? "" : path);
    auto limit_text = read_text(dir + limit_file);
    auto usage_text = read_text(dir + usage_file);
    if (limit_text && usage_text) {
      auto limit = cgroup_limit_value(*limit_text);
      auto usage = parse_int(*usage_text);
      if (limit && usage &&
          (!m.cgroup_limit || *limit - *usage < *m.cgroup_limit - *m.cgroup_usage)) {
        m.cgroup_limit = limit;
        m.cgroup_usage = usage;
      }
    }
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  m.available = host_available_bytes(m.mem_available, m.cgroup_limit, m.cgroup_usage);
  return m;
}

}  // namespace zt
