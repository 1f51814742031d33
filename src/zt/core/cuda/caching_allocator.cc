// The CUDA caching allocator. Blocks are rounded (512 B below 1 MiB, 2 MiB above) and, when
// freed, kept in a per-(device, stream, size) free list for the next request of that size on
// that stream: work queued on the stream that used the block finishes before any later work on
// the same stream can touch it, so reuse needs no synchronisation. Shapes in a training step
// repeat, so after the first step no cudaMalloc/cudaFree happens. Memory is returned to the
// system only by cache_empty() (or, once, when cudaMalloc fails: empty the cache and retry).
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "zt/core/cuda/cuda_backend.h"
#include "zt/core/cuda/cuda_check.h"

namespace zt::cuda {
namespace {

struct BlockInfo {
  size_t size;
  void* stream;
};

struct DeviceCache {
  std::map<std::pair<void*, size_t>, std::vector<void*>> free_blocks;  // (stream, size) -> ptrs
  std::unordered_map<void*, BlockInfo> live;
  AllocatorStats stats;
};

std::mutex g_mu;
std::unordered_map<int, DeviceCache>& caches() {
  static auto* c = new std::unordered_map<int, DeviceCache>();  // never destroyed: used at exit
  return *c;
}

size_t round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  constexpr size_t kSmall = 512, kLarge = 2u << 20, kSmallLimit = 1u << 20;
  if (bytes < kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void release_cached(int device, DeviceCache& c) {
  ZT_CUDA_CHECK(cudaSetDevice(device));
  for (auto& [key, ptrs] : c.free_blocks) {
    for (void* p : ptrs) {
      ZT_CUDA_CHECK(cudaFree(p));
      c.stats.reserved_bytes -= key.second;
    }
  }
  c.free_blocks.clear();
}

}  // namespace

void* cache_allocate(int device, size_t bytes, void* stream) {
  size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceCache& c = caches()[device];
  void* p = nullptr;
  auto it = c.free_blocks.find({stream, size});
  if (it != c.free_blocks.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    ZT_CUDA_CHECK(cudaSetDevice(device));
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached(device, c);
      err = cudaMalloc(&p, size);
    }
    if (err != cudaSuccess) {
      size_t free_b = 0, total_b = 0;
      (void)cudaGetLastError();
      (void)cudaMemGetInfo(&free_b, &total_b);
      std::string msg = fmt::format(
          "out of GPU memory on cuda:{} allocating {:.1f} MiB ({:.1f} MiB in use by ZeroTrain, "
          "{:.1f} MiB free of {:.1f} MiB); lower the micro-batch size, use a higher ZeRO stage, "
          "or enable offload",
          device, size / 1048576.0, c.stats.allocated_bytes / 1048576.0, free_b / 1048576.0,
          total_b / 1048576.0);
      // Running out of memory is the user's configuration, not a bug: it travels up as an
      // exception (the CLI prints it as one error line and exits 1).
      if (err == cudaErrorMemoryAllocation) throw GpuOutOfMemory(msg);
      ::zt::detail::assert_fail(__FILE__, __LINE__, "cudaMalloc", cudaGetErrorString(err));
    }
    c.stats.reserved_bytes += size;
    c.stats.system_allocs++;
  }
  c.live[p] = {size, stream};
  c.stats.allocated_bytes += size;
  if (c.stats.allocated_bytes > c.stats.peak_allocated_bytes) {
    c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
  }
  return p;
}

void cache_free(int device, void* ptr, size_t /*bytes*/) {
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceCache& c = caches()[device];
  auto it = c.live.find(ptr);
  ZT_ASSERT(it != c.live.end(), "freeing a pointer the caching allocator does not own");
  c.free_blocks[{it->second.stream, it->second.size}].push_back(ptr);
  c.stats.allocated_bytes -= it->second.size;
  c.live.erase(it);
}

AllocatorStats cache_stats(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  return caches()[device].stats;
}

void cache_reset_peak(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto& s = caches()[device].stats;
  s.peak_allocated_bytes = s.allocated_bytes;
}

void cache_empty(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  release_cached(device, caches()[device]);
}

}  // namespace zt::cuda
