// The CUDA caching allocator: core/block_cache.h (the rules: free lists per (stream, size), blocks
// used by another stream kept aside until that stream's work on them completed) over cudaMalloc,
// cudaFree and a pool of CUDA events. Shapes in a training step repeat, so after the first step no
// cudaMalloc/cudaFree happens. A failed cudaMalloc empties the cache and retries once; if it still
// fails, the allocation throws GpuOutOfMemory (the user's configuration, not a bug).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "zt/core/block_cache.h"
#include "zt/core/cuda/cuda_backend.h"
#include "zt/core/cuda/cuda_check.h"

namespace zt::cuda {
namespace {

// BlockCacheDevice over the CUDA runtime for one device. Events come from a pool (sync-only, no
// timing), so freeing a block that another stream used costs a cudaEventRecord, no creation.
class CudaBlockDevice final : public BlockCacheDevice {
 public:
  explicit CudaBlockDevice(int device) : device_(device) {}

  void* malloc(size_t bytes) override {
    ZT_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: the cache retries, or the caller reports it
      return nullptr;
    }
    ZT_CUDA_CHECK(err);
    return p;
  }
  void free(void* ptr) override {
    ZT_CUDA_CHECK(cudaSetDevice(device_));
    ZT_CUDA_CHECK(cudaFree(ptr));
  }
  void* event_record(void* stream) override {
    ZT_CUDA_CHECK(cudaSetDevice(device_));
    cudaEvent_t e = nullptr;
    if (events_.empty()) {
      ZT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } else {
      e = events_.back();
      events_.pop_back();
    }
    ZT_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream)));
    return e;
  }
  bool event_done(void* event) override {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    ZT_CUDA_CHECK(err);
    return true;
  }
  void event_synchronize(void* event) override {
    ZT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
  void event_release(void* event) override { events_.push_back(static_cast<cudaEvent_t>(event)); }

 private:
  int device_;
  std::vector<cudaEvent_t> events_;
};

struct DeviceCache {
  explicit DeviceCache(int device) : dev(device), cache(dev) {}
  CudaBlockDevice dev;
  BlockCache cache;
  std::vector<void*> capture_log;  // blocks handed out during a graph capture
};

std::mutex g_mu;
DeviceCache& cache_of(int device) {
  // Never destroyed: tensors may be freed during exit.
  static auto* caches = new std::unordered_map<int, std::unique_ptr<DeviceCache>>();
  auto& c = (*caches)[device];
  if (!c) c = std::make_unique<DeviceCache>(device);
  return *c;
}

}  // namespace

void* cache_allocate(int device, size_t bytes, void* stream) {
  std::lock_guard<std::mutex> lock(g_mu);
  BlockCache& c = cache_of(device).cache;
  void* p = c.allocate(bytes, stream);
  if (p != nullptr) return p;
  size_t free_b = 0, total_b = 0;
  (void)cudaMemGetInfo(&free_b, &total_b);
  (void)cudaGetLastError();
  // Running out of memory is the user's configuration, not a bug: it travels up as an exception
  // (the CLI prints it as one error line and exits 1).
  throw GpuOutOfMemory(fmt::format(
      "out of GPU memory on cuda:{} allocating {:.1f} MiB ({:.1f} MiB in use by ZeroTrain, "
      "{:.1f} MiB free of {:.1f} MiB); lower the micro-batch size, use a higher ZeRO stage, or "
      "enable offload",
      device, BlockCache::round_size(bytes) / 1048576.0, c.stats().allocated_bytes / 1048576.0,
      free_b / 1048576.0, total_b / 1048576.0));
}

void cache_free(int device, void* ptr, size_t /*bytes*/) {
  std::lock_guard<std::mutex> lock(g_mu);
  cache_of(device).cache.free(ptr);
}

void cache_record_stream(int device, void* ptr, void* stream) {
  std::lock_guard<std::mutex> lock(g_mu);
  cache_of(device).cache.record_stream(ptr, stream);
}

AllocatorStats cache_stats(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  return cache_of(device).cache.stats();
}

void cache_reset_peak(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  cache_of(device).cache.reset_peak();
}

void cache_empty(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  cache_of(device).cache.empty();
}

void cache_capture_begin(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceCache& c = cache_of(device);
  c.capture_log.clear();
  c.cache.set_allocation_log(&c.capture_log);
}

std::vector<void*> cache_capture_end(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceCache& c = cache_of(device);
  c.cache.set_allocation_log(nullptr);
  std::vector<void*> blocks;
  for (void* p : c.capture_log) {
    if (std::find(blocks.begin(), blocks.end(), p) == blocks.end()) blocks.push_back(p);
  }
  c.capture_log.clear();
  return blocks;
}

bool cache_reclaim(int device, void* ptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  return cache_of(device).cache.reclaim(ptr);
}

}  // namespace zt::cuda
