// host_memory (core/host_memory.h): the parsing of /proc/meminfo and of the cgroup files, on
// texts written as the kernel documents them (Documentation/filesystems/proc.rst and
// admin-guide/cgroup-v1/memory.rst, cgroup-v2.rst), and the live read on this machine against
// /proc/meminfo read here independently.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "zt/core/host_memory.h"

namespace zt {
namespace {

TEST(HostMemory, MemAvailableIsReadInKibibytes) {
  const std::string meminfo =
      "MemTotal:       24546220 kB\n"
      "MemFree:        23875512 kB\n"
      "MemAvailable:   24368448 kB\n"
      "Buffers:           10240 kB\n";
  EXPECT_EQ(meminfo_available(meminfo), int64_t{24368448} * 1024);
  // Kernels before 3.14 have no MemAvailable line.
  EXPECT_EQ(meminfo_available("MemTotal:  100 kB\nMemFree:  50 kB\n"), std::nullopt);
  EXPECT_EQ(meminfo_available("MemAvailable:   junk kB\n"), std::nullopt);
  EXPECT_EQ(meminfo_available("MemAvailable:   12 MB\n"), std::nullopt);
  EXPECT_EQ(meminfo_available("MemAvailable:   7"), 7);
}

TEST(HostMemory, CgroupLimitNoLimitAndGarbage) {
  EXPECT_EQ(cgroup_limit_value("17179869184\n"), int64_t{17179869184});
  EXPECT_EQ(cgroup_limit_value("max\n"), std::nullopt);                  // v2 no limit
  EXPECT_EQ(cgroup_limit_value("9223372036854771712\n"), std::nullopt);  // v1 no limit
  EXPECT_EQ(cgroup_limit_value(""), std::nullopt);
  EXPECT_EQ(cgroup_limit_value("-1"), std::nullopt);
}

TEST(HostMemory, MemoryCgroupPathPrefersTheV1MemoryController) {
  // A hybrid host: v1 controllers and the v2 unified line.
  const std::string hybrid =
      "9:name=systemd:/\n"
      "4:cpu,memory:/slurm/uid_1000/job_42\n"
      "1:cpuset:/\n"
      "0::/user.slice\n";
  auto p = memory_cgroup_path(hybrid);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->path, "/slurm/uid_1000/job_42");
  EXPECT_FALSE(p->v2);
  // Pure v2.
  p = memory_cgroup_path("0::/system.slice/job.scope\n");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->path, "/system.slice/job.scope");
  EXPECT_TRUE(p->v2);
  // "memorysomething" is not the memory controller.
  EXPECT_EQ(memory_cgroup_path("3:memorystat:/x\n"), std::nullopt);
  EXPECT_EQ(memory_cgroup_path(""), std::nullopt);
}

TEST(HostMemory, AvailableIsCappedByTheGroupsHeadroom) {
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(host_available_bytes(500 * gib, std::nullopt, std::nullopt), 500 * gib);
  EXPECT_EQ(host_available_bytes(500 * gib, 64 * gib, 10 * gib), 54 * gib);
  EXPECT_EQ(host_available_bytes(20 * gib, 64 * gib, 10 * gib), 20 * gib);
  EXPECT_EQ(host_available_bytes(500 * gib, 64 * gib, 70 * gib), 0);  // over its limit
  EXPECT_EQ(host_available_bytes(0, 64 * gib, 10 * gib), 54 * gib);   // no /proc/meminfo
}

// The live read agrees with /proc/meminfo read here, within what other processes may take or
// give back between the two reads, and never exceeds it.
TEST(HostMemory, LiveReadMatchesProcMeminfo) {
  std::ifstream in("/proc/meminfo");
  if (!in) GTEST_SKIP() << "no /proc/meminfo";
  std::string line;
  int64_t kib = -1;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string key;
    s >> key;
    if (key == "MemAvailable:") s >> kib;
  }
  if (kib < 0) GTEST_SKIP() << "no MemAvailable";
  const HostMemory m = host_memory();
  EXPECT_NEAR(static_cast<double>(m.mem_available), kib * 1024.0, 512.0 * 1024 * 1024);
  EXPECT_GT(m.available, 0);
  EXPECT_LE(m.available, m.mem_available);
  if (m.cgroup_limit) {
    EXPECT_LE(m.available, *m.cgroup_limit);
  }
}

}  // namespace
}  // namespace zt
