// --include / --exclude parsing and filtering (see resource_filter.h). Error texts begin with
// DeepSpeed's wording, then say what to do.
#include "zt/launcher/resource_filter.h"

#include <algorithm>
#include <charconv>
#include <string>

namespace zt::launcher {
namespace {

const HostSlots* host_find(const Resources& pool, std::string_view host) {
  for (const HostSlots& h : pool) {
    if (h.host == host) return &h;
  }
  return nullptr;
}

HostSlots* host_find(Resources& pool, std::string_view host) {
  for (HostSlots& h : pool) {
    if (h.host == host) return &h;
  }
  return nullptr;
}

bool slot_has(const HostSlots& host, int slot) {
  return std::find(host.slots.begin(), host.slots.end(), slot) != host.slots.end();
}

Result<int> slot_parse(std::string_view text, std::string_view spec, std::string_view flag) {
  int value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0) {
    return invalid_argument(
        "{} '{}': bad slot '{}'; slots are non-negative integers, as in localhost:0,2", flag, spec,
        text);
  }
  return value;
}

std::string host_names(const Resources& pool) {
  std::string names;
  for (const HostSlots& h : pool) {
    if (!names.empty()) names += ", ";
    names += h.host;
  }
  return names;
}

}  // namespace

Result<Resources> node_spec_list_parse(std::string_view text, std::string_view flag) {
  Resources specs;
  std::string_view rest = text;
  while (true) {
    size_t at = rest.find('@');
    std::string_view spec = rest.substr(0, at);
    std::string_view host = spec;
    std::vector<int> slots;
    size_t colon = spec.find(':');
    if (colon != std::string_view::npos) {
      host = spec.substr(0, colon);
      std::string_view list = spec.substr(colon + 1);
      if (list.find(':') != std::string_view::npos) {
        return invalid_argument("{} '{}': bad node spec '{}'; expected NAME[:SLOT[,SLOT...]]", flag,
                                text, spec);
      }
      while (true) {
        size_t comma = list.find(',');
        ZT_ASSIGN_OR_RETURN(int slot, slot_parse(list.substr(0, comma), text, flag));
        slots.push_back(slot);
        if (comma == std::string_view::npos) break;
        list = list.substr(comma + 1);
      }
    }
    HostSlots* merged = host_find(specs, host);
    if (merged == nullptr) {
      specs.push_back(HostSlots{.host = std::string(host), .slots = {}});
      merged = &specs.back();
    }
    merged->slots.insert(merged->slots.end(), slots.begin(), slots.end());
    if (at == std::string_view::npos) break;
    rest = rest.substr(at + 1);
  }
  for (HostSlots& h : specs) {
    std::sort(h.slots.begin(), h.slots.end());
    h.slots.erase(std::unique(h.slots.begin(), h.slots.end()), h.slots.end());
  }
  return specs;
}

Result<Resources> resources_filter(const Resources& pool, std::string_view include,
                                   std::string_view exclude) {
  if (!include.empty() && !exclude.empty()) {
    return invalid_argument(
        "include_str and exclude_str are mutually exclusive: pass either --include or --exclude, "
        "not both");
  }
  if (include.empty() && exclude.empty()) return pool;
  const bool including = !include.empty();
  std::string_view flag = including ? "--include" : "--exclude";
  ZT_ASSIGN_OR_RETURN(Resources specs, node_spec_list_parse(including ? include : exclude, flag));

  // Start empty and add (include), or start from the pool and remove (exclude).
  Resources chosen = including ? Resources{} : pool;
  for (const HostSlots& spec : specs) {
    const HostSlots* host = host_find(pool, spec.host);
    if (host == nullptr) {
      return invalid_argument("Hostname '{}' not found in hostfile ({} names it; known hosts: {})",
                              spec.host, flag, host_names(pool));
    }
    for (int slot : spec.slots) {
      if (!slot_has(*host, slot)) {
        return invalid_argument(
            "No slot '{}' specified on host '{}' ({} names it; the host has "
            "{} slot(s))",
            slot, spec.host, flag, host->slots.size());
      }
    }
    if (including) {
      chosen.push_back(spec.slots.empty() ? *host : spec);
    } else {
      HostSlots* kept = host_find(chosen, spec.host);
      if (spec.slots.empty()) {
        kept->slots.clear();
      } else {
        std::erase_if(kept->slots, [&](int s) {
          return std::find(spec.slots.begin(), spec.slots.end(), s) != spec.slots.end();
        });
      }
    }
  }

  // Pool order, no empty hosts.
  Resources ordered;
  for (const HostSlots& h : pool) {
    const HostSlots* c = host_find(chosen, h.host);
    if (c != nullptr && !c->slots.empty()) ordered.push_back(*c);
  }
  return ordered;
}

int resources_slot_count(const Resources& resources) {
  int n = 0;
  for (const HostSlots& h : resources) n += static_cast<int>(h.slots.size());
  return n;
}

}  // namespace zt::launcher
