#include "zt/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace zt {
namespace fs = std::filesystem;

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message (maybe not in buf).
  return ::strerror_r(err, buf, sizeof buf);
}

std::string errno_text() {
  return errno_text(errno);
}

namespace {

std::string parent_of(const std::string& path) {
  fs::path p = fs::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

const char* file_type_name(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISREG(m)) return "a regular file";
  return "not a regular file";
}

}  // namespace

Result<OutputPath> output_path_resolve(const std::string& path, std::string_view what) {
  if (path.empty()) return invalid_argument("the {} path is empty", what);
  std::string cur = path;
  // Follow the chain of links by hand: a dangling link resolves to the path it names, which is
  // then created (std::filesystem::canonical would fail on it).
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(cur.c_str(), &st) != 0) {
      if (errno == ENOENT) return OutputPath{.target = cur, .in_place = false};
      if (errno == ENOTDIR) {
        return invalid_argument("cannot write {} '{}': a part of the path is not a folder", what,
                                path);
      }
      return io_error("cannot write {} '{}': {}", what, path, errno_text());
    }
    if (S_ISLNK(st.st_mode)) {
      if (hops >= 40) {
        return invalid_argument("cannot write {} '{}': too many levels of symbolic links", what,
                                path);
      }
      std::string link(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
      const ssize_t n = ::readlink(cur.c_str(), link.data(), link.size());
      if (n < 0) return io_error("cannot read the link '{}': {}", cur, errno_text());
      link.resize(static_cast<size_t>(n));
      cur = fs::path(link).is_absolute() ? link : (fs::path(parent_of(cur)) / link).string();
      continue;
    }
    if (S_ISREG(st.st_mode)) return OutputPath{.target = cur, .in_place = false};
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      return OutputPath{.target = cur, .in_place = true};
    }
    const std::string via = cur == path ? "" : fmt::format(" (the link leads to '{}')", cur);
    return invalid_argument("cannot write {} '{}': it is {}{}; name a regular file", what, path,
                            file_type_name(st.st_mode), via);
  }
}

Result<OutputFile> OutputFile::create(const std::string& path, const OutputOptions& options) {
  ZT_ASSIGN_OR_RETURN(OutputPath where, output_path_resolve(path, options.what));
  OutputFile f;
  f.path_ = path;
  f.target_ = where.target;
  f.what_ = std::string(options.what);
  if (!where.in_place) {
    const std::string parent = parent_of(where.target);
    std::error_code ec;
    if (options.parents == ParentFolders::kCreate) {
      fs::create_directories(parent, ec);
      if (ec) {
        return io_error("cannot write {} '{}': cannot create the folder '{}': {}", options.what,
                        path, parent, ec.message());
      }
    } else if (!fs::is_directory(parent, ec)) {
      return not_found("cannot write {} '{}': the folder '{}' does not exist", options.what, path,
                       parent);
    }
  }
  if (where.in_place || options.mode == OutputMode::kStream) {
    // O_NONBLOCK only for the open itself: a FIFO with no reader would otherwise block here
    // forever; opened, it is switched back to blocking writes.
    const int flags = O_WRONLY | O_CLOEXEC | (where.in_place ? O_NONBLOCK : O_CREAT | O_TRUNC);
    f.fd_ = ::open(f.target_.c_str(), flags, options.permissions);
    if (f.fd_ < 0) {
      if (errno == ENXIO) {
        return unavailable("cannot write {} '{}': it is a FIFO with no reader", options.what,
                           path);
      }
      return io_error("cannot write {} '{}': {}", options.what, path, errno_text());
    }
    if (where.in_place) {
      const int fl = ::fcntl(f.fd_, F_GETFL);
      if (fl >= 0) (void)::fcntl(f.fd_, F_SETFL, fl & ~O_NONBLOCK);
    }
    return f;
  }
  // A unique temporary beside the target (the same filesystem, so the rename is atomic). O_EXCL
  // with the pid and a counter keeps concurrent writers (threads, ranks) apart; the leading dot
  // keeps it out of listings and globs.
  static std::atomic<uint64_t> counter{0};
  const fs::path t(f.target_);
  f.temp_ = (t.parent_path() / fmt::format(".{}.tmp.{}.{}", t.filename().string(), ::getpid(),
                                           counter.fetch_add(1)))
                .string();
  f.fd_ = ::open(f.temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, options.permissions);
  if (f.fd_ < 0) {
    return io_error("cannot write {} '{}': cannot create a file in '{}': {}", options.what, path,
                    parent_of(f.target_), errno_text());
  }
  f.rename_ = true;
  return f;
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      target_(std::move(other.target_)),
      temp_(std::move(other.temp_)),
      what_(std::move(other.what_)),
      fd_(std::exchange(other.fd_, -1)),
      rename_(other.rename_),
      bytes_(other.bytes_) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    abandon();
    path_ = std::move(other.path_);
    target_ = std::move(other.target_);
    temp_ = std::move(other.temp_);
    what_ = std::move(other.what_);
    fd_ = std::exchange(other.fd_, -1);
    rename_ = other.rename_;
    bytes_ = other.bytes_;
  }
  return *this;
}

OutputFile::~OutputFile() {
  abandon();
}

void OutputFile::abandon() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  if (rename_) ::unlink(temp_.c_str());
}

Status OutputFile::fail(Status s) {
  abandon();
  return s;
}

Status OutputFile::write(const void* data, size_t n) {
  return write_loop(data, n, -1);
}

Status OutputFile::write_at(const void* data, size_t n, int64_t offset) {
  return write_loop(data, n, offset);
}

// Writes all n bytes, at the file position (offset < 0) or at `offset`, resuming after partial
// writes and EINTR.
Status OutputFile::write_loop(const void* data, size_t n, int64_t offset) {
  if (fd_ < 0) return io_error("writing {} '{}': the file was already closed", what_, path_);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    const ssize_t w = offset < 0 ? ::write(fd_, p, chunk) : ::pwrite(fd_, p, chunk, offset);
    if (w < 0) {
      if (errno == EINTR) continue;
      return fail(io_error("writing {} '{}': {}", what_, path_, errno_text()));
    }
    if (w == 0) return fail(io_error("writing {} '{}': the device took no bytes", what_, path_));
    p += w;
    n -= static_cast<size_t>(w);
    if (offset < 0) {
      bytes_ += w;
    } else {
      offset += w;
    }
  }
  return Status::ok();
}

Status OutputFile::sync() {
  if (fd_ < 0) return io_error("syncing {} '{}': the file was already closed", what_, path_);
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) {
    return fail(io_error("writing {} '{}': {}", what_, path_, errno_text()));
  }
  return Status::ok();
}

Status OutputFile::commit() {
  if (fd_ < 0) return io_error("closing {} '{}': the file was already closed", what_, path_);
  // EINVAL/EROFS: a device or pipe that cannot sync; the data went to it already.
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) {
    return fail(io_error("writing {} '{}': {}", what_, path_, errno_text()));
  }
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    const std::string err = errno_text();
    if (rename_) ::unlink(temp_.c_str());
    return io_error("writing {} '{}': {}", what_, path_, err);
  }
  if (!rename_) return Status::ok();
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(temp_.c_str());
    return io_error("writing {} '{}': renaming the finished file into place: {}", what_, path_,
                    err);
  }
  return folder_sync(parent_of(target_));
}

Status file_write_atomic(const std::string& path, std::string_view bytes, std::string_view what) {
  ZT_ASSIGN_OR_RETURN(OutputFile f, OutputFile::create(path, {.what = what}));
  ZT_RETURN_IF_ERROR(f.write(bytes));
  return f.commit();
}

Status folder_sync(const std::string& folder) {
  const int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return io_error("syncing the folder '{}': {}", folder, errno_text());
  Status s;
  if (::fsync(dfd) != 0 && errno != EINVAL) {
    s = io_error("syncing the folder '{}': {}", folder, errno_text());
  }
  ::close(dfd);
  return s;
}

Status input_file_check(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found("{} '{}' does not exist", what, path);
    if (errno == EACCES) {
      return io_error("{} '{}': permission denied (a folder on the path is not searchable)", what,
                      path);
    }
    return io_error("{} '{}': {}", what, path, errno_text());
  }
  if (S_ISREG(st.st_mode)) return Status::ok();
  return invalid_argument("{} '{}' is {}, not a regular file; name a file", what, path,
                          file_type_name(st.st_mode));
}

Status file_read_at(int fd, void* dst, size_t n, int64_t offset, const std::string& path,
                    std::string_view what) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t{1} << 30), offset);
    if (r < 0) {
      if (errno == EINTR) continue;
      return io_error("reading {} '{}': {}", what, path, errno_text());
    }
    if (r == 0) {
      return io_error("reading {} '{}': the file ends early (truncated?); it cannot be used",
                      what, path);
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += r;
  }
  return Status::ok();
}

Result<std::string> file_read_all(const std::string& path, std::string_view what,
                                  int64_t max_bytes) {
  ZT_RETURN_IF_ERROR(input_file_check(path, what));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot read {} '{}': {}", what, path, errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string err = errno_text();
    ::close(fd);
    return io_error("cannot read {} '{}': {}", what, path, err);
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return invalid_argument("{} '{}' is {} bytes, more than the {} this reader accepts", what,
                            path, static_cast<int64_t>(st.st_size), max_bytes);
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      const std::string err = errno_text();
      ::close(fd);
      return io_error("reading {} '{}': {}", what, path, err);
    }
    if (r == 0) break;  // shrank while reading
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace zt
