// --include/--exclude against the behaviour DeepSpeed documents and tests
// (tests/unit/launcher/test_run.py: test_parser_local, test_parser_multinode, test_parser_errors,
// test_parser_mutual_exclusive) and the grammar of reference §5.
#include "zt/launcher/resource_filter.h"

#include <gtest/gtest.h>

#include <string>

namespace zt::launcher {
namespace {

Resources filter_ok(const Resources& pool, const char* include, const char* exclude) {
  Result<Resources> r = resources_filter(pool, include, exclude);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? *r : Resources{};
}

std::string filter_error(const Resources& pool, const char* include, const char* exclude) {
  Result<Resources> r = resources_filter(pool, include, exclude);
  EXPECT_FALSE(r.is_ok()) << "include='" << include << "' exclude='" << exclude << "'";
  return r.is_ok() ? "" : r.status().message();
}

const Resources kOne = {{"worker-0", {0, 1, 2, 3}}};
const Resources kTwo = {{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1, 2, 3}}};

TEST(LauncherResourceFilter, NoFilterIsThePool) {
  EXPECT_EQ(filter_ok(kTwo, "", ""), kTwo);
}

TEST(LauncherResourceFilter, OneNode) {
  EXPECT_EQ(filter_ok(kOne, "", "worker-0:1"), (Resources{{"worker-0", {0, 2, 3}}}));
  EXPECT_EQ(filter_ok(kOne, "", "worker-0:1,2"), (Resources{{"worker-0", {0, 3}}}));
  EXPECT_EQ(filter_ok(kOne, "worker-0:1", ""), (Resources{{"worker-0", {1}}}));
  EXPECT_EQ(filter_ok(kOne, "worker-0:1,1", ""), (Resources{{"worker-0", {1}}}));
  EXPECT_EQ(filter_ok(kOne, "worker-0:1@worker-0:0,1", ""), (Resources{{"worker-0", {0, 1}}}));
  EXPECT_EQ(filter_ok(kOne, "worker-0", ""), kOne);  // a bare name means every slot
  EXPECT_EQ(filter_ok(kOne, "", "worker-0"), Resources{});
  EXPECT_EQ(filter_ok(kOne, "", "worker-0:0,1,2,3"), Resources{});
  EXPECT_EQ(filter_ok(kOne, "worker-0:3,0", ""), (Resources{{"worker-0", {0, 3}}}));  // sorted
}

TEST(LauncherResourceFilter, MultiNodeKeepsPoolOrder) {
  EXPECT_EQ(filter_ok(kTwo, "worker-1:0,3", ""), (Resources{{"worker-1", {0, 3}}}));
  EXPECT_EQ(filter_ok(kTwo, "", "worker-1"), (Resources{{"worker-0", {0, 1, 2, 3}}}));
  EXPECT_EQ(filter_ok(kTwo, "", "worker-0:0,1@worker-1:3"),
            (Resources{{"worker-0", {2, 3}}, {"worker-1", {0, 1, 2}}}));
  // Named in the other order, still ranked in pool (hostfile) order.
  EXPECT_EQ(filter_ok(kTwo, "worker-1:2@worker-0:1", ""),
            (Resources{{"worker-0", {1}}, {"worker-1", {2}}}));
}

TEST(LauncherResourceFilter, IncludeSlotsOfLocalhost) {
  Resources pool = {{"localhost", {0, 1, 2, 3}}};
  EXPECT_EQ(filter_ok(pool, "localhost:0,2", ""), (Resources{{"localhost", {0, 2}}}));
}

TEST(LauncherResourceFilter, UnknownHostOrSlotIsAnError) {
  EXPECT_NE(filter_error(kTwo, "jeff", "").find("Hostname 'jeff' not found in hostfile"),
            std::string::npos);
  EXPECT_NE(filter_error(kTwo, "", "jeff").find("Hostname 'jeff' not found"), std::string::npos);
  EXPECT_NE(filter_error(kTwo, "worker-1:4", "").find("No slot '4' specified on host 'worker-1'"),
            std::string::npos);
  EXPECT_NE(filter_error(kTwo, "", "worker-1:4").find("No slot '4'"), std::string::npos);
  // A stray number between '@' is a host name that does not exist.
  EXPECT_NE(filter_error(kTwo, "", "worker-1@worker-0:1@5").find("Hostname '5' not found"),
            std::string::npos);
}

TEST(LauncherResourceFilter, TrailingAtNamesAnEmptyHost) {
  // "localhost:0,2@" splits into "localhost:0,2" and "": DeepSpeed rejects the empty host name.
  Resources pool = {{"localhost", {0, 1, 2, 3}}};
  EXPECT_NE(filter_error(pool, "localhost:0,2@", "").find("Hostname '' not found"),
            std::string::npos);
}

TEST(LauncherResourceFilter, BadSlotSyntax) {
  Resources pool = {{"localhost", {0, 1}}};
  for (const char* bad : {"localhost:", "localhost:0,", "localhost:a", "localhost:-1",
                          "localhost:1:2", "localhost:0, 1"}) {
    std::string m = filter_error(pool, bad, "");
    EXPECT_NE(m.find("--include"), std::string::npos) << bad << ": " << m;
  }
}

TEST(LauncherResourceFilter, IncludeAndExcludeAreExclusive) {
  EXPECT_NE(filter_error({}, "A", "B").find("include_str and exclude_str are mutually exclusive"),
            std::string::npos);
}

TEST(LauncherResourceFilter, NodeSpecListMergesHosts) {
  Result<Resources> r = node_spec_list_parse("a:3,1@b@a:1,0", "--include");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r, (Resources{{"a", {0, 1, 3}}, {"b", {}}}));
}

TEST(LauncherResourceFilter, SlotCount) {
  EXPECT_EQ(resources_slot_count(kTwo), 8);
  EXPECT_EQ(resources_slot_count({}), 0);
}

}  // namespace
}  // namespace zt::launcher
