// --bind_cores_to_rank / --bind_core_list, as DeepSpeed's utils/numa.py `get_numactl_cmd`: the
// core list ("1,3-5,7", or by default one logical CPU per physical core) is cut into
// len/local_ranks cores per rank, rank r taking the r-th run; leftover cores stay unused. Each rank
// is pinned to its cores with sched_setaffinity (DeepSpeed runs `numactl -C`; memory binding
// `numactl -m` is not done here, first-touch keeps memory near the pinned cores) and gets
// OMP_NUM_THREADS = its core count.
#pragma once

#include <string_view>
#include <vector>

#include "zt/core/status.h"

namespace zt::launcher {

// DeepSpeed's parse_range_list: comma-separated numbers or inclusive "a-b" ranges, ascending and
// not overlapping, no spaces.
Result<std::vector<int>> core_list_parse(std::string_view text);

// The CPUs this process may run on (sched_getaffinity, so taskset/cgroup limits hold), keeping
// the first logical CPU of each physical core (as DeepSpeed counts physical cores). Falls back to
// every allowed CPU when the topology files cannot be read.
std::vector<int> machine_physical_cores();

// Splits `cores` among `ranks` local ranks: rank r gets cores [c*r, c*(r+1)), c = size/ranks.
// Fails when c < 1, naming how many cores there are.
Result<std::vector<std::vector<int>>> cores_split(const std::vector<int>& cores, int ranks);

}  // namespace zt::launcher
