// Asynchronous file I/O (aio.h). A request is split into blocks of block_size that go to one
// shared queue. Workers take them from there:
//   - io_uring and libaio: one worker thread per ring (thread_count of them), each keeping up to
//     queue_depth blocks in its kernel queue, submitting and reaping its own completions;
//   - threads: thread_count x queue_depth threads (at most kMaxPoolThreads), each doing one
//     blocking pread/pwrite at a time, so as many transfers are in flight as with a ring.
// A partial transfer, EINTR or EAGAIN sends the rest of the block again; any other failure is the
// request's error, and the first one stops the file (queued blocks are then finished unsent).
#include "zt/core/aio.h"

#include <fcntl.h>
#include <libaio.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "zt/core/assert.h"
#include "zt/core/file_io.h"

namespace zt::aio {
namespace {

using Op = SwapFile::Op;

// The backends and their names, declared once: backend_name and backend_parse read this table.
constexpr std::array<std::pair<Backend, const char*>, 4> kBackendNames{{
    {Backend::kAuto, "auto"},
    {Backend::kIoUring, "io_uring"},
    {Backend::kLibaio, "libaio"},
    {Backend::kThreads, "threads"},
}};

// The threads backend runs thread_count x queue_depth threads up to this many: past it a disk
// gains nothing from more blocking transfers and the process pays in stacks.
constexpr int kMaxPoolThreads = 64;

std::string gb(int64_t bytes) {
  const double g = static_cast<double>(bytes) / 1e9;
  // Enough digits that a small file (a test, a tiny model) does not read as 0.00 GB.
  return fmt::format("{:.{}f} GB", g, g >= 10 ? 1 : g >= 0.1 ? 2 : 4);
}

std::string folder_of(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

std::string no_direct_text(const std::string& folder) {
  return fmt::format(
      "the filesystem of '{}' does not support O_DIRECT (tmpfs before Linux 6.6, some network "
      "filesystems); use a folder on a local disk",
      folder);
}

// What to do about a failed transfer or reservation, by errno ("" when nothing specific helps).
std::string errno_advice(int err, const std::string& folder) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return fmt::format(
          "; the disk of '{}' is full: free space there, put fewer ranks on this "
          "disk, or point nvme_path at a larger disk",
          folder);
    case EFBIG:
      return "; the file size limit was reached (the process's `ulimit -f`, or the largest file "
             "the filesystem allows): raise the limit or use smaller swap files";
    case EIO:
      return "; the disk reported a failure: check the drive (dmesg, smartctl)";
    case EINVAL:
      return "; the kernel refused an O_DIRECT transfer: " + no_direct_text(folder);
    default:
      return "";
  }
}

// One block of a request: the unit handed to the kernel.
struct Block {
  Ticket ticket = 0;
  Op op = Op::kRead;
  char* buf = nullptr;
  int64_t n = 0;
  int64_t offset = 0;
};

// How a block ended: err is 0 or an errno; eof says the transfer moved no bytes (a read at the end
// of the file); offset is where it stopped.
struct Outcome {
  int err = 0;
  bool eof = false;
  int64_t offset = 0;
  bool ok() const { return err == 0 && !eof; }
};

// A blocking transfer of a whole block (threads backend).
Outcome transfer_sync(int fd, Block b) {
  while (b.n > 0) {
    const ssize_t r = b.op == Op::kRead ? ::pread(fd, b.buf, static_cast<size_t>(b.n), b.offset)
                                        : ::pwrite(fd, b.buf, static_cast<size_t>(b.n), b.offset);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return {.err = errno, .offset = b.offset};
    }
    if (r == 0) return {.eof = true, .offset = b.offset};
    b.buf += r;
    b.offset += r;
    b.n -= r;
  }
  return {};
}

// A kernel queue owned by one worker thread. Slots (0..depth-1) name the blocks in flight.
class Ring {
 public:
  virtual ~Ring() = default;
  virtual void prepare(int slot, const Block& b) = 0;  // queued here; submit() hands it over
  virtual int submit() = 0;                            // 0, or -errno
  // Waits for at least one completion and appends (slot, bytes or -errno); 0 or -errno.
  virtual int reap(std::vector<std::pair<int, int64_t>>& out) = 0;
};

class UringRing final : public Ring {
 public:
  explicit UringRing(int fd) : fd_(fd) {}
  ~UringRing() override {
    if (open_) io_uring_queue_exit(&ring_);
  }
  int open(int depth) {
    const int r = io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0);
    open_ = r == 0;
    return r;
  }
  void prepare(int slot, const Block& b) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    ZT_ASSERT(sqe != nullptr, "io_uring submission queue full: more blocks than its depth");
    const auto n = static_cast<unsigned>(b.n);
    const auto off = static_cast<uint64_t>(b.offset);
    if (b.op == Op::kRead) {
      io_uring_prep_read(sqe, fd_, b.buf, n, off);
    } else {
      io_uring_prep_write(sqe, fd_, b.buf, n, off);
    }
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
  }
  int submit() override {
    while (io_uring_sq_ready(&ring_) > 0) {
      const int r = io_uring_submit(&ring_);
      if (r < 0) return r;
      if (r == 0) return -EAGAIN;
    }
    return 0;
  }
  int reap(std::vector<std::pair<int, int64_t>>& out) override {
    io_uring_cqe* cqe = nullptr;
    const int r = io_uring_wait_cqe(&ring_, &cqe);
    if (r < 0) return r;
    unsigned head = 0, n = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      out.emplace_back(static_cast<int>(cqe->user_data), cqe->res);
      ++n;
    }
    io_uring_cq_advance(&ring_, n);
    return 0;
  }

 private:
  io_uring ring_{};
  int fd_;
  bool open_ = false;
};

class LibaioRing final : public Ring {
 public:
  LibaioRing(int fd, int depth)
      : fd_(fd), cbs_(static_cast<size_t>(depth)), events_(static_cast<size_t>(depth)) {}
  ~LibaioRing() override {
    if (open_) io_destroy(ctx_);
  }
  int open() {
    const int r = io_setup(static_cast<int>(cbs_.size()), &ctx_);  // libaio returns -errno
    open_ = r == 0;
    return r;
  }
  void prepare(int slot, const Block& b) override {
    iocb* cb = &cbs_[static_cast<size_t>(slot)];
    if (b.op == Op::kRead) {
      io_prep_pread(cb, fd_, b.buf, static_cast<size_t>(b.n), b.offset);
    } else {
      io_prep_pwrite(cb, fd_, b.buf, static_cast<size_t>(b.n), b.offset);
    }
    unsent_.push_back(cb);
  }
  int submit() override {
    while (!unsent_.empty()) {
      const int r = io_submit(ctx_, static_cast<long>(unsent_.size()), unsent_.data());
      if (r < 0) return r;
      if (r == 0) return -EAGAIN;
      unsent_.erase(unsent_.begin(), unsent_.begin() + r);  // io_submit may take only some
    }
    return 0;
  }
  int reap(std::vector<std::pair<int, int64_t>>& out) override {
    const int r = io_getevents(ctx_, 1, static_cast<long>(events_.size()), events_.data(), nullptr);
    if (r < 0) return r;
    for (int i = 0; i < r; ++i) {
      const io_event& e = events_[static_cast<size_t>(i)];
      // res carries bytes, or -errno in an unsigned field.
      out.emplace_back(static_cast<int>(e.obj - cbs_.data()),
                       static_cast<int64_t>(static_cast<long>(e.res)));
    }
    return 0;
  }

 private:
  io_context_t ctx_ = nullptr;
  int fd_;
  bool open_ = false;
  std::vector<iocb> cbs_;
  std::vector<io_event> events_;
  std::vector<iocb*> unsent_;
};

}  // namespace

struct SwapFile::State {
  struct Request {
    int64_t blocks_left = 0;
    Op op = Op::kRead;
    int64_t n = 0, offset = 0;
    Status error;
  };

  std::string path, what, note;
  int64_t size = 0;
  Options options;
  Backend backend = Backend::kThreads;
  int fd = -1;

  std::mutex mu;
  std::condition_variable work_cv;  // workers: blocks were queued, or the file stops
  std::condition_variable done_cv;  // waiters: a request finished
  std::deque<Block> queue;
  std::unordered_map<Ticket, Request> requests;
  int64_t blocks_outstanding = 0;
  Ticket next_ticket = 1;
  Status first_error;  // ok until a transfer fails, then that failure for good
  bool stopping = false;
  std::vector<std::unique_ptr<Ring>> rings;
  std::vector<std::thread> threads;

  std::string request_text(Op op, int64_t n, int64_t offset) const {
    return fmt::format("{} {} bytes at offset {} of {} '{}'",
                       op == Op::kRead ? "reading" : "writing", n, offset, what, path);
  }

  void finish_locked(const Block& b, const Outcome& o) {
    auto it = requests.find(b.ticket);
    ZT_ASSERT(it != requests.end(), "a block of unknown ticket {} finished", b.ticket);
    Request& r = it->second;
    if (!o.ok() && r.error.is_ok()) {
      std::string why;
      if (o.eof && r.op == Op::kRead) {
        why = "the file ends there (truncated by another program?)";
      } else if (o.eof) {
        why = "the disk accepted no bytes";
      } else {
        why = errno_text(o.err) + errno_advice(o.err, folder_of(path));
      }
      r.error =
          io_error("{} failed at offset {}: {}", request_text(r.op, r.n, r.offset), o.offset, why);
      if (first_error.is_ok()) first_error = r.error;
    }
    --blocks_outstanding;
    if (--r.blocks_left == 0) done_cv.notify_all();
  }
  void finish(const Block& b, const Outcome& o) {
    std::lock_guard lock(mu);
    finish_locked(b, o);
  }

  // Moves up to `max` queued blocks to `out`; after the first error they are finished unsent
  // instead. With `sleep`, waits until one is queued; false only when the file stops.
  bool take(std::deque<Block>& out, size_t max, bool sleep) {
    std::unique_lock lock(mu);
    if (sleep) {
      work_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return false;
    }
    for (size_t got = 0; got < max && !queue.empty(); queue.pop_front()) {
      if (!first_error.is_ok()) {
        finish_locked(queue.front(), {});
      } else {
        out.push_back(queue.front());
        ++got;
      }
    }
    return true;
  }
};

namespace {

using State = SwapFile::State;

void thread_worker(State& s) {
  std::deque<Block> got;
  while (s.take(got, 1, true)) {
    for (const Block& b : got) s.finish(b, transfer_sync(s.fd, b));
    got.clear();
  }
}

// Submits what is prepared, retrying while the kernel is briefly out of resources.
int submit_retrying(Ring& ring) {
  for (int tries = 0;; ++tries) {
    const int r = ring.submit();
    if (r == 0 || (r != -EINTR && r != -EAGAIN && r != -EBUSY) || tries >= 1000) return r;
    if (r != -EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ring_worker(State& s, Ring& ring) {
  const int depth = s.options.queue_depth;
  std::vector<Block> slots(static_cast<size_t>(depth));
  std::vector<int> free_slots;
  for (int i = depth - 1; i >= 0; --i) free_slots.push_back(i);
  std::deque<Block> ready;  // resubmissions (rests of partial transfers) first, then new blocks
  std::vector<std::pair<int, int64_t>> done;
  int in_flight = 0;
  for (;;) {
    // Without overlap_events a batch is reaped whole before the next one is submitted.
    if (in_flight == 0 || (s.options.overlap_events && !free_slots.empty())) {
      if (ready.size() < free_slots.size()) {
        const bool idle = in_flight == 0 && ready.empty();
        if (!s.take(ready, free_slots.size() - ready.size(), idle)) return;
      }
      int err = 0, sent = 0;
      while (err == 0 && !ready.empty() && !free_slots.empty()) {
        const int slot = free_slots.back();
        free_slots.pop_back();
        slots[static_cast<size_t>(slot)] = ready.front();
        ready.pop_front();
        ring.prepare(slot, slots[static_cast<size_t>(slot)]);
        ++sent;
        if (s.options.single_submit) err = submit_retrying(ring);
      }
      if (err == 0 && sent > 0 && !s.options.single_submit) err = submit_retrying(ring);
      in_flight += sent;
      if (err != 0) {
        // The kernel refused the queue itself, not one block: every block this ring holds fails
        // with that error, and the file stops (take() finishes later blocks unsent). The ring is
        // torn down, cancelling anything it did accept, when the file closes.
        std::vector<bool> is_free(static_cast<size_t>(depth), false);
        for (int f : free_slots) is_free[static_cast<size_t>(f)] = true;
        for (int i = 0; i < depth; ++i) {
          const Block& b = slots[static_cast<size_t>(i)];
          if (!is_free[static_cast<size_t>(i)]) s.finish(b, {.err = -err, .offset = b.offset});
        }
        for (const Block& b : ready) s.finish(b, {.err = -err, .offset = b.offset});
        ready.clear();
        free_slots.clear();
        for (int i = depth - 1; i >= 0; --i) free_slots.push_back(i);
        in_flight = 0;
        continue;
      }
    }
    if (in_flight == 0) continue;
    done.clear();
    const int r = ring.reap(done);
    if (r == -EINTR || r == -EAGAIN) continue;
    ZT_ASSERT(r == 0, "waiting for {} completions failed: {}", backend_name(s.backend),
              errno_text(-r));
    for (const auto& [slot, res] : done) {
      const Block b = slots[static_cast<size_t>(slot)];
      free_slots.push_back(slot);
      --in_flight;
      if (res == -EINTR || res == -EAGAIN) {
        ready.push_front(b);
      } else if (res < 0) {
        s.finish(b, {.err = static_cast<int>(-res), .offset = b.offset});
      } else if (res == 0) {
        s.finish(b, {.eof = true, .offset = b.offset});
      } else if (res < b.n) {
        ready.push_front(Block{b.ticket, b.op, b.buf + res, b.n - res, b.offset + res});
      } else {
        s.finish(b, {});
      }
    }
  }
}

// Opens thread_count rings of backend `b`; on failure returns why ("io_setup: ...").
std::optional<std::string> rings_open(State& s, Backend b) {
  for (int i = 0; i < s.options.thread_count; ++i) {
    int r = 0;
    const char* call = "";
    if (b == Backend::kIoUring) {
      auto ring = std::make_unique<UringRing>(s.fd);
      r = ring->open(s.options.queue_depth);
      call = "io_uring_queue_init";
      if (r == 0) s.rings.push_back(std::move(ring));
    } else {
      auto ring = std::make_unique<LibaioRing>(s.fd, s.options.queue_depth);
      r = ring->open();
      call = "io_setup";
      if (r == 0) s.rings.push_back(std::move(ring));
    }
    if (r != 0) {
      s.rings.clear();
      std::string hint;
      if (r == -EPERM || r == -ENOSYS) {
        hint = b == Backend::kIoUring
                   ? " (the kernel, sysctl kernel.io_uring_disabled or a container's seccomp "
                     "filter forbids it)"
                   : " (the kernel or a container's seccomp filter forbids it)";
      } else if (r == -EAGAIN && b == Backend::kLibaio) {
        hint = " (sysctl fs.aio-max-nr reached)";
      }
      return fmt::format("{}: {}{}", call, errno_text(-r), hint);
    }
  }
  return std::nullopt;
}

Status options_check(const Options& o) {
  if (o.block_size <= 0 || o.block_size % kAlign != 0 || o.block_size > (int64_t{1} << 30)) {
    return invalid_argument(
        "aio.block_size {} is not a multiple of {} between {} and 1073741824; use 1048576 "
        "(1 MiB, as DeepSpeed does)",
        o.block_size, kAlign, kAlign);
  }
  if (o.queue_depth < 1 || o.queue_depth > 4096) {
    return invalid_argument("aio.queue_depth {} is outside 1..4096; use 8 (as DeepSpeed does)",
                            o.queue_depth);
  }
  if (o.thread_count < 1 || o.thread_count > 64) {
    return invalid_argument("aio.intra_op_parallelism {} is outside 1..64; use 1 to 8",
                            o.thread_count);
  }
  return Status::ok();
}

// kAuto resolved through ZT_AIO_BACKEND (still kAuto when that is unset or "auto").
Result<Backend> backend_wanted(Backend b) {
  if (b != Backend::kAuto) return b;
  const char* env = std::getenv("ZT_AIO_BACKEND");
  if (env == nullptr || *env == '\0') return Backend::kAuto;
  auto parsed = backend_parse(env);
  if (!parsed) {
    return invalid_argument(
        "ZT_AIO_BACKEND='{}' is not a backend; set it to io_uring, libaio, threads or auto, or "
        "unset it",
        env);
  }
  return *parsed;
}

}  // namespace

int64_t align_up(int64_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

const char* backend_name(Backend b) {
  for (const auto& [backend, name] : kBackendNames) {
    if (backend == b) return name;
  }
  return "unknown";
}

std::optional<Backend> backend_parse(std::string_view name) {
  for (const auto& [backend, n] : kBackendNames) {
    if (name == n) return backend;
  }
  return std::nullopt;
}

SwapFile::SwapFile(std::unique_ptr<State> state) : state_(std::move(state)) {}

SwapFile::~SwapFile() {
  shutdown();
}

Result<std::unique_ptr<SwapFile>> SwapFile::create(const std::string& path, int64_t bytes,
                                                   const Options& options, std::string_view what) {
  ZT_ASSERT(bytes >= 0 && bytes % kAlign == 0, "swap file size {} is not a multiple of {}", bytes,
            kAlign);
  ZT_RETURN_IF_ERROR(options_check(options));
  ZT_ASSIGN_OR_RETURN(const Backend wanted, backend_wanted(options.backend));
  auto s = std::make_unique<State>();
  s->path = path;
  s->what = what;
  s->size = bytes;
  s->options = options;
  const std::string folder = folder_of(path);

  s->fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  if (s->fd < 0) {
    const int err = errno;
    if (err == EINVAL)
      return io_error("cannot open {} '{}': {}", what, path, no_direct_text(folder));
    if (err == ENOENT) {
      return not_found(
          "cannot create {} '{}': the folder '{}' does not exist; create it or point "
          "nvme_path at a folder on the NVMe drive",
          what, path, folder);
    }
    return io_error("cannot create {} '{}': {}", what, path, errno_text(err));
  }
  // From here a failure closes and removes what create() made.
  auto fail = [&](Status st) -> Status {
    s->rings.clear();
    ::close(s->fd);
    ::unlink(path.c_str());
    return st;
  };

  std::string space;
  if (!options.reserve) {
    space = "no space reserved (the file grows as it is written)";
  } else if (bytes > 0) {
    int r = 0;
    do {
      r = ::fallocate(s->fd, 0, 0, bytes);
    } while (r != 0 && errno == EINTR);
    int err = r == 0 ? 0 : errno;
    space = "space reserved with fallocate";
    if (err == EOPNOTSUPP || err == ENOSYS) {
      space = fmt::format(
          "size set with ftruncate, as the filesystem cannot fallocate ({}), so a "
          "full disk shows as a write error during the run",
          errno_text(err));
      err = ::ftruncate(s->fd, bytes) == 0 ? 0 : errno;
    }
    if (err != 0) {
      std::string free_text;
      auto f = free_bytes(folder);
      if ((err == ENOSPC || err == EDQUOT) && f.is_ok())
        free_text = fmt::format(" ({} free)", gb(*f));
      return fail(io_error("cannot reserve {} for {} '{}'{}: {}{}", gb(bytes), what, path,
                           free_text, errno_text(err), errno_advice(err, folder)));
    }
  }

  std::string fallbacks;  // why backends earlier in the kAuto order did not start
  const Backend order[] = {Backend::kIoUring, Backend::kLibaio, Backend::kThreads};
  for (Backend b : order) {
    if (wanted != Backend::kAuto && b != wanted) continue;
    if (b == Backend::kThreads) {
      s->backend = b;
      break;
    }
    auto why = rings_open(*s, b);
    if (!why) {
      s->backend = b;
      break;
    }
    if (wanted != Backend::kAuto) {
      return fail(
          unavailable("cannot use the {} backend for {} '{}': {}; unset ZT_AIO_BACKEND or "
                      "choose another of io_uring, libaio, threads",
                      backend_name(b), what, path, *why));
    }
    fallbacks +=
        fmt::format("{}{} unavailable: {}", fallbacks.empty() ? "" : "; ", backend_name(b), *why);
  }

  State& st = *s;
  std::string workers;
  if (st.backend == Backend::kThreads) {
    const int n = std::min(options.thread_count * options.queue_depth, kMaxPoolThreads);
    for (int i = 0; i < n; ++i) st.threads.emplace_back(thread_worker, std::ref(st));
    workers = fmt::format("{} threads doing pread/pwrite", n);
  } else {
    for (auto& ring : st.rings) st.threads.emplace_back(ring_worker, std::ref(st), std::ref(*ring));
    workers = fmt::format("{} ring{} of queue depth {}, {} submission{}", st.rings.size(),
                          st.rings.size() == 1 ? "" : "s", options.queue_depth,
                          options.single_submit ? "single" : "batched",
                          options.overlap_events ? ", completions overlapped" : "");
  }
  st.note = fmt::format("{}{}, O_DIRECT, {}, blocks of {} bytes{}{}", backend_name(st.backend),
                        fallbacks.empty() ? "" : " (" + fallbacks + ")", workers,
                        options.block_size, space.empty() ? "" : "; ", space);
  return std::unique_ptr<SwapFile>(new SwapFile(std::move(s)));
}

Ticket SwapFile::submit(Op op, char* buf, int64_t n, int64_t offset) {
  State& s = *state_;
  ZT_ASSERT(s.fd >= 0, "{} '{}' was used after remove()", s.what, s.path);
  ZT_ASSERT(
      reinterpret_cast<uintptr_t>(buf) % kAlign == 0 && n % kAlign == 0 && offset % kAlign == 0,
      "{}: O_DIRECT needs the buffer address, size and offset aligned to {} bytes (buffer "
      "{}, size {}, offset {})",
      s.request_text(op, n, offset), kAlign, static_cast<const void*>(buf), n, offset);
  ZT_ASSERT(n >= 0 && offset >= 0 && offset + n <= s.size, "{}: beyond the end of the file ({})",
            s.request_text(op, n, offset), s.size);
  const int64_t bs = s.options.block_size;
  std::lock_guard lock(s.mu);
  const Ticket t = s.next_ticket++;
  const int64_t blocks = (n + bs - 1) / bs;
  s.requests.emplace(
      t, State::Request{.blocks_left = blocks, .op = op, .n = n, .offset = offset, .error = {}});
  s.blocks_outstanding += blocks;
  for (int64_t at = 0; at < n; at += bs) {
    s.queue.push_back(Block{t, op, buf + at, std::min(bs, n - at), offset + at});
  }
  s.work_cv.notify_all();
  return t;
}

Ticket SwapFile::read_async(void* dst, int64_t n, int64_t offset) {
  return submit(Op::kRead, static_cast<char*>(dst), n, offset);
}

Ticket SwapFile::write_async(const void* src, int64_t n, int64_t offset) {
  // The kernel only reads from a write's buffer; the queue's Block holds one pointer type.
  return submit(Op::kWrite, const_cast<char*>(static_cast<const char*>(src)), n, offset);
}

Status SwapFile::wait(Ticket t) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  auto it = s.requests.find(t);
  ZT_ASSERT(it != s.requests.end(), "ticket {} of {} '{}' was never issued or already waited for",
            t, s.what, s.path);
  State::Request& r = it->second;  // references into an unordered_map survive rehashing
  s.done_cv.wait(lock, [&] { return r.blocks_left == 0; });
  const State::Request done = std::move(r);
  s.requests.erase(t);
  if (!done.error.is_ok()) return done.error;
  if (!s.first_error.is_ok()) {
    return io_error("{} cannot be trusted: the file is unusable after an earlier failure: {}",
                    s.request_text(done.op, done.n, done.offset), s.first_error.message());
  }
  return Status::ok();
}

Status SwapFile::wait_all() {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  s.done_cv.wait(lock, [&] { return s.blocks_outstanding == 0; });
  s.requests.clear();
  return s.first_error;
}

void SwapFile::shutdown() {
  State& s = *state_;
  if (s.fd < 0) return;
  {
    std::unique_lock lock(s.mu);
    s.done_cv.wait(lock, [&] { return s.blocks_outstanding == 0; });
    s.stopping = true;
  }
  s.work_cv.notify_all();
  for (std::thread& t : s.threads) t.join();
  s.threads.clear();
  s.rings.clear();
  ::close(s.fd);  // nothing is buffered (O_DIRECT): a close error has no data to lose
  s.fd = -1;
}

Status SwapFile::remove() {
  shutdown();
  State& s = *state_;
  if (::unlink(s.path.c_str()) != 0 && errno != ENOENT) {
    return io_error("cannot remove {} '{}': {}; remove it by hand to free its space", s.what,
                    s.path, errno_text());
  }
  return Status::ok();
}

Backend SwapFile::backend() const {
  return state_->backend;
}
const std::string& SwapFile::path() const {
  return state_->path;
}
int64_t SwapFile::size() const {
  return state_->size;
}
std::string SwapFile::backend_note() const {
  return state_->note;
}

Result<int64_t> free_bytes(const std::string& folder) {
  struct statvfs v {};
  if (::statvfs(folder.c_str(), &v) != 0) {
    return io_error("cannot read the free space of '{}' (statvfs): {}", folder, errno_text());
  }
  return static_cast<int64_t>(v.f_bavail) * static_cast<int64_t>(v.f_frsize);
}

namespace {

// Writes one aligned block to `probe` through O_DIRECT, as the swap files will be written.
Status direct_probe(const std::string& probe, const std::string& folder, std::string_view key) {
  const int fd = ::open(probe.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == EINVAL) return invalid_argument("{}: {}", key, no_direct_text(folder));
    return io_error("{}: cannot open a probe file in '{}' with O_DIRECT: {}", key, folder,
                    errno_text(err));
  }
  AlignedBuffer buf(kAlign);
  std::memset(buf.data(), 0, kAlign);
  ssize_t r = 0;
  do {
    r = ::pwrite(fd, buf.data(), kAlign, 0);
  } while (r < 0 && errno == EINTR);
  const int err = r < 0 ? errno : 0;
  ::close(fd);
  if (err == EINVAL) return invalid_argument("{}: {}", key, no_direct_text(folder));
  if (err != 0) {
    return io_error("{}: writing a probe file in '{}' with O_DIRECT failed: {}{}", key, folder,
                    errno_text(err), errno_advice(err, folder));
  }
  if (r != kAlign) {
    return io_error("{}: writing {} bytes to a probe file in '{}' with O_DIRECT wrote {}", key,
                    kAlign, folder, r);
  }
  return Status::ok();
}

}  // namespace

Status nvme_path_check(const std::string& folder, int64_t needed_bytes, std::string_view key) {
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return not_found(
          "{} '{}' does not exist; create it or point {} at a folder on the NVMe drive", key,
          folder, key);
    }
    return io_error("{} '{}' cannot be examined: {}; point {} at a folder on the NVMe drive", key,
                    folder, errno_text(err), key);
  }
  if (!S_ISDIR(st.st_mode)) {
    return invalid_argument("{} '{}' is not a folder; point {} at a folder on the NVMe drive", key,
                            folder, key);
  }
  // Several ranks may check one folder at once: each probes its own file.
  const std::string probe =
      (std::filesystem::path(folder) / fmt::format(".zt_nvme_probe.{}", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return io_error(
        "{} '{}' is not writable ({}); make it writable for this user or point {} at "
        "another folder",
        key, folder, errno_text(), key);
  }
  ::close(fd);
  // O_DIRECT only after a plain create succeeded, so EINVAL here means O_DIRECT, not permissions.
  const Status direct = direct_probe(probe, folder, key);
  ::unlink(probe.c_str());
  ZT_RETURN_IF_ERROR(direct);
  ZT_ASSIGN_OR_RETURN(const int64_t free, free_bytes(folder));
  if (free < needed_bytes) {
    return io_error(
        "{} '{}' needs {} for swap files but its disk has {} free; put fewer ranks on "
        "this disk, point {} at another folder, or set the offload device to \"cpu\"",
        key, folder, gb(needed_bytes), gb(free), key);
  }
  return Status::ok();
}

Result<AlignedBuffer> AlignedBuffer::allocate(int64_t bytes) {
  ZT_ASSERT(bytes >= 0, "negative buffer size {}", bytes);
  AlignedBuffer b;
  if (bytes == 0) return b;
  void* p = nullptr;
  const int r = ::posix_memalign(&p, kAlign, static_cast<size_t>(align_up(bytes)));
  if (r != 0) {
    return Status(StatusCode::kOutOfMemory,
                  fmt::format("cannot allocate {} of page-aligned host memory for file I/O: {}; "
                              "free host memory or lower the swap buffer sizes",
                              gb(bytes), errno_text(r)));
  }
  b.data_ = p;
  b.size_ = bytes;
  return b;
}

AlignedBuffer::AlignedBuffer(int64_t bytes) {
  auto b = allocate(bytes);
  if (!b.is_ok()) throw std::bad_alloc();
  *this = std::move(b).value();
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace zt::aio
