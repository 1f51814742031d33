// zt report (report.h).
#include "zt/tools/report.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <cblas.h>
#include <fmt/format.h>

#include "zt/build_config.h"
#include "zt/comm/communicator.h"
#include "zt/core/device.h"

namespace zt::tools {
namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A field of /proc/meminfo in bytes (the file says kB).
int64_t meminfo(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string k;
  int64_t v = 0;
  std::string unit;
  while (in >> k >> v) {
    std::getline(in, unit);
    if (k == key + ":") return unit.find("kB") != std::string::npos ? v * 1024 : v;
  }
  return 0;
}

std::string cuda_version_text(int v) {
  return v > 0 ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : std::string("-");
}

std::string gib(int64_t bytes) { return fmt::format("{:.1f} GiB", bytes / double(1 << 30)); }

bool on_path(const std::string& exe) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::stringstream ss(path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (!dir.empty() && access((dir + "/" + exe).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

Report report_collect() {
  Report r;
  r.version = ZT_VERSION_STRING;
  r.build_type = ZT_BUILD_TYPE;
  r.compiler = ZT_CXX_COMPILER;
  r.cuda_built = cuda_built();
  r.cuda_architectures = r.cuda_built ? ZT_CUDA_ARCHITECTURES : "";
  const CudaVersions v = cuda_versions();
  r.cuda_driver = v.driver;
  r.cuda_runtime = v.runtime;
  r.cuda_toolkit = v.toolkit;
  r.cublas = v.cublas;
  r.nccl = comm_nccl_version();
  r.nvidia_driver = first_line("/proc/driver/nvidia/version");
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  r.cuda_visible_devices = cvd != nullptr ? cvd : "(unset)";
  for (int i = 0; i < cuda_device_count(); ++i) {
    r.gpus.push_back({i, cuda_device_name(i), cuda_device_total_memory(i),
                      cuda_device_capability(i)});
  }
  // CPU.
  {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("model name", 0) == 0) {
        r.cpu_model = line.substr(line.find(':') + 2);
        break;
      }
    }
  }
  r.cpus = static_cast<int>(std::thread::hardware_concurrency());
  __builtin_cpu_init();
  r.simd = __builtin_cpu_supports("avx512f") ? "avx512f"
           : __builtin_cpu_supports("avx2")  ? "avx2"
                                             : "baseline x86-64";
  r.gloo = comm_gloo_version();
  r.openblas_config = openblas_get_config();
  r.openblas_threads = openblas_get_num_threads();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("node", 0) == 0 && n.size() > 4 && std::isdigit(static_cast<unsigned char>(n[4]))) {
      ++r.numa_nodes;
    }
  }
  r.mem_total = meminfo("MemTotal");
  r.mem_available = meminfo("MemAvailable");
  r.hugepages_total = meminfo("HugePages_Total");
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0) {
    r.memlock_limit = lim.rlim_cur == RLIM_INFINITY ? -1 : static_cast<int64_t>(lim.rlim_cur);
  }
  struct statvfs sv {};
  if (statvfs("/dev/shm", &sv) == 0) {
    r.shm_bytes = static_cast<int64_t>(sv.f_blocks) * static_cast<int64_t>(sv.f_frsize);
  }
  {
    const std::string thp = first_line("/sys/kernel/mm/transparent_hugepage/enabled");
    const size_t a = thp.find('['), b = thp.find(']');
    if (a != std::string::npos && b != std::string::npos && b > a) {
      r.transparent_hugepages = thp.substr(a + 1, b - a - 1);
    }
  }
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_UP) == 0) continue;
      char buf[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
      r.interfaces.push_back(fmt::format("{} {}{}", i->ifa_name, buf,
                                         (i->ifa_flags & IFF_LOOPBACK) ? " (loopback)" : ""));
    }
    freeifaddrs(ifs);
  }
  for (const char* exe : {"ssh", "pdsh", "mpirun", "srun"}) {
    (on_path(exe) ? r.launchers_found : r.launchers_missing).push_back(exe);
  }
  return r;
}

std::vector<std::string> report_problems(const Report& r) {
  std::vector<std::string> p;
  if (r.cuda_built && r.gpus.empty()) {
    p.push_back(fmt::format(
        "no GPU is visible (CUDA_VISIBLE_DEVICES={}{}): check `nvidia-smi`, the driver, and that "
        "the variable names existing devices; training runs on the CPU until then",
        r.cuda_visible_devices, r.nvidia_driver.empty() ? ", no NVIDIA driver loaded" : ""));
  }
  if (!r.cuda_built) {
    p.push_back("this ZeroTrain was built without CUDA: install the CUDA toolkit "
                "(/usr/local/cuda) and rebuild (scripts/build.sh) to train on GPUs");
  }
  if (r.cuda_driver > 0 && r.cuda_toolkit > 0 && r.cuda_driver < r.cuda_toolkit) {
    p.push_back(fmt::format("the driver supports CUDA {} but ZeroTrain was built with CUDA {}: "
                            "update the NVIDIA driver",
                            cuda_version_text(r.cuda_driver), cuda_version_text(r.cuda_toolkit)));
  }
  for (const ReportGpu& g : r.gpus) {
    const std::string arch = fmt::to_string(g.capability);
    if (g.capability > 0 && !r.cuda_architectures.empty() &&
        r.cuda_architectures.find(arch) == std::string::npos) {
      p.push_back(fmt::format("GPU {} ({}) is sm_{}, but the build has kernels for {} only: "
                              "rebuild with -DCMAKE_CUDA_ARCHITECTURES={}",
                              g.index, g.name, arch, r.cuda_architectures, arch));
    }
  }
  if (r.shm_bytes >= 0 && r.shm_bytes < (int64_t{512} << 20)) {
    p.push_back(fmt::format("/dev/shm is {:.0f} MB (below 512 MB): NCCL and data loaders can fail "
                            "with bus errors; in Docker start the container with --shm-size=8g "
                            "(or --ipc=host)",
                            r.shm_bytes / 1e6));
  }
  if (r.memlock_limit >= 0 && r.memlock_limit < (int64_t{1} << 30)) {
    p.push_back(fmt::format("the locked-memory limit (ulimit -l) is {} KiB: NCCL over InfiniBand or "
                            "RoCE registers memory against it and fails across machines; raise it "
                            "(ulimit -l unlimited, or memlock in /etc/security/limits.conf; in "
                            "Docker --ulimit memlock=-1)",
                            r.memlock_limit / 1024));
  }
  if (r.transparent_hugepages == "never") {
    p.push_back("transparent huge pages are off (never): pinning large offload buffers is several "
                "times slower; echo madvise > /sys/kernel/mm/transparent_hugepage/enabled");
  }
  if (r.mem_total > 0 && r.mem_available < r.mem_total / 10) {
    p.push_back(fmt::format("only {} of {} host memory is available: offloaded runs may be "
                            "refused or swap",
                            gib(r.mem_available), gib(r.mem_total)));
  }
  if (std::find(r.launchers_found.begin(), r.launchers_found.end(), "ssh") ==
      r.launchers_found.end()) {
    p.push_back("ssh is not installed: jobs across machines need it (apt-get install "
                "openssh-client), or use --launcher slurm/openmpi");
  }
  return p;
}

std::string report_text(const Report& r) {
  std::string o;
  auto line = [&](const std::string& k, const std::string& v) {
    o += fmt::format("{:<22} {}\n", k, v);
  };
  o += "ZeroTrain\n";
  line("  version", r.version);
  line("  build", fmt::format("{}, {}", r.build_type.empty() ? "default" : r.build_type, r.compiler));
  line("  CUDA", r.cuda_built ? fmt::format("built for sm_{}", r.cuda_architectures) : "not built");
  o += "GPUs\n";
  line("  NVIDIA driver", r.nvidia_driver.empty() ? "-" : r.nvidia_driver);
  line("  CUDA driver/runtime", fmt::format("{} / {} (toolkit {})", cuda_version_text(r.cuda_driver),
                                            cuda_version_text(r.cuda_runtime),
                                            cuda_version_text(r.cuda_toolkit)));
  line("  cuBLAS", r.cublas > 0 ? fmt::format("{}.{}.{}", r.cublas / 10000, r.cublas / 100 % 100,
                                              r.cublas % 100)
                                : "-");
  line("  NCCL", r.nccl > 0 ? fmt::format("{}.{}.{}", r.nccl / 10000, r.nccl / 100 % 100,
                                          r.nccl % 100)
                            : "-");
  line("  CUDA_VISIBLE_DEVICES", r.cuda_visible_devices);
  if (r.gpus.empty()) line("  devices", "none visible");
  for (const ReportGpu& g : r.gpus) {
    line(fmt::format("  cuda:{}", g.index),
         fmt::format("{}, {}, sm_{}", g.name, gib(g.memory_bytes), g.capability));
  }
  o += "CPU\n";
  line("  model", r.cpu_model.empty() ? "-" : r.cpu_model);
  line("  threads", fmt::format("{} (NUMA nodes: {})", r.cpus, r.numa_nodes));
  line("  CPU Adam clone", r.simd);
  line("  OpenBLAS", fmt::format("{} ({} threads)", r.openblas_config, r.openblas_threads));
  line("  Gloo", r.gloo);
  o += "Memory\n";
  line("  host", fmt::format("{} total, {} available", gib(r.mem_total), gib(r.mem_available)));
  line("  ulimit -l", r.memlock_limit < 0 ? "unlimited" : fmt::format("{} KiB", r.memlock_limit / 1024));
  line("  huge pages", fmt::format("transparent: {}; reserved: {}",
                                   r.transparent_hugepages.empty() ? "-" : r.transparent_hugepages,
                                   r.hugepages_total));
  line("  /dev/shm", r.shm_bytes < 0 ? "absent" : gib(r.shm_bytes));
  o += "Network and launchers\n";
  for (const std::string& i : r.interfaces) line("  interface", i);
  line("  found", r.launchers_found.empty() ? "-" : fmt::format("{}", fmt::join(r.launchers_found, " ")));
  line("  missing", r.launchers_missing.empty() ? "-" : fmt::format("{}", fmt::join(r.launchers_missing, " ")));
  const auto problems = report_problems(r);
  o += problems.empty() ? "No problems found.\n" : fmt::format("Problems ({}):\n", problems.size());
  for (const std::string& p : problems) o += "  - " + p + "\n";
  return o;
}

nlohmann::json report_json(const Report& r) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const ReportGpu& g : r.gpus) {
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory_bytes},
                    {"capability", g.capability}});
  }
  return {{"version", r.version},
          {"build_type", r.build_type},
          {"compiler", r.compiler},
          {"cuda_built", r.cuda_built},
          {"cuda_architectures", r.cuda_architectures},
          {"cuda_driver", r.cuda_driver},
          {"cuda_runtime", r.cuda_runtime},
          {"cuda_toolkit", r.cuda_toolkit},
          {"cublas", r.cublas},
          {"nccl", r.nccl},
          {"nvidia_driver", r.nvidia_driver},
          {"cuda_visible_devices", r.cuda_visible_devices},
          {"gpus", gpus},
          {"cpu_model", r.cpu_model},
          {"cpus", r.cpus},
          {"numa_nodes", r.numa_nodes},
          {"simd", r.simd},
          {"openblas", r.openblas_config},
          {"openblas_threads", r.openblas_threads},
          {"gloo", r.gloo},
          {"mem_total_bytes", r.mem_total},
          {"mem_available_bytes", r.mem_available},
          {"memlock_limit_bytes", r.memlock_limit},
          {"shm_bytes", r.shm_bytes},
          {"transparent_hugepages", r.transparent_hugepages},
          {"hugepages_total", r.hugepages_total},
          {"interfaces", r.interfaces},
          {"launchers_found", r.launchers_found},
          {"launchers_missing", r.launchers_missing},
          {"problems", report_problems(r)}};
}

}  // namespace zt::tools
