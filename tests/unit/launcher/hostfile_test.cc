// Hostfile parsing against DeepSpeed's documented grammar (reference §5) and the cases of
// DeepSpeed's own tests/unit/launcher/test_run.py (test_hostfile_good / test_hostfiles_bad).
#include "zt/launcher/hostfile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace zt::launcher {
namespace {

std::vector<int> range(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

TEST(LauncherHostfile, GoodWithBlankLinesAndComments) {
  const char* text = R"(
    worker-1 slots=2
    worker-2 slots=2

    localhost slots=1
    123.23.12.10 slots=2

    #worker-1 slots=3
    # this is a comment

    )";
  Result<Resources> r = hostfile_parse(text, "test");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  Resources expected = {{"worker-1", range(2)},
                        {"worker-2", range(2)},
                        {"localhost", range(1)},
                        {"123.23.12.10", range(2)}};
  EXPECT_EQ(*r, expected);  // file order is rank order
}

TEST(LauncherHostfile, TrailingTextAfterSlotsIsIgnoredAsDeepSpeedsRegexDoes) {
  Result<Resources> r = hostfile_parse("node slots=4 max_slots=8\r\n\tother\tslots=3\n", "t");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r, (Resources{{"node", range(4)}, {"other", range(3)}}));
}

TEST(LauncherHostfile, ZeroSlotsIsAHostWithoutSlots) {
  Result<Resources> r = hostfile_parse("a slots=0\nb slots=1\n", "t");
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE((*r)[0].slots.empty());
}

TEST(LauncherHostfile, BadEntriesQuoteTheLine) {
  for (const char* text : {"this is bad slots=1\n", "missingslots\n", "host slots=\n",
                           "host slots=-1\n", "host slots =2\n", "host slot=2\n",
                           "worker-1 slots=2\nthis is bad slots=1\nworker-2 slots=4\n"}) {
    Result<Resources> r = hostfile_parse(text, "/etc/hosts.ds");
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("Hostfile contains a bad entry: "), std::string::npos) << m;
    EXPECT_NE(m.find("/etc/hosts.ds"), std::string::npos) << m;
  }
  Result<Resources> r = hostfile_parse("ok slots=1\n\n  bad line  \n", "f");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("bad entry: bad line,"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("line 3"), std::string::npos) << r.status().message();
}

TEST(LauncherHostfile, DuplicateHostIsAnError) {
  Result<Resources> r =
      hostfile_parse("worker-1 slots=2\nworker-2 slots=1\nworker-1 slots=1\n", "f");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("Hostfile contains multiple entries for worker-1"),
            std::string::npos)
      << r.status().message();
}

TEST(LauncherHostfile, EmptyOrOnlyCommentsIsAnError) {
  for (const char* text : {"", "\n   \n", "# a\n#b slots=2\n"}) {
    Result<Resources> r = hostfile_parse(text, "f");
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_NE(r.status().message().find("Hostfile is empty or not formatted correctly"),
              std::string::npos);
  }
}

TEST(LauncherHostfile, AbsurdSlotCountIsAnError) {
  Result<Resources> r = hostfile_parse("h slots=99999999999999999999\n", "f");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("more than"), std::string::npos);
}

TEST(LauncherHostfile, ReadMissingFileIsNotFound) {
  Result<Resources> r = hostfile_read("/nonexistent/zt/hostfile");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/zt/hostfile"), std::string::npos);
}

TEST(LauncherHostfile, ReadFile) {
  char path[] = "/tmp/zt_hostfile_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  { std::ofstream(path) << "localhost slots=3\n"; }
  Result<Resources> r = hostfile_read(path);
  unlink(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(*r, (Resources{{"localhost", range(3)}}));
}

}  // namespace
}  // namespace zt::launcher
