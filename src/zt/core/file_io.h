// The one way ZeroTrain writes files (token files, checkpoints, exports, metrics, monitors,
// configs), and the checks every reader makes before opening one.
//
// Writing an artifact (OutputMode::kAtomic): the bytes go to a unique temporary beside the
// target; commit() fsyncs it, renames it over the target and fsyncs the folder, so a reader (or a
// crash at any moment) sees the old file or the whole new one, never a part. Every write, sync and
// close is checked, and a failure is one Status naming the file and the reason.
//
// What the path names decides how (output_path_resolve):
//   - a regular file, or nothing yet: written atomically as above;
//   - a symbolic link: followed to its final target (a dangling link to where it points), and
//     the temporary sits beside that target, so the link stays a link;
//   - a character device or a FIFO (/dev/null, /dev/stdout, a pipe): written in place, never
//     renamed over (a rename would replace the device node with a regular file);
//   - a folder, a block device or a socket: refused.
// A stream (OutputMode::kStream: metrics, logs written while training runs) opens the resolved
// target in place, truncated, and is checked the same way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "zt/core/status.h"

namespace zt {

enum class OutputMode : unsigned char {
  kAtomic,  // temporary + rename at commit (regular files)
  kStream,  // the target itself, truncated, written as the program goes
};

enum class ParentFolders : unsigned char { kMustExist, kCreate };

struct OutputOptions {
  OutputMode mode = OutputMode::kAtomic;
  ParentFolders parents = ParentFolders::kCreate;
  std::string_view what = "file";  // how messages name it: "metrics file", "checkpoint shard"
  unsigned permissions = 0644;
};

// What an output path resolves to.
struct OutputPath {
  std::string target;      // the path written (symlinks followed)
  bool in_place = false;   // a character device or FIFO: written directly, never renamed
};
Result<OutputPath> output_path_resolve(const std::string& path, std::string_view what);

class OutputFile {
 public:
  static Result<OutputFile> create(const std::string& path, const OutputOptions& options = {});
  OutputFile() = default;  // closed; create() opens one
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  // Without commit(): closes and removes the temporary (the target is untouched).
  ~OutputFile();

  Status write(const void* data, size_t n);
  Status write(std::string_view text) { return write(text.data(), text.size()); }
  // Writes at an offset of the file (a header patched at the end); atomic, seekable files only.
  Status write_at(const void* data, size_t n, int64_t offset);
  // Forces what was written to the disk (fsync); streams call it where durability matters.
  Status sync();
  // Atomic: fsync, close, rename over the target, fsync the folder. Stream: fsync (a device
  // that cannot sync is fine), close. The file is done either way; a failure is reported once.
  Status commit();
  // Drops the file: the temporary is removed (atomic); a stream is closed as it is.
  void abandon();

  const std::string& path() const { return path_; }  // as the user named it
  const std::string& target() const { return target_; }
  int64_t bytes_written() const { return bytes_; }
  bool is_open() const { return fd_ >= 0; }

 private:
  Status fail(Status s);  // abandons, then returns s
  Status write_loop(const void* data, size_t n, int64_t offset);

  std::string path_, target_, temp_;
  std::string what_;
  int fd_ = -1;
  bool rename_ = false;  // atomic write through temp_
  int64_t bytes_ = 0;
};

// The whole of `bytes` to `path`, atomically (or in place for a device or FIFO).
Status file_write_atomic(const std::string& path, std::string_view bytes,
                         std::string_view what = "file");

// fsyncs a folder so that renames and new names in it survive a crash; folders on filesystems
// that refuse fsync (EINVAL) count as synced.
Status folder_sync(const std::string& folder);

// Checks `path` is something that can be read as a file before opening it: it exists, and is a
// regular file (or a symlink to one), not a folder, FIFO, socket or device, which would block or
// fail later with a worse message. `what` names it ("token file", "checkpoint").
Status input_file_check(const std::string& path, std::string_view what);

// Reads exactly n bytes at `offset` of an open file (pread, resumed after partial reads and
// EINTR); a file that ends first is an error saying it is truncated. `what` and `path` name it.
Status file_read_at(int fd, void* dst, size_t n, int64_t offset, const std::string& path,
                    std::string_view what);

// Reads a whole regular file of at most max_bytes.
Result<std::string> file_read_all(const std::string& path, std::string_view what,
                                  int64_t max_bytes = int64_t{1} << 30);

// strerror(errno), thread-safe.
std::string errno_text(int err);
std::string errno_text();

}  // namespace zt
