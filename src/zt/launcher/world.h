// Which ranks run where: slot discovery, as DeepSpeed's runner.py main() (reference §5). In order:
// the hostfile's slots (-H, or /job/hostfile when it exists); else ZeroTrain's --num_procs N CPU
// ranks on this machine; else every visible GPU. With no hostfile and no filter flags,
// CUDA_VISIBLE_DEVICES=<ids> means `--include localhost:<ids>`, as DeepSpeed does (with filter
// flags it is ignored, with a note). Then --include/--exclude, --num_nodes and --num_gpus apply.
//
// CPU ranks on several hosts: `-H HOSTFILE --num_procs N` runs N CPU ranks on each host (at most
// its slots=), as `--num_gpus N` takes the first N GPUs of each host. A hostfile alone means GPU
// slots, as in DeepSpeed.
//
// The result is one or more hosts in hostfile order; `local` says which of them are this machine
// (a name in MachineProbe::local_host_names, or an address of one of its interfaces). A world
// that is not one local host is a multi-node job (world_multi_node).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "zt/core/status.h"
#include "zt/launcher/hostfile.h"
#include "zt/launcher/launch_options.h"

namespace zt::launcher {

enum class SlotKind : unsigned char {
  kGpu,  // slot ids are GPU indices: ranks get CUDA_VISIBLE_DEVICES = the host's slot list
  kCpu,  // --num_procs: slot ids only number the ranks; CUDA_VISIBLE_DEVICES is left alone
};

// The job's shape: hosts in rank order, each with the slots that run one rank each. Rank r is the
// r-th slot counting host by host (DeepSpeed's global_rank_mapping).
struct WorldInfo {
  Resources hosts;
  std::vector<bool> local{};  // per host: it is this machine
  SlotKind kind = SlotKind::kGpu;
  // --master_addr, else 127.0.0.1 for one local host; empty for a multi-node job without
  // --master_addr (the multi-node runner asks the first host, as DeepSpeed does).
  std::string master_addr;
};

// What slot discovery reads from the machine; injected so tests need no GPU and no /job.
struct MachineProbe {
  std::optional<std::string> cuda_visible_devices;  // the launcher's CUDA_VISIBLE_DEVICES
  // Counts GPUs; called only when they are needed, after deciding about CUDA_VISIBLE_DEVICES
  // (the caller unsets it first, as DeepSpeed deletes it, so ids index all GPUs).
  std::function<int()> cuda_device_count;
  std::vector<std::string> local_host_names;  // names that mean this machine
  std::vector<std::string> local_addresses;   // its interfaces' addresses (numeric)
};

// The probe of this process: its CUDA_VISIBLE_DEVICES, zt::cuda_device_count(),
// localhost / 127.0.0.1 / gethostname() (full and short), and its interfaces' addresses.
MachineProbe machine_probe_local();

Result<WorldInfo> world_discover(const LaunchOptions& options, const MachineProbe& probe);

int world_size(const WorldInfo& world);

// More than one host, or a host that is not this machine, or --force_multi.
bool world_multi_node(const WorldInfo& world, const LaunchOptions& options);

// The first address `hostname -I` would print here: the first non-loopback IPv4 address of the
// interfaces, else the first IPv6 one that is not link-local; empty when there is none.
std::string local_address_first();

// "0,1,3": the comma-separated slot list, as CUDA_VISIBLE_DEVICES and --include write it.
std::string slot_list_str(const std::vector<int>& slots);

}  // namespace zt::launcher
