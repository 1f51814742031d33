// core/file_io.h: the shared writer never replaces what it must not (a device node, a symlink,
// a folder), reports every failed write with the file's name, and leaves the old file whole when
// a write is abandoned.
#include "zt/core/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "zt/core/json_limits.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(FileIo, AtomicWriteReplacesOnlyAtCommit) {
  testing::TempDir dir;
  const std::string path = dir.file("out.txt");
  ASSERT_TRUE(file_write_atomic(path, "old").is_ok());
  {
    auto f = OutputFile::create(path);
    ASSERT_TRUE(f.is_ok());
    ASSERT_TRUE(f->write("new and longer").is_ok());
    EXPECT_EQ(slurp(path), "old");  // not yet
  }  // abandoned
  EXPECT_EQ(slurp(path), "old");
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.exists() ? 1 : 0;
  EXPECT_EQ(entries, 1u);  // no temporary left behind
  ASSERT_TRUE(file_write_atomic(path, "new").is_ok());
  EXPECT_EQ(slurp(path), "new");
}

TEST(FileIo, ASymlinkStaysALinkAndItsTargetIsWritten) {
  testing::TempDir dir;
  fs::create_directory(dir.path() / "real");
  const std::string target = dir.file("real/data.bin");
  ASSERT_TRUE(file_write_atomic(target, "v1").is_ok());
  fs::create_symlink("real/data.bin", dir.path() / "link.bin");
  ASSERT_TRUE(file_write_atomic(dir.file("link.bin"), "v2").is_ok());
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link.bin"));
  EXPECT_EQ(slurp(target), "v2");
  // A dangling link is created at the place it names.
  fs::create_symlink("real/new.bin", dir.path() / "dangling.bin");
  ASSERT_TRUE(file_write_atomic(dir.file("dangling.bin"), "v3").is_ok());
  EXPECT_TRUE(fs::is_symlink(dir.path() / "dangling.bin"));
  EXPECT_EQ(slurp(dir.file("real/new.bin")), "v3");
}

TEST(FileIo, DevicesAreWrittenInPlaceNeverReplaced) {
  struct stat before {};
  ASSERT_EQ(::stat("/dev/null", &before), 0);
  ASSERT_TRUE(file_write_atomic("/dev/null", "discarded").is_ok());
  struct stat after {};
  ASSERT_EQ(::stat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(before.st_rdev, after.st_rdev);
  EXPECT_EQ(before.st_ino, after.st_ino);
  if (fs::exists("/dev/full")) {
    const Status s = file_write_atomic("/dev/full", "x", "metrics file");
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("metrics file '/dev/full'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("No space left"), std::string::npos) << s.message();
    struct stat full {};
    ASSERT_EQ(::stat("/dev/full", &full), 0);
    EXPECT_TRUE(S_ISCHR(full.st_mode));
  }
}

TEST(FileIo, FoldersAreRefusedAndAFifoWithoutReaderDoesNotBlock) {
  testing::TempDir dir;
  const Status s = file_write_atomic(dir.path().string(), "x", "token file");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("a folder"), std::string::npos) << s.message();
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const Status f = file_write_atomic(fifo, "x");
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.message().find("no reader"), std::string::npos) << f.message();
  // Reading: a FIFO, a folder or a missing file is refused before any open.
  EXPECT_NE(input_file_check(fifo, "token file").message().find("FIFO"), std::string::npos);
  EXPECT_NE(input_file_check(dir.path().string(), "token file").message().find("folder"),
            std::string::npos);
  EXPECT_EQ(input_file_check(dir.file("none"), "token file").code(), StatusCode::kNotFound);
}

TEST(FileIo, StreamsReportAFailedWrite) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  auto f = OutputFile::create("/dev/full", {.mode = OutputMode::kStream, .what = "metrics file"});
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const Status s = f->write(std::string(100, 'x'));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("/dev/full"), std::string::npos);
}

TEST(FileIo, ReadOnlyFolderIsAClearError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes anywhere";
  testing::TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  const Status s = file_write_atomic(dir.file("x"), "x");
  fs::permissions(dir.path(), fs::perms::owner_all);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("Permission denied"), std::string::npos) << s.message();
}

TEST(JsonLimits, DeepNestingIsRefusedShallowPasses) {
  std::string deep(100000, '[');
  const Status s = json_nesting_check(deep, "ds_config.json");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("ds_config.json"), std::string::npos);
  std::string ok = std::string(200, '[') + std::string(200, ']');
  EXPECT_TRUE(json_nesting_check(ok, "x").is_ok());
  // Brackets inside strings do not count, escaped quotes do not end them.
  EXPECT_TRUE(json_nesting_check("{\"a\": \"[[[[\\\"[[[[\"}", "x", 1).is_ok());
  EXPECT_FALSE(json_nesting_check("[[", "x", 1).is_ok());
}

}  // namespace
}  // namespace zt
