// Devices ("cpu", "cuda:N"), streams and events, and the raw memory operations every layer above
// uses. CUDA work is forwarded to core/cuda/ (the only files here that include CUDA headers); in a
// build without CUDA, asking for a CUDA device is a user error that says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zt/core/status.h"

namespace zt {

enum class DeviceKind : unsigned char { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceKind::kCpu, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceKind::kCuda, i}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu", "cuda", "cuda:N", "gpu". Does not check that the device exists (see device_check).
Result<Device> device_parse(std::string_view s);
// Ok when `d` can be used in this process: built with CUDA, a driver, and index < count.
Status device_check(Device d);
bool cuda_built();
int cuda_device_count();  // 0 without a CUDA build or device
std::string cuda_device_name(int index);
// The GPU's memory in all, in bytes; 0 without a CUDA build or when it cannot be read.
int64_t cuda_device_total_memory(int index);
// What `zt report` shows of CUDA: versions as CUDA encodes them (12040 = 12.4; cuBLAS as
// major*10000 + minor*100 + patch), 0 where unknown or without a CUDA build.
struct CudaVersions {
  int driver = 0, runtime = 0, toolkit = 0, cublas = 0;
};
CudaVersions cuda_versions();
int cuda_device_capability(int index);  // 90 for sm_90; 0 if unknown

// A stream of work on a device. On the CPU every operation is synchronous and the handle is null.
// A default-constructed Stream is the device's default (legacy) stream.
class Stream {
 public:
  Stream() = default;
  Stream(Device device, void* handle) : device_(device), handle_(handle) {}
  // Creates a new stream on `device` that synchronises with the legacy default stream (a null stream on the CPU). Not owned: streams
  // live for the process (they are few: compute, communication, copy).
  static Stream create(Device device);
  Device device() const { return device_; }
  void* handle() const { return handle_; }
  void synchronize() const;

 private:
  Device device_ = Device::cpu();
  void* handle_ = nullptr;
};

// Whether an Event measures time (kTiming) or only orders streams (kSyncOnly: cheaper to record
// and wait on; elapsed_ms is not available).
enum class EventTiming : unsigned char { kTiming, kSyncOnly };

// A CUDA event; on the CPU it records wall-clock time.
class Event {
 public:
  explicit Event(Device device, EventTiming timing = EventTiming::kTiming);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& stream);
  void wait(const Stream& stream) const;  // `stream` waits for this event
  void synchronize() const;
  float elapsed_ms(const Event& end) const;  // time from this event to `end`

 private:
  Device device_;
  void* handle_ = nullptr;
  double cpu_time_ms_ = 0;
};

// Time between pairs of events recorded on a stream, summed only when read: measures the device
// work between two points without synchronising the host at each of them (the engine's timers,
// ZeRO-3's gather timing, the FLOPs profiler's units).
class EventSpans {
 public:
  explicit EventSpans(Device device) : device_(device) {}
  void begin(const Stream& stream);  // a span must not be open
  void end(const Stream& stream);    // closes the open span
  // Milliseconds of the closed spans (waits for their ends); `reset` drops them.
  double elapsed_ms(bool reset);

 private:
  Device device_;
  std::unique_ptr<Event> open_;
  std::vector<std::pair<std::unique_ptr<Event>, std::unique_ptr<Event>>> spans_;
};

// Thrown when a device allocation fails for lack of memory (after the cache was emptied and the
// allocation retried). The message names the device, the size and what to do.
class GpuOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown when page-locked host memory cannot be had (cudaHostAlloc failed: not enough RAM, or the
// locked-memory limit). The message names the size and what to do.
class HostOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raw memory. Device memory comes from the caching allocator (core/block_cache.h has its rules):
// a freed block is reused for later requests on the stream it was allocated on, so a training step
// after the first makes no cudaMalloc/cudaFree calls. CPU memory is 64-byte aligned.
void* memory_allocate(Device d, size_t bytes, const Stream& stream = {});
void memory_free(Device d, void* ptr, size_t bytes);
// The device block at `ptr` (as memory_allocate returned it) is also used by work queued on
// `stream`, not only on the stream it was allocated on (PyTorch's record_stream): when freed, it
// is reused only after that stream's work queued so far has completed. Call it after queuing
// the work, whenever a block allocated on one stream is read or written on another. A no-op on
// the CPU and for the block's own stream.
void memory_record_stream(Device d, void* ptr, const Stream& stream);
void memory_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                 const Stream& stream = {});
// Enqueues the copy on `stream` and returns at once (memory_copy above waits for copies that touch
// host memory). The host side must stay untouched until the stream reaches the copy (wait on an
// Event recorded after it). Truly asynchronous only with page-locked host memory; with ordinary
// host memory CUDA stages the transfer and returns later, which is still correct. Host-to-host
// (and every copy on the CPU) is a plain memcpy.
void memory_copy_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                       const Stream& stream);
// `height` rows of `width` bytes within one device's memory, the rows `dst_pitch` and
// `src_pitch` bytes apart (a block of columns of a row-major matrix), enqueued on `stream`.
void memory_copy_2d_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                          size_t width, size_t height, Device d, const Stream& stream);
void memory_zero(void* dst, Device d, size_t bytes, const Stream& stream = {});
// Page-locked (pinned) host memory, which the GPU reads and writes by DMA, so copies to and from
// it overlap with host work. Ordinary 64-byte aligned host memory in a build without CUDA or on a
// machine without a GPU (nothing could copy to it asynchronously there anyway). Not counted in
// allocator_stats.
void* memory_allocate_pinned(size_t bytes);
void memory_free_pinned(void* ptr, size_t bytes);
void device_synchronize(Device d);

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in use by tensors now
  size_t reserved_bytes = 0;        // held from the system (in use + cached)
  size_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  size_t system_allocs = 0;         // cudaMalloc / aligned_alloc calls so far
};
AllocatorStats allocator_stats(Device d);
void allocator_reset_peak(Device d);
// Returns cached, unused device blocks to the system.
void allocator_empty_cache(Device d);

// A CUDA graph: the work queued on one stream between begin() and end() (cudaStreamBeginCapture,
// relaxed mode), replayed by launch() with no host launches between its kernels. The caching
// allocator's blocks handed out during the capture belong to the graph until it is destroyed
// (every replay writes them), so end() refuses a capture one of whose blocks is still held
// outside it. Scalars a replay needs fresh go through page-locked host memory copied in by a
// node of the graph (memory_copy_async from it is captured as such).
class CapturedGraph {
 public:
  // Starts capturing the work queued on `stream` (a CUDA stream).
  static Status begin(const Stream& stream);
  // Ends the capture begun on `stream` and instantiates it. On an error (CUDA refused an
  // operation of the capture, or a block of it is still in use) nothing of the capture ran, no
  // graph is kept, and the stream is usable again.
  static Result<std::unique_ptr<CapturedGraph>> end(const Stream& stream);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  // Queues one replay on `stream`.
  void launch(const Stream& stream) const;

 private:
  CapturedGraph() = default;
  Device device_;
  void* graph_ = nullptr;
  void* exec_ = nullptr;
  std::vector<void*> blocks_;  // the allocator's blocks its replays write
};

}  // namespace zt
