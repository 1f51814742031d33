#include "zt/core/device.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include <omp.h>

#include "zt/build_config.h"
#include "zt/core/assert.h"
#if ZT_HAVE_CUDA
#include "zt/core/cuda/cuda_backend.h"
#endif

namespace zt {
namespace {

// Host copies and zeroing of large buffers (offloaded master weights and optimizer state: GiBs
// at start-up) split over the OpenMP threads; one thread reaches a fraction of the memory
// bandwidth. Below 64 MiB one call is as fast.
constexpr size_t kParallelHostBytes = size_t{64} << 20;
constexpr size_t kHostSlice = size_t{4} << 20;

void host_memset_zero(void* dst, size_t bytes) {
  if (bytes < kParallelHostBytes || omp_in_parallel()) {
    std::memset(dst, 0, bytes);
    return;
  }
  const auto slices = static_cast<int64_t>((bytes + kHostSlice - 1) / kHostSlice);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < slices; ++i) {
    const size_t off = static_cast<size_t>(i) * kHostSlice;
    std::memset(static_cast<char*>(dst) + off, 0, std::min(kHostSlice, bytes - off));
  }
}

void host_memcpy(void* dst, const void* src, size_t bytes) {
  if (bytes < kParallelHostBytes || omp_in_parallel()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const auto slices = static_cast<int64_t>((bytes + kHostSlice - 1) / kHostSlice);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < slices; ++i) {
    const size_t off = static_cast<size_t>(i) * kHostSlice;
    std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off,
                std::min(kHostSlice, bytes - off));
  }
}

struct CpuStats {
  std::mutex mu;
  AllocatorStats stats;
};
CpuStats& cpu_stats() {
  static CpuStats s;
  return s;
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] [[maybe_unused]] void no_cuda() {
  ZT_ASSERT(false,
            "CUDA device used in a build without CUDA (device_check should have refused it)");
  std::abort();
}

}  // namespace

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Result<Device> device_parse(std::string_view s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda" || s == "gpu") return Device::cuda(0);
  if (s.starts_with("cuda:")) {
    std::string idx(s.substr(5));
    char* end = nullptr;
    long v = std::strtol(idx.c_str(), &end, 10);
    if (!idx.empty() && *end == '\0' && v >= 0 && v < 1024)
      return Device::cuda(static_cast<int>(v));
  }
  return invalid_argument("unknown device '{}'; expected cpu, cuda or cuda:N", s);
}

bool cuda_built() {
  return ZT_HAVE_CUDA != 0;
}

int cuda_device_count() {
#if ZT_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::string cuda_device_name(int index) {
#if ZT_HAVE_CUDA
  return cuda::device_name(index);
#else
  return "";
#endif
}

int64_t cuda_device_total_memory(int index) {
#if ZT_HAVE_CUDA
  return cuda::device_total_memory(index);
#else
  (void)index;
  return 0;
#endif
}

CudaVersions cuda_versions() {
  CudaVersions v;
#if ZT_HAVE_CUDA
  cuda::versions(&v.driver, &v.runtime, &v.toolkit, &v.cublas);
#endif
  return v;
}

int cuda_device_capability(int index) {
#if ZT_HAVE_CUDA
  return cuda::device_capability(index);
#else
  (void)index;
  return 0;
#endif
}

Status device_check(Device d) {
  if (d.is_cpu()) return Status::ok();
  if (!cuda_built()) {
    return unavailable(
        "device {} requested, but this ZeroTrain was built without CUDA; rebuild "
        "with the CUDA toolkit installed or use --device cpu",
        d.str());
  }
  int n = cuda_device_count();
  if (n == 0) {
    return unavailable(
        "device {} requested, but no CUDA GPU is visible (check nvidia-smi and "
        "CUDA_VISIBLE_DEVICES), or use --device cpu",
        d.str());
  }
  if (d.index >= n) {
    return unavailable("device {} requested, but only {} CUDA GPU(s) are visible", d.str(), n);
  }
  return Status::ok();
}

Stream Stream::create(Device device) {
  if (device.is_cpu()) return Stream(device, nullptr);
#if ZT_HAVE_CUDA
  return Stream(device, cuda::stream_create(device.index));
#else
  no_cuda();
#endif
}

void Stream::synchronize() const {
  if (device_.is_cpu()) return;
#if ZT_HAVE_CUDA
  cuda::stream_synchronize(handle_);
#endif
}

Status CapturedGraph::begin(const Stream& stream) {
  if (!stream.device().is_cuda()) return invalid_argument("CUDA graphs capture CUDA streams only");
#if ZT_HAVE_CUDA
  cuda::cache_capture_begin(stream.device().index);
  try {
    cuda::graph_begin(stream.handle());
  } catch (...) {
    (void)cuda::cache_capture_end(stream.device().index);  // (stop logging)
    throw;
  }
  return Status::ok();
#else
  no_cuda();
#endif
}

Result<std::unique_ptr<CapturedGraph>> CapturedGraph::end(const Stream& stream) {
#if ZT_HAVE_CUDA
  const int dev = stream.device().index;
  std::unique_ptr<CapturedGraph> g(new CapturedGraph());
  g->device_ = stream.device();
  const std::vector<void*> blocks = cuda::cache_capture_end(dev);
  const std::string err = cuda::graph_end(stream.handle(), &g->graph_, &g->exec_);
  if (!err.empty()) return unavailable("the CUDA graph capture failed: {}", err);
  for (void* p : blocks) {
    if (!cuda::cache_reclaim(dev, p)) {
      return unavailable(
          "the CUDA graph capture's memory at {} is still in use after it (a tensor made in the "
          "captured work outlived it); the graph is not used",
          p);
    }
    g->blocks_.push_back(p);
  }
  return g;
#else
  (void)stream;
  no_cuda();
#endif
}

CapturedGraph::~CapturedGraph() {
#if ZT_HAVE_CUDA
  cuda::graph_destroy(graph_, exec_);
  for (void* p : blocks_) cuda::cache_free(device_.index, p, 0);
#endif
}

void CapturedGraph::launch(const Stream& stream) const {
#if ZT_HAVE_CUDA
  cuda::graph_launch(exec_, stream.handle());
#else
  (void)stream;
  no_cuda();
#endif
}

Event::Event(Device device, EventTiming timing) : device_(device) {
#if ZT_HAVE_CUDA
  if (device.is_cuda()) {
    handle_ = cuda::event_create(device.index, timing == EventTiming::kTiming ? 1 : 0);
  }
#else
  (void)timing;
#endif
}

Event::~Event() {
#if ZT_HAVE_CUDA
  if (handle_ != nullptr) cuda::event_destroy(handle_);
#endif
}

void Event::record(const Stream& stream) {
  if (device_.is_cpu()) {
    cpu_time_ms_ = now_ms();
    return;
  }
#if ZT_HAVE_CUDA
  cuda::event_record(handle_, stream.handle());
#endif
}

void Event::wait(const Stream& stream) const {
#if ZT_HAVE_CUDA
  if (device_.is_cuda()) cuda::event_wait(handle_, stream.handle());
#endif
}

void Event::synchronize() const {
#if ZT_HAVE_CUDA
  if (device_.is_cuda()) cuda::event_synchronize(handle_);
#endif
}

float Event::elapsed_ms(const Event& end) const {
  if (device_.is_cpu()) return static_cast<float>(end.cpu_time_ms_ - cpu_time_ms_);
#if ZT_HAVE_CUDA
  return cuda::event_elapsed_ms(handle_, end.handle_);
#else
  no_cuda();
#endif
}

void EventSpans::begin(const Stream& stream) {
  ZT_ASSERT(!open_, "EventSpans::begin with a span open");
  open_ = std::make_unique<Event>(device_);
  open_->record(stream);
}

void EventSpans::end(const Stream& stream) {
  ZT_ASSERT(open_ != nullptr, "EventSpans::end without a begin");
  auto end = std::make_unique<Event>(device_);
  end->record(stream);
  spans_.emplace_back(std::move(open_), std::move(end));
}

double EventSpans::elapsed_ms(bool reset) {
  double ms = 0;
  for (auto& [begin, end] : spans_) {
    end->synchronize();
    ms += begin->elapsed_ms(*end);
  }
  if (reset) spans_.clear();
  return ms;
}

void* memory_allocate(Device d, size_t bytes, const Stream& stream) {
  if (d.is_cuda()) {
#if ZT_HAVE_CUDA
    return cuda::cache_allocate(d.index, bytes, stream.handle());
#else
    no_cuda();
#endif
  }
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  auto& s = cpu_stats();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.allocated_bytes += rounded;
  s.stats.reserved_bytes += rounded;
  s.stats.system_allocs++;
  if (s.stats.allocated_bytes > s.stats.peak_allocated_bytes) {
    s.stats.peak_allocated_bytes = s.stats.allocated_bytes;
  }
  return p;
}

void memory_free(Device d, void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  if (d.is_cuda()) {
#if ZT_HAVE_CUDA
    cuda::cache_free(d.index, ptr, bytes);
    return;
#else
    no_cuda();
#endif
  }
  std::free(ptr);
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  auto& s = cpu_stats();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.allocated_bytes -= rounded;
  s.stats.reserved_bytes -= rounded;
}

void memory_record_stream(Device d, void* ptr, const Stream& stream) {
  if (!d.is_cuda() || ptr == nullptr) return;
#if ZT_HAVE_CUDA
  cuda::cache_record_stream(d.index, ptr, stream.handle());
#else
  no_cuda();
#endif
}

void memory_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                 const Stream& stream) {
  memory_copy_async(dst, dst_dev, src, src_dev, bytes, stream);
#if ZT_HAVE_CUDA
  // Copies that touch host memory complete before returning, so host buffers are safe to reuse.
  if (bytes != 0 && (dst_dev.is_cpu() != src_dev.is_cpu())) {
    cuda::stream_synchronize(stream.handle());
  }
#endif
}

void memory_copy_async(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes,
                       const Stream& stream) {
  if (bytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    host_memcpy(dst, src, bytes);
    return;
  }
#if ZT_HAVE_CUDA
  const int kind = src_dev.is_cpu() ? 0 : (dst_dev.is_cpu() ? 1 : 2);
  cuda::memcpy_async(dst, src, bytes, kind, stream.handle());
#else
  no_cuda();
#endif
}

void memory_copy_2d_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                          size_t width, size_t height, Device d, const Stream& stream) {
  if (width == 0 || height == 0) return;
  if (d.is_cpu()) {
    for (size_t r = 0; r < height; ++r) {
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                  static_cast<const char*>(src) + r * src_pitch, width);
    }
    return;
  }
#if ZT_HAVE_CUDA
  cuda::memcpy_2d_async(dst, dst_pitch, src, src_pitch, width, height, stream.handle());
#else
  no_cuda();
#endif
}

#if ZT_HAVE_CUDA
namespace {

// Pinned blocks, to tell them from the ordinary blocks memory_allocate_pinned falls back to, and
// how each was made (true: a registered mapping, false: cudaHostAlloc).
struct PinnedBlocks {
  std::mutex mu;
  std::unordered_map<void*, bool> ptrs;
};

// From this size up, page-locked memory is a mapping faulted in by all OpenMP threads and then
// registered (cuda::host_register_pinned): 7-10x faster than cudaHostAlloc on an H200 host
// (bench/pinned_alloc_bench.cc, docs/performance.md), which matters for the tens of GiB
// ZeRO-Offload pins per rank at start-up. Smaller blocks keep cudaHostAlloc.
constexpr size_t kRegisterMinBytes = size_t{16} << 20;
PinnedBlocks& pinned_blocks() {
  static auto* b = new PinnedBlocks();  // never destroyed: tensors may be freed at exit
  return *b;
}

}  // namespace
#endif

void* memory_allocate_pinned(size_t bytes) {
#if ZT_HAVE_CUDA
  if (cuda_device_count() > 0) {
    const bool reg = bytes >= kRegisterMinBytes;
    void* p = reg ? cuda::host_register_pinned(bytes, omp_get_max_threads())
                  : cuda::host_alloc_pinned(bytes);
    auto& b = pinned_blocks();
    std::lock_guard<std::mutex> lock(b.mu);
    b.ptrs.emplace(p, reg);
    return p;
  }
#endif
  return memory_allocate(Device::cpu(), bytes);
}

void memory_free_pinned(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
#if ZT_HAVE_CUDA
  {
    auto& b = pinned_blocks();
    std::unique_lock<std::mutex> lock(b.mu);
    auto it = b.ptrs.find(ptr);
    if (it != b.ptrs.end()) {
      const bool reg = it->second;
      b.ptrs.erase(it);
      lock.unlock();
      if (reg) {
        cuda::host_unregister_pinned(ptr, bytes);
      } else {
        cuda::host_free_pinned(ptr);
      }
      return;
    }
  }
#endif
  memory_free(Device::cpu(), ptr, bytes);
}

void memory_zero(void* dst, Device d, size_t bytes, const Stream& stream) {
  if (bytes == 0) return;
  if (d.is_cpu()) {
    host_memset_zero(dst, bytes);
    return;
  }
#if ZT_HAVE_CUDA
  cuda::memset_async(dst, bytes, stream.handle());
#else
  no_cuda();
#endif
}

void device_synchronize(Device d) {
#if ZT_HAVE_CUDA
  if (d.is_cuda()) cuda::device_synchronize(d.index);
#endif
}

AllocatorStats allocator_stats(Device d) {
  if (d.is_cuda()) {
#if ZT_HAVE_CUDA
    return cuda::cache_stats(d.index);
#else
    return {};
#endif
  }
  auto& s = cpu_stats();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

void allocator_reset_peak(Device d) {
  if (d.is_cuda()) {
#if ZT_HAVE_CUDA
    cuda::cache_reset_peak(d.index);
#endif
    return;
  }
  auto& s = cpu_stats();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.peak_allocated_bytes = s.stats.allocated_bytes;
}

void allocator_empty_cache(Device d) {
#if ZT_HAVE_CUDA
  if (d.is_cuda()) cuda::cache_empty(d.index);
#endif
}

}  // namespace zt
