// --include / --exclude, as DeepSpeed's runner.py `parse_resource_filter` (reference §5):
// NODE_SPEC[@NODE_SPEC...] with NODE_SPEC = NAME[:SLOT[,SLOT...]]. Without ":SLOT" a spec means
// every slot of that host. The two flags are mutually exclusive; a host or slot that is not in
// the pool is an error. The result keeps the pool's host order (it fixes the global rank order);
// slots are listed in ascending order without duplicates, and hosts left with no slot are dropped.
//
// One deliberate difference: DeepSpeed's wrapper `parse_inclusion_exclusion` pre-seeds every
// included host with the slots named in --include, so there `-i worker:7` on a 4-slot host is not
// caught and `-i worker` (no slots) selects nothing. Here both are checked against the pool, as
// DeepSpeed's own tests of `parse_resource_filter` expect.
#pragma once

#include <string_view>
#include <vector>

#include "zt/core/status.h"
#include "zt/launcher/hostfile.h"

namespace zt::launcher {

// Parses NODE_SPEC[@NODE_SPEC...]. Specs naming the same host are merged; an empty slot list
// means the whole host. `flag` ("--include") names the source in error messages.
Result<Resources> node_spec_list_parse(std::string_view text, std::string_view flag);

// Applies --include (`include`) or --exclude (`exclude`) to `pool`; both empty returns the pool.
Result<Resources> resources_filter(const Resources& pool, std::string_view include,
                                   std::string_view exclude);

// Number of slots over all hosts.
int resources_slot_count(const Resources& resources);

}  // namespace zt::launcher
