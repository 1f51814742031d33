// core/aio.h: every backend moves exactly the bytes that plain pwrite/pread (the oracle) see, with
// many requests in flight and waited for out of order; failures (a full disk at create, a size
// limit mid-run, a file that ends early) are one message naming the file; nvme_path_check names
// the folder and what to change; misuse (misaligned buffers) is an assertion.
#include "zt/core/aio.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "common/test_util.h"

namespace zt::aio {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;

std::vector<char> random_bytes(int64_t n, uint64_t seed) {
  std::vector<char> v(static_cast<size_t>(n));
  std::mt19937_64 g(seed);
  for (size_t i = 0; i < v.size(); i += 8) {
    const uint64_t x = g();
    std::memcpy(v.data() + i, &x, std::min<size_t>(8, v.size() - i));
  }
  return v;
}

// The oracle: the file through the page cache with plain pread/pwrite.
std::vector<char> oracle_read(const std::string& path, int64_t n, int64_t offset) {
  std::vector<char> v(static_cast<size_t>(n));
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  int64_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, v.data() + got, static_cast<size_t>(n - got), offset + got);
    if (r <= 0) break;
    got += r;
  }
  ::close(fd);
  EXPECT_EQ(got, n) << "oracle read of " << path;
  return v;
}

void oracle_write(const std::string& path, const std::vector<char>& data, int64_t offset) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), offset), static_cast<ssize_t>(data.size()));
  ::close(fd);
}

// A forced backend that cannot start here (io_uring forbidden by seccomp, say) skips the test.
#define CREATE_OR_SKIP(var, path, bytes, options)                                          \
  auto var##_result = SwapFile::create(path, bytes, options, "test swap file");            \
  if (!var##_result.is_ok() && var##_result.status().code() == StatusCode::kUnavailable) { \
    GTEST_SKIP() << var##_result.status().message();                                       \
  }                                                                                        \
  ASSERT_TRUE(var##_result.is_ok()) << var##_result.status().message();                    \
  std::unique_ptr<SwapFile> var = std::move(var##_result).value()

// Requests of several sizes (one 4 KiB page, exactly one block, several blocks and a tail)
// laid end to end, with block_size 64 KiB: [offset, size] pairs covering [0, total).
struct Piece {
  int64_t offset, n;
};
std::vector<Piece> pieces_of(const std::vector<int64_t>& sizes) {
  std::vector<Piece> p;
  int64_t at = 0;
  for (int64_t n : sizes) {
    p.push_back({at, n});
    at += n;
  }
  return p;
}
const std::vector<int64_t> kSizes = {
    4 * kKiB, 64 * kKiB, 3 * 64 * kKiB + 4 * kKiB, 12 * kKiB, 5 * 64 * kKiB, 60 * kKiB, 4 * kKiB};
int64_t total_of(const std::vector<int64_t>& sizes) {
  int64_t t = 0;
  for (int64_t n : sizes) t += n;
  return t;
}

struct Shape {
  int queue_depth;
  int thread_count;
  bool single_submit;
  bool overlap_events;
};

class AioBackend : public ::testing::TestWithParam<Backend> {
 protected:
  Options options(const Shape& s) const {
    return {.block_size = 64 * kKiB,
            .queue_depth = s.queue_depth,
            .thread_count = s.thread_count,
            .single_submit = s.single_submit,
            .overlap_events = s.overlap_events,
            .backend = GetParam()};
  }
};

TEST_P(AioBackend, WritesAndReadsTheBytesPlainIoSees) {
  testing::TempDir dir("zt_aio");
  const int64_t total = total_of(kSizes);
  const std::vector<Piece> pieces = pieces_of(kSizes);
  const Shape shapes[] = {{1, 1, false, true}, {8, 1, false, true}, {8, 3, true, false}};
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(::testing::Message()
                 << "queue depth " << shape.queue_depth << ", threads " << shape.thread_count);
    const std::string path = dir.file("swap.bin");
    CREATE_OR_SKIP(file, path, total, options(shape));
    EXPECT_EQ(file->backend(), GetParam());
    EXPECT_EQ(file->size(), total);
    // Written with write_async, all in flight at once, read back with plain pread.
    const std::vector<char> data = random_bytes(total, 1 + shape.queue_depth);
    AlignedBuffer src(total);
    std::memcpy(src.data(), data.data(), data.size());
    std::vector<Ticket> tickets;
    for (const Piece& p : pieces) {
      tickets.push_back(
          file->write_async(static_cast<char*>(src.data()) + p.offset, p.n, p.offset));
    }
    for (Ticket t : tickets) ASSERT_TRUE(file->wait(t).is_ok());
    EXPECT_TRUE(oracle_read(path, total, 0) == data) << file->backend_note();

    // Written with plain pwrite, read back with read_async.
    const std::vector<char> other = random_bytes(total, 100 + shape.queue_depth);
    oracle_write(path, other, 0);
    AlignedBuffer dst(total);
    std::memset(dst.data(), 0, static_cast<size_t>(total));
    for (const Piece& p : pieces) {
      file->read_async(static_cast<char*>(dst.data()) + p.offset, p.n, p.offset);
    }
    ASSERT_TRUE(file->wait_all().is_ok());
    EXPECT_EQ(std::memcmp(dst.data(), other.data(), other.size()), 0) << file->backend_note();
  }
}

TEST_P(AioBackend, InterleavedReadsAndWritesWaitedOutOfOrder) {
  testing::TempDir dir("zt_aio");
  const std::string path = dir.file("swap.bin");
  const int64_t half = 2 * kMiB;
  CREATE_OR_SKIP(file, path, 2 * half, options({8, 2, false, true}));
  // Region A [0, half) holds known bytes; region B [half, 2 half) is written while A is read.
  const std::vector<char> a = random_bytes(half, 7), b = random_bytes(half, 8);
  oracle_write(path, a, 0);
  AlignedBuffer src(half), dst(half);
  std::memcpy(src.data(), b.data(), b.size());
  std::memset(dst.data(), 0, static_cast<size_t>(half));
  std::vector<int64_t> sizes;
  for (int64_t at = 0, i = 0; at < half; ++i) {
    const int64_t n = std::min<int64_t>(half - at, (1 + i % 5) * 20 * kKiB);
    sizes.push_back(n);
    at += n;
  }
  std::vector<Ticket> tickets;
  for (const Piece& p : pieces_of(sizes)) {
    tickets.push_back(
        file->write_async(static_cast<char*>(src.data()) + p.offset, p.n, half + p.offset));
    tickets.push_back(file->read_async(static_cast<char*>(dst.data()) + p.offset, p.n, p.offset));
  }
  // Waited for in an order unlike the submission: reversed, then every other one shuffled.
  std::reverse(tickets.begin(), tickets.end());
  std::shuffle(tickets.begin(), tickets.end(), std::mt19937(3));
  for (Ticket t : tickets) ASSERT_TRUE(file->wait(t).is_ok());
  EXPECT_EQ(std::memcmp(dst.data(), a.data(), a.size()), 0);
  EXPECT_TRUE(oracle_read(path, half, half) == b);
  EXPECT_TRUE(oracle_read(path, half, 0) == a);  // the reads did not disturb A
}

TEST_P(AioBackend, AReadPastTheFileEndFailsAndLaterWaitsFailToo) {
  testing::TempDir dir("zt_aio");
  const std::string path = dir.file("short.bin");
  Options o = options({4, 1, false, true});
  o.reserve = false;  // the file holds only what the oracle writes: 36 KiB
  CREATE_OR_SKIP(file, path, 256 * kKiB, o);
  const std::vector<char> data = random_bytes(36 * kKiB, 5);
  oracle_write(path, data, 0);
  // One 64 KiB block: the kernel returns the 36 KiB there (a partial transfer), the rest is
  // asked for again and finds the end of the file.
  AlignedBuffer buf(256 * kKiB);
  std::memset(buf.data(), 0, 64 * kKiB);
  const Status s = file->wait(file->read_async(buf.data(), 64 * kKiB, 0));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("reading 65536 bytes at offset 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("failed at offset 36864"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ends"), std::string::npos) << s.message();
  EXPECT_EQ(std::memcmp(buf.data(), data.data(), data.size()), 0);  // what was there arrived
  // The file is unusable from now on: a write that would succeed still reports the failure.
  const Status later = file->wait(file->write_async(buf.data(), 4 * kKiB, 0));
  ASSERT_FALSE(later.is_ok());
  EXPECT_NE(later.message().find("earlier failure"), std::string::npos) << later.message();
  EXPECT_FALSE(file->wait_all().is_ok());
}

// The child of ASizeLimitMidRunIsAWriteErrorNamingTheFile: a file size limit below the end of a
// write, SIGXFSZ ignored so the write fails with EFBIG instead of killing the process. Prints
// wait()'s message and exits 0 when it is the failure naming the file, offset and size.
constexpr int64_t kSizeLimit = 288 * kKiB;
[[noreturn]] void write_past_size_limit(const std::string& path, const Options& o) {
  const rlimit lim{kSizeLimit, kSizeLimit};
  ::signal(SIGXFSZ, SIG_IGN);
  if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) std::_Exit(3);
  auto f = SwapFile::create(path, kMiB, o, "test swap file");
  if (!f.is_ok()) {
    std::fprintf(stderr, "create: %s\n", f.status().message().c_str());
    std::_Exit(4);
  }
  // Blocks of 64 KiB: four fit, the fifth [256 KiB, 320 KiB) is cut at the limit (288 KiB),
  // and the rest of it, sent again, fails with EFBIG at the limit.
  AlignedBuffer buf(kMiB);
  std::memset(buf.data(), 0x5a, kMiB);
  const Status s = (*f)->wait((*f)->write_async(buf.data(), 320 * kKiB, 0));
  std::fprintf(stderr, "%s\n", s.message().c_str());
  const bool named = s.message().find(path) != std::string::npos &&
                     s.message().find("327680 bytes at offset 0") != std::string::npos &&
                     s.message().find("failed at offset 294912") != std::string::npos;
  std::_Exit(!s.is_ok() && named ? 0 : 5);
}

TEST_P(AioBackend, ASizeLimitMidRunIsAWriteErrorNamingTheFile) {
  testing::TempDir dir("zt_aio");
  const std::string path = dir.file("limited.bin");
  Options o = options({8, 1, false, true});
  o.reserve = false;
  {
    CREATE_OR_SKIP(probe, path, kMiB, o);  // skips here when the backend cannot start
  }
  // In a child: a file size limit below the end of a write. The write stops at the limit (a
  // partial transfer), the rest fails with EFBIG, and wait() reports it.
  EXPECT_EXIT(write_past_size_limit(path, o), ::testing::ExitedWithCode(0),
              "File too large.*size limit");
  // The bytes below the limit did reach the file (the oracle sees the partial transfer).
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, kSizeLimit);
  const std::vector<char> head = oracle_read(path, kSizeLimit, 0);
  EXPECT_TRUE(std::all_of(head.begin(), head.end(), [](char c) { return c == 0x5a; }));
}

INSTANTIATE_TEST_SUITE_P(Backends, AioBackend,
                         ::testing::Values(Backend::kIoUring, Backend::kLibaio, Backend::kThreads),
                         [](const auto& info) {
                           return std::string(info.param == Backend::kIoUring  ? "IoUring"
                                              : info.param == Backend::kLibaio ? "Libaio"
                                                                               : "Threads");
                         });

TEST(Aio, CreateReservesTheWholeFileAndRemoveDeletesIt) {
  testing::TempDir dir("zt_aio");
  const std::string path = dir.file("reserved.bin");
  struct stat st {};
  {
    auto f = SwapFile::create(path, 8 * kMiB, {.backend = Backend::kThreads}, "test swap file");
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 8 * kMiB);
    // fallocate (not a sparse ftruncate) gave it blocks, unless this filesystem cannot.
    if ((*f)->backend_note().find("cannot fallocate") == std::string::npos) {
      EXPECT_GE(st.st_blocks * 512, 8 * kMiB) << (*f)->backend_note();
    }
  }
  EXPECT_TRUE(fs::exists(path));  // closing keeps the file
  auto again = SwapFile::create(path, 4 * kMiB, {.backend = Backend::kThreads}, "test swap file");
  ASSERT_TRUE(again.is_ok());
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4 * kMiB);  // truncated and reserved anew
  ASSERT_TRUE((*again)->remove().is_ok());
  EXPECT_FALSE(fs::exists(path));
}

TEST(Aio, EnvironmentChoosesTheBackendOfAuto) {
  testing::TempDir dir("zt_aio");
  ::setenv("ZT_AIO_BACKEND", "threads", 1);
  auto f = SwapFile::create(dir.file("a.bin"), kMiB, {}, "test swap file");
  ::setenv("ZT_AIO_BACKEND", "uring", 1);
  auto bad = SwapFile::create(dir.file("b.bin"), kMiB, {}, "test swap file");
  ::unsetenv("ZT_AIO_BACKEND");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->backend(), Backend::kThreads);
  EXPECT_EQ((*f)->backend_note().rfind("threads", 0), 0u) << (*f)->backend_note();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("ZT_AIO_BACKEND='uring'"), std::string::npos);
  // Unset, kAuto picks a real backend and says which.
  auto any = SwapFile::create(dir.file("c.bin"), kMiB, {}, "test swap file");
  ASSERT_TRUE(any.is_ok()) << any.status().message();
  EXPECT_NE((*any)->backend(), Backend::kAuto);
  EXPECT_EQ((*any)->backend_note().rfind(backend_name((*any)->backend()), 0), 0u);
}

TEST(Aio, BadOptionsAreRefusedNamingTheKey) {
  testing::TempDir dir("zt_aio");
  auto f = SwapFile::create(dir.file("a.bin"), kMiB, {.block_size = 1000}, "test swap file");
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("aio.block_size 1000"), std::string::npos);
  auto q = SwapFile::create(dir.file("a.bin"), kMiB, {.queue_depth = 0}, "test swap file");
  ASSERT_FALSE(q.is_ok());
  EXPECT_NE(q.status().message().find("aio.queue_depth 0"), std::string::npos);
}

TEST(Aio, MisalignedUseAsserts) {
  testing::TempDir dir("zt_aio");
  const std::string path = dir.file("a.bin");
  // Each statement opens its own file inside the child, so the parent forks with no threads.
  auto use = [&](int64_t shift, int64_t n, int64_t offset) {
    auto f = SwapFile::create(path, kMiB, {.backend = Backend::kThreads}, "test swap file");
    AlignedBuffer buf(kMiB);
    (*f)->write_async(static_cast<char*>(buf.data()) + shift, n, offset);
  };
  EXPECT_DEATH(use(512, 4096, 0), "aligned to 4096");
  EXPECT_DEATH(use(0, 100, 0), "aligned to 4096");
  EXPECT_DEATH(use(0, 4096, 1000), "aligned to 4096");
  EXPECT_DEATH(use(0, 8192, kMiB - 4096), "beyond the end");
}

TEST(Aio, AlignedBufferIsAlignedAndMoves) {
  AlignedBuffer a(10000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kAlign, 0u);
  EXPECT_EQ(a.size(), 10000);
  void* p = a.data();
  AlignedBuffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move)
  EXPECT_EQ(align_up(1), kAlign);
  EXPECT_EQ(align_up(kAlign), kAlign);
  EXPECT_EQ(align_up(0), 0);
}

// --- nvme_path_check -------------------------------------------------------------------------

constexpr std::string_view kKey = "zero_optimization.offload_optimizer.nvme_path";

bool contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(NvmePathCheck, AMissingFolderIsNamedWithItsKey) {
  testing::TempDir dir("zt_aio");
  const std::string missing = dir.file("not_there");
  const Status s = nvme_path_check(missing, 0, kKey);
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(contains(s, missing)) << s.message();
  EXPECT_TRUE(contains(s, "does not exist")) << s.message();
  EXPECT_TRUE(contains(s, std::string(kKey))) << s.message();
}

TEST(NvmePathCheck, ARegularFileIsNotAFolder) {
  testing::TempDir dir("zt_aio");
  const std::string file = dir.file("plain");
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  const Status s = nvme_path_check(file, 0, kKey);
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(contains(s, file)) << s.message();
  EXPECT_TRUE(contains(s, "not a folder")) << s.message();
}

TEST(NvmePathCheck, AGoodFolderPassesAndKeepsNoProbe) {
  testing::TempDir dir("zt_aio");
  ASSERT_TRUE(nvme_path_check(dir.path().string(), 0, kKey).is_ok());
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(NvmePathCheck, AReadOnlyFolderIsNotWritable) {
  testing::TempDir dir("zt_aio");
  const fs::path ro = dir.path() / "ro";
  fs::create_directory(ro);
  ::chmod(ro.c_str(), 0555);
  // Whether this user can write there anyway (root can): the oracle decides what to expect.
  const std::string attempt = (ro / "x").string();
  const int fd = ::open(attempt.c_str(), O_WRONLY | O_CREAT, 0600);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(attempt.c_str());
    ::chmod(ro.c_str(), 0755);
    GTEST_SKIP() << "this user (root) writes into a mode 0555 folder; the not-writable message "
                    "is checked only as an unprivileged user";
  }
  const Status s = nvme_path_check(ro.string(), 0, kKey);
  ::chmod(ro.c_str(), 0755);
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(contains(s, ro.string())) << s.message();
  EXPECT_TRUE(contains(s, "not writable")) << s.message();
}

TEST(NvmePathCheck, TooLittleFreeSpaceNamesNeededAndFree) {
  testing::TempDir dir("zt_aio");
  const std::string folder = dir.path().string();
  struct statvfs v {};
  ASSERT_EQ(::statvfs(folder.c_str(), &v), 0);
  const int64_t oracle_free = static_cast<int64_t>(v.f_bavail) * static_cast<int64_t>(v.f_frsize);
  auto fb = free_bytes(folder);
  ASSERT_TRUE(fb.is_ok());
  EXPECT_NEAR(static_cast<double>(*fb), static_cast<double>(oracle_free), 1e9);
  const int64_t needed = oracle_free + int64_t{1000} * 1000 * 1000 * 1000;  // 1 TB more
  const Status s = nvme_path_check(folder, needed, kKey);
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(contains(s, folder)) << s.message();
  std::smatch m;
  const std::string msg = s.message();
  ASSERT_TRUE(std::regex_search(msg, m, std::regex("needs ([0-9.]+) GB .* has ([0-9.]+) GB free")))
      << msg;
  EXPECT_NEAR(std::stod(m[1].str()) * 1e9, static_cast<double>(needed), 1e9) << msg;
  EXPECT_NEAR(std::stod(m[2].str()) * 1e9, static_cast<double>(oracle_free), 1e9) << msg;
  EXPECT_TRUE(contains(s, "cpu")) << s.message();
}

// A small tmpfs mounted for the test (root only; Linux 6.6+ for O_DIRECT on tmpfs). Unmounted
// on destruction.
class SmallTmpfs {
 public:
  SmallTmpfs(const std::string& folder, const char* options) : folder_(folder) {
    fs::create_directory(folder_);
    if (::geteuid() != 0) {
      why_ = "not root";
    } else if (::mount("tmpfs", folder_.c_str(), "tmpfs", 0, options) != 0) {
      why_ = std::string("mount -t tmpfs failed: ") + std::strerror(errno);
    } else {
      mounted_ = true;
    }
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(folder_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }

 private:
  std::string folder_, why_;
  bool mounted_ = false;
};

TEST(Aio, AFullDiskIsFoundAtCreate) {
  testing::TempDir dir("zt_aio");
  const std::string folder = dir.file("small");
  SmallTmpfs tmpfs(folder, "size=8m");
  if (!tmpfs.mounted()) GTEST_SKIP() << "cannot mount an 8 MiB tmpfs here: " << tmpfs.why();
  const std::string path = folder + "/big.swp";
  auto f = SwapFile::create(path, 16 * kMiB, {.backend = Backend::kThreads}, "optimizer swap file");
  ASSERT_FALSE(f.is_ok());
  const std::string& msg = f.status().message();
  if (msg.find("does not support O_DIRECT") != std::string::npos) {
    GTEST_SKIP() << "this kernel's tmpfs has no O_DIRECT (Linux < 6.6): " << msg;
  }
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("full"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer swap file"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(path));  // nothing left behind to fill the disk
  // The same folder passes nvme_path_check for what fits and fails for what does not.
  EXPECT_TRUE(nvme_path_check(folder, 4 * kMiB, kKey).is_ok());
  const Status s = nvme_path_check(folder, 16 * kMiB, kKey);
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(contains(s, "needs 0.0168 GB")) << s.message();     // 16 MiB
  EXPECT_TRUE(contains(s, "has 0.0084 GB free")) << s.message();  // 8 MiB, nothing written
}

TEST(NvmePathCheck, AReadOnlyFilesystemIsNotWritable) {
  testing::TempDir dir("zt_aio");
  const std::string folder = dir.file("ro");
  SmallTmpfs tmpfs(folder, "size=1m");
  if (!tmpfs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << tmpfs.why();
  ASSERT_EQ(::mount("tmpfs", folder.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr), 0)
      << std::strerror(errno);
  const Status s = nvme_path_check(folder, 0, kKey);
  ASSERT_FALSE(s.is_ok());
  EXPECT_TRUE(contains(s, folder)) << s.message();
  EXPECT_TRUE(contains(s, "not writable")) << s.message();
}

}  // namespace
}  // namespace zt::aio
