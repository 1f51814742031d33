// Slot discovery for one machine (see world.h). The order of checks follows DeepSpeed's runner.py
// main() so that the same flags fail with the same complaint; messages add what to do instead.
#include "zt/launcher/world.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>

#include "zt/core/device.h"
#include "zt/core/log.h"
#include "zt/launcher/resource_filter.h"

namespace zt::launcher {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// CUDA_VISIBLE_DEVICES as DeepSpeed reads it through --include: integer ids, sorted, unique.
Result<std::vector<int>> visible_devices_parse(std::string_view cvd) {
  std::vector<int> ids;
  std::string_view rest = cvd;
  while (true) {
    size_t comma = rest.find(',');
    std::string_view item = trim(rest.substr(0, comma));
    int id = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || id < 0) {
      return invalid_argument(
          "CUDA_VISIBLE_DEVICES={}: entry '{}' is not a GPU index; zt launch turns "
          "CUDA_VISIBLE_DEVICES into --include localhost:<ids> (as DeepSpeed does) and needs "
          "integer ids (nvidia-smi -L lists them); or pass --include localhost:0,1 instead",
          cvd, item);
    }
    ids.push_back(id);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int> slots_first(int n) {
  std::vector<int> s(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) s[static_cast<size_t>(i)] = i;
  return s;
}

// No hostfile: this machine's GPUs, honouring CUDA_VISIBLE_DEVICES as DeepSpeed does.
Result<Resources> gpu_pool(const LaunchOptions& o, const MachineProbe& probe) {
  std::optional<std::vector<int>> visible;
  const std::string cvd = probe.cuda_visible_devices.value_or("");
  if (!cvd.empty()) {
    if (!o.include.empty() || !o.exclude.empty() || o.num_nodes > 1 || o.num_gpus > 0) {
      ZT_LOG_INFO(
          "Detected CUDA_VISIBLE_DEVICES={} but ignoring it because one or several of "
          "--include/--exclude/--num_gpus/--num_nodes were used. If you want to use "
          "CUDA_VISIBLE_DEVICES don't pass any of these arguments to zt launch.",
          cvd);
    } else {
      ZT_ASSIGN_OR_RETURN(visible, visible_devices_parse(cvd));
      ZT_LOG_INFO("Detected CUDA_VISIBLE_DEVICES={}: setting --include=localhost:{}", cvd,
                  slot_list_str(*visible));
    }
  }
  int count = probe.cuda_device_count ? probe.cuda_device_count() : 0;
  if (count == 0) {
    return Status(StatusCode::kUnavailable,
                  "Unable to proceed, no GPU resources available: no CUDA GPU is visible to zt "
                  "launch (check nvidia-smi). To run ranks on the CPU, pass --num_procs N");
  }
  if (o.num_gpus > count) {
    return invalid_argument("--num_gpus {} but this machine has {} visible GPU(s); pass at most {}",
                            o.num_gpus, count, count);
  }
  return Resources{
      HostSlots{.host = "localhost", .slots = visible ? *visible : slots_first(count)}};
}

}  // namespace

MachineProbe machine_probe_local() {
  MachineProbe probe;
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) probe.cuda_visible_devices = cvd;
  probe.cuda_device_count = [] {
    // DeepSpeed deletes CUDA_VISIBLE_DEVICES before counting: the ids it turned into --include
    // (or chose to ignore) index all of the machine's GPUs. Each rank gets it back, set to its
    // node's slot list.
    unsetenv("CUDA_VISIBLE_DEVICES");
    return zt::cuda_device_count();
  };
  probe.local_host_names = {"localhost", "127.0.0.1"};
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') {
    std::string full = name;
    probe.local_host_names.push_back(full);
    size_t dot = full.find('.');
    if (dot != std::string::npos && dot > 0) probe.local_host_names.push_back(full.substr(0, dot));
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr) continue;
      char text[INET6_ADDRSTRLEN] = {};
      const int family = a->ifa_addr->sa_family;
      const void* addr = nullptr;
      if (family == AF_INET) addr = &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr;
      if (family == AF_INET6) addr = &reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr;
      if (addr != nullptr && inet_ntop(family, addr, text, sizeof(text)) != nullptr) {
        probe.local_addresses.emplace_back(text);
      }
    }
    freeifaddrs(list);
  }
  return probe;
}

std::string local_address_first() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string v4;
  std::string v6;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
      if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) v4 = text;
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
      if (inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text)) != nullptr) v6 = text;
    }
  }
  freeifaddrs(list);
  return v4.empty() ? v6 : v4;
}

bool world_multi_node(const WorldInfo& world, const LaunchOptions& options) {
  if (options.force_multi || world.hosts.size() > 1) return true;
  return !world.local.empty() && !world.local.front();
}

Result<WorldInfo> world_discover(const LaunchOptions& o, const MachineProbe& probe) {
  const bool filtered = !o.include.empty() || !o.exclude.empty();
  if (o.num_procs > 0 && o.num_gpus > 0) {
    return invalid_argument(
        "--num_procs {} (CPU ranks) and --num_gpus {} (GPU ranks) exclude each "
        "other; pass one of them",
        o.num_procs, o.num_gpus);
  }
  if ((o.num_nodes >= 0 || o.num_gpus >= 0 || o.num_procs >= 0) && filtered) {
    return invalid_argument(
        "Cannot specify num_nodes/gpus with include/exclude (--num_nodes, "
        "--num_gpus and --num_procs pick slots by count; --include/--exclude "
        "pick them by name: pass one kind)");
  }
  if (!o.include.empty() && !o.exclude.empty()) {
    return invalid_argument(
        "include_str and exclude_str are mutually exclusive: pass either "
        "--include or --exclude, not both");
  }

  WorldInfo world;
  Resources pool;
  std::string pool_source = "this machine";
  if (o.num_procs > 0 && !o.hostfile_given) {
    if (o.num_nodes > 1) {
      return invalid_argument(
          "Num nodes is >1 but no extra nodes available via hostfile (--num_nodes {} with "
          "--num_procs: pass -H HOSTFILE too to run --num_procs CPU ranks on each of its hosts)",
          o.num_nodes);
    }
    pool = {HostSlots{.host = "localhost", .slots = slots_first(o.num_procs)}};
    world.kind = SlotKind::kCpu;
  } else if (o.num_procs > 0) {
    ZT_ASSIGN_OR_RETURN(pool, hostfile_read(o.hostfile));
    pool_source = "hostfile " + o.hostfile;
    world.kind = SlotKind::kCpu;
  } else {
    std::error_code ec;
    const bool use_hostfile = o.hostfile_given || std::filesystem::exists(o.hostfile, ec);
    if (use_hostfile) {
      ZT_ASSIGN_OR_RETURN(pool, hostfile_read(o.hostfile));
      pool_source = "hostfile " + o.hostfile;
      if (!o.hostfile_given) ZT_LOG_INFO("using the default hostfile {}", o.hostfile);
    } else {
      if (o.num_nodes > 1) {
        return invalid_argument(
            "Num nodes is >1 but no extra nodes available via hostfile "
            "(--num_nodes {}: pass -H HOSTFILE listing the machines)",
            o.num_nodes);
      }
      ZT_ASSIGN_OR_RETURN(pool, gpu_pool(o, probe));
    }
    world.kind = SlotKind::kGpu;
  }

  ZT_ASSIGN_OR_RETURN(Resources active, resources_filter(pool, o.include, o.exclude));
  if (o.num_nodes > 0 && static_cast<size_t>(o.num_nodes) < active.size()) {
    active.resize(static_cast<size_t>(o.num_nodes));
  }
  if (o.num_nodes > 0 && static_cast<size_t>(o.num_nodes) > active.size()) {
    return invalid_argument("--num_nodes {} but the {} lists {} host(s); pass at most {}",
                            o.num_nodes, pool_source, active.size(), active.size());
  }
  const int per_host = o.num_gpus > 0 ? o.num_gpus : (o.hostfile_given ? o.num_procs : -1);
  if (per_host > 0) {
    const char* flag = o.num_gpus > 0 ? "--num_gpus" : "--num_procs";
    for (HostSlots& h : active) {
      if (static_cast<size_t>(per_host) > h.slots.size()) {
        return invalid_argument(
            "{} {} but host {} has {} slot(s) in the {}; pass at most "
            "{}",
            flag, per_host, h.host, h.slots.size(), pool_source, h.slots.size());
      }
      h.slots = slots_first(per_host);
    }
  }
  if (resources_slot_count(active) == 0) {
    return invalid_argument("no slot is left to run a rank on ({}, after --include/--exclude)",
                            pool_source);
  }
  const auto& names = probe.local_host_names;
  const auto& addresses = probe.local_addresses;
  for (const HostSlots& h : active) {
    world.local.push_back(std::find(names.begin(), names.end(), h.host) != names.end() ||
                          std::find(addresses.begin(), addresses.end(), h.host) != addresses.end());
  }
  world.hosts = std::move(active);
  world.master_addr = o.master_addr;
  if (world.master_addr.empty() && world.hosts.size() == 1 && world.local.front()) {
    world.master_addr = "127.0.0.1";
  }
  return world;
}

int world_size(const WorldInfo& world) {
  return resources_slot_count(world.hosts);
}

std::string slot_list_str(const std::vector<int>& slots) {
  std::string out;
  for (int s : slots) {
    if (!out.empty()) out += ',';
    out += std::to_string(s);
  }
  return out;
}

}  // namespace zt::launcher
