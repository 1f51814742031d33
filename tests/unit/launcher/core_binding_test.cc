// Core lists and their split among ranks, against DeepSpeed utils/numa.py: parse_range_list's
// grammar and errors, and get_numactl_cmd's split (len // ranks cores each, rank r the r-th run).
#include "zt/launcher/core_binding.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <string>

namespace zt::launcher {
namespace {

TEST(LauncherCoreBinding, ParseList) {
  Result<std::vector<int>> r = core_list_parse("1,3-5,7");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r, (std::vector<int>{1, 3, 4, 5, 7}));
  EXPECT_EQ(*core_list_parse("0"), (std::vector<int>{0}));
  EXPECT_EQ(*core_list_parse("2-2"), (std::vector<int>{2}));
}

TEST(LauncherCoreBinding, ParseErrors) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c :
       {Case{"5-3", "range end must larger than or equal to start"},
        Case{"1,1", "must not overlap"}, Case{"3,1", "ascend order"},
        Case{"1-3,2", "must not overlap"}, Case{"a", "bad range: 'a'"}, Case{"", "bad range"},
        Case{"1, 2", "bad range: ' 2'"}, Case{"1-2-3", "bad range"}, Case{"999999", "beyond"}}) {
    Result<std::vector<int>> r = core_list_parse(c.text);
    ASSERT_FALSE(r.is_ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos)
        << c.text << ": " << r.status().message();
  }
}

TEST(LauncherCoreBinding, SplitEvenlyAndLeavesTheRemainderUnused) {
  Result<std::vector<std::vector<int>>> r = cores_split({1, 3, 4, 5, 7}, 2);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, (std::vector<std::vector<int>>{{1, 3}, {4, 5}}));
  Result<std::vector<std::vector<int>>> one = cores_split({0, 1, 2, 3, 4, 5, 6, 7}, 3);
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(*one, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}}));
}

TEST(LauncherCoreBinding, FewerCoresThanRanksIsAnError) {
  Result<std::vector<std::vector<int>>> r = cores_split({0}, 2);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("At least one core needs to be assigned to each rank"),
            std::string::npos);
}

TEST(LauncherCoreBinding, PhysicalCoresAreAllowedAndDistinct) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> cores = machine_physical_cores();
  ASSERT_FALSE(cores.empty());
  EXPECT_LE(static_cast<int>(cores.size()), CPU_COUNT(&allowed));
  EXPECT_TRUE(std::is_sorted(cores.begin(), cores.end()));
  EXPECT_EQ(std::adjacent_find(cores.begin(), cores.end()), cores.end());
  for (int c : cores) EXPECT_TRUE(CPU_ISSET(c, &allowed)) << c;
}

}  // namespace
}  // namespace zt::launcher
