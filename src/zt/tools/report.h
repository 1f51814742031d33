// `zt report` (DeepSpeed's ds_report): what this machine and this build of ZeroTrain are, in one
// screen, and each problem found as one line with its fix. Collection reads the machine (CUDA,
// NCCL, OpenBLAS, /proc, /sys, getrlimit, the network interfaces, PATH); the problems are a pure
// function of what was collected, so they are tested with made-up machines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt::tools {

struct ReportGpu {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  int capability = 0;  // 90 for sm_90
};

struct Report {
  // This build.
  std::string version, build_type, compiler, cuda_architectures;
  bool cuda_built = false;
  // CUDA and its libraries (0: unknown or not built).
  int cuda_driver = 0, cuda_runtime = 0, cuda_toolkit = 0, cublas = 0, nccl = 0;
  std::string nvidia_driver;  // from /proc/driver/nvidia/version
  std::vector<ReportGpu> gpus;
  std::string cuda_visible_devices;  // the variable, or "(unset)"
  // CPU side.
  std::string cpu_model, simd, gloo, openblas_config;
  int cpus = 0, openblas_threads = 0, numa_nodes = 0;
  int64_t mem_total = 0, mem_available = 0;  // bytes
  int64_t memlock_limit = -1;                // bytes; -1 unlimited
  int64_t shm_bytes = -1;                    // size of /dev/shm; -1 when absent
  std::string transparent_hugepages;         // "always", "madvise", "never" or ""
  int64_t hugepages_total = 0;
  // Network and launchers.
  std::vector<std::string> interfaces;  // "eth0 10.0.0.2"
  std::vector<std::string> launchers_found, launchers_missing;  // ssh pdsh mpirun srun
};

Report report_collect();
// One line per problem: what is wrong and what to do.
std::vector<std::string> report_problems(const Report& r);
std::string report_text(const Report& r);
nlohmann::json report_json(const Report& r);

}  // namespace zt::tools
