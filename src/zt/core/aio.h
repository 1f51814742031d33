// Asynchronous file I/O for NVMe swapping (ZeRO-Infinity): a swap file opened with O_DIRECT, read
// and written in blocks by io_uring, Linux AIO (libaio) or a pool of threads, plus the checks made
// on an nvme_path folder before a run uses it. docs/zero.md "Asynchronous file I/O" describes it
// for users.
//
// Contracts:
//   - Buffers, sizes and file offsets are multiples of kAlign (4096): O_DIRECT bypasses the page
//     cache, and the kernel moves whole logical blocks straight from or to user memory. Breaking
//     this is a bug in the caller (ZT_ASSERT), not a user error.
//   - One caller thread per SwapFile: read_async, write_async, wait, wait_all and remove are called
//     from one thread at a time. Internal threads (one per ring, or the pool) submit and reap.
//   - A buffer handed to read_async/write_async stays valid and untouched until wait() of its
//     ticket returns (or wait_all()).
//   - The first failed transfer makes the file unusable: later requests are not submitted and
//     every later wait() fails, naming that first error, so a swap never runs on with bad data.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "zt/core/status.h"

namespace zt::aio {

inline constexpr int64_t kAlign = 4096;  // O_DIRECT alignment of buffers, offsets and sizes
int64_t align_up(int64_t n);             // to kAlign

// The kernel interface that moves the blocks. kAuto picks the first that starts here, in this
// order.
enum class Backend : unsigned char { kAuto, kIoUring, kLibaio, kThreads };
const char* backend_name(Backend b);  // "auto", "io_uring", "libaio", "threads"
// The inverse of backend_name; nullopt for any other text.
std::optional<Backend> backend_parse(std::string_view name);

struct Options {                 // DeepSpeed's "aio" block
  int64_t block_size = 1 << 20;  // bytes per request; a larger read/write is split into blocks
  int queue_depth = 8;           // requests in flight per ring (threads backend: threads per ring)
  int thread_count = 1;          // intra_op_parallelism: submitting threads / rings
  bool single_submit = false;    // submit requests one at a time instead of batched
  bool overlap_events = true;    // keep submitting while completions are reaped
  Backend backend = Backend::kAuto;  // env ZT_AIO_BACKEND=io_uring|libaio|threads overrides kAuto
  // Reserve the whole file at create() (fallocate). Off only where a test needs a file that grows
  // with its writes (to meet a size limit mid-run); swapping always reserves.
  bool reserve = true;
};

using Ticket = int64_t;

class SwapFile {
 public:
  // Creates (or truncates) `path`, opened O_DIRECT read/write, and reserves `bytes` (a multiple of
  // kAlign) with fallocate so that a full disk is found here, not mid-run (where the filesystem
  // cannot fallocate, ftruncate sets the size instead and backend_note() says so).
  // `what` names it in messages ("optimizer swap file", "parameter swap file").
  static Result<std::unique_ptr<SwapFile>> create(const std::string& path, int64_t bytes,
                                                  const Options& options, std::string_view what);
  ~SwapFile();  // waits for requests in flight, closes; does NOT delete the file (remove() does)
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  // Asynchronous transfer of n bytes at file offset `offset`, split into blocks of block_size.
  // buf, n and offset are multiples of kAlign and [offset, offset + n) lies inside the file
  // (ZT_ASSERT otherwise). Returns at once; the buffer must stay valid until wait().
  Ticket read_async(void* dst, int64_t n, int64_t offset);
  Ticket write_async(const void* src, int64_t n, int64_t offset);
  // Waits for every block of that request (each ticket is waited for once, or by wait_all). An
  // error (EIO, ENOSPC, EFBIG, short transfer) is one line naming the file, the offset and size,
  // the errno text and what to do. After an error every later wait() also fails.
  Status wait(Ticket t);
  Status wait_all();
  // Waits for requests in flight, closes and unlinks the file. Nothing else may be called after.
  Status remove();

  Backend backend() const;
  const std::string& path() const;
  int64_t size() const;
  std::string backend_note() const;  // "io_uring, O_DIRECT, queue depth 8, ..." or why it fell back

  struct State;  // aio.cc: the descriptor, queues, threads and rings
  enum class Op : unsigned char { kRead, kWrite };

 private:
  explicit SwapFile(std::unique_ptr<State> state);
  Ticket submit(Op op, char* buf, int64_t n, int64_t offset);
  void shutdown();  // drains, stops the threads, closes the descriptor

  std::unique_ptr<State> state_;
};

// Checks a folder given as nvme_path before a run uses it: it exists, is a folder, is writable,
// supports O_DIRECT (a probe file written with 4096 aligned bytes), and has at least
// `needed_bytes` free. `key` is the config key that named the path
// ("zero_optimization.offload_optimizer.nvme_path"); every message names it and what to change.
Status nvme_path_check(const std::string& folder, int64_t needed_bytes, std::string_view key);
// Bytes an unprivileged writer may still put in `folder`'s filesystem (statvfs f_bavail*f_frsize).
Result<int64_t> free_bytes(const std::string& folder);

// Page-aligned host memory for O_DIRECT (posix_memalign to kAlign; contents uninitialised). Used
// on the CPU and in tests; on GPUs the caller passes pinned memory (cudaHostAlloc is
// page-aligned) instead. The constructor throws std::bad_alloc when memory runs out, as standard
// containers do; allocate() returns that as a Status naming the size.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t bytes);
  static Result<AlignedBuffer> allocate(int64_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace zt::aio
