// zt report's problems (tools/report.h) on made-up machines: each known problem is named with
// its fix, and a healthy machine has none; the collected report of this machine is sane.
#include "zt/tools/report.h"

#include <gtest/gtest.h>

namespace zt::tools {
namespace {

Report healthy() {
  Report r;
  r.cuda_built = true;
  r.cuda_architectures = "90";
  r.cuda_driver = r.cuda_toolkit = 13000;
  r.gpus = {{0, "NVIDIA H100", int64_t{80} << 30, 90}};
  r.mem_total = int64_t{256} << 30;
  r.mem_available = int64_t{200} << 30;
  r.memlock_limit = -1;
  r.shm_bytes = int64_t{64} << 30;
  r.transparent_hugepages = "madvise";
  r.launchers_found = {"ssh"};
  return r;
}

bool names(const std::vector<std::string>& problems, const std::string& what) {
  for (const std::string& p : problems) {
    if (p.find(what) != std::string::npos) return true;
  }
  return false;
}

TEST(Report, AHealthyMachineHasNoProblems) { EXPECT_TRUE(report_problems(healthy()).empty()); }

TEST(Report, EachProblemIsNamedWithItsFix) {
  Report r = healthy();
  r.gpus.clear();
  r.shm_bytes = 64 << 20;
  r.memlock_limit = 64 << 10;
  r.transparent_hugepages = "never";
  r.launchers_found.clear();
  const auto p = report_problems(r);
  EXPECT_EQ(p.size(), 5u);
  EXPECT_TRUE(names(p, "no GPU is visible"));
  EXPECT_TRUE(names(p, "/dev/shm is 67 MB") && names(p, "--shm-size"));
  EXPECT_TRUE(names(p, "ulimit -l) is 64 KiB") && names(p, "unlimited"));
  EXPECT_TRUE(names(p, "huge pages are off"));
  EXPECT_TRUE(names(p, "ssh is not installed"));
}

TEST(Report, ABuildWithoutTheGpusArchitectureSaysHowToRebuild) {
  Report r = healthy();
  r.gpus[0].capability = 80;
  r.cuda_driver = 12020;
  const auto p = report_problems(r);
  EXPECT_TRUE(names(p, "-DCMAKE_CUDA_ARCHITECTURES=80"));
  EXPECT_TRUE(names(p, "update the NVIDIA driver"));
}

TEST(Report, ThisMachineIsCollected) {
  const Report r = report_collect();
  EXPECT_FALSE(r.version.empty());
  EXPECT_GT(r.cpus, 0);
  EXPECT_GT(r.mem_total, 0);
  EXPECT_FALSE(r.gloo.empty());
  const auto j = report_json(r);
  EXPECT_TRUE(j.contains("problems"));
  EXPECT_NE(report_text(r).find("ZeroTrain"), std::string::npos);
}

}  // namespace
}  // namespace zt::tools
