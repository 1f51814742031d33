// BlockCache (block_cache.h): free lists per (stream, size), and blocks kept aside until the
// events recorded on the other streams that used them have completed.
#include "zt/core/block_cache.h"

#include <algorithm>

#include "zt/core/assert.h"

namespace zt {

size_t BlockCache::round_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  constexpr size_t kSmall = 512, kLarge = 2u << 20, kSmallLimit = 1u << 20;
  if (bytes < kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void* BlockCache::take_free(size_t size, void* stream) {
  auto it = free_blocks_.find({stream, size});
  if (it == free_blocks_.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

void* BlockCache::allocate(size_t bytes, void* stream) {
  const size_t size = round_size(bytes);
  poll_pending();
  void* p = take_free(size, stream);
  if (p == nullptr) {
    p = device_.malloc(size);
    if (p == nullptr) {
      // Out of memory: wait for the blocks other streams still use (one may fit), then give
      // every unused block back and retry once.
      drain_pending();
      p = take_free(size, stream);
      if (p == nullptr) {
        release_free();
        p = device_.malloc(size);
        if (p == nullptr) return nullptr;
        stats_.reserved_bytes += size;
        stats_.system_allocs++;
      }
    } else {
      stats_.reserved_bytes += size;
      stats_.system_allocs++;
    }
  }
  live_[p] = Block{.size = size, .stream = stream, .other_streams = {}};
  if (log_ != nullptr) log_->push_back(p);
  stats_.allocated_bytes += size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return p;
}

void BlockCache::free(void* ptr) {
  auto it = live_.find(ptr);
  ZT_ASSERT(it != live_.end(), "freeing a pointer the caching allocator does not own");
  Block& b = it->second;
  stats_.allocated_bytes -= b.size;
  if (log_ != nullptr) log_->push_back(ptr);
  if (b.other_streams.empty()) {
    free_blocks_[{b.stream, b.size}].push_back(ptr);
  } else {
    Pending p{.ptr = ptr, .size = b.size, .stream = b.stream, .events = {}};
    for (void* s : b.other_streams) p.events.push_back(device_.event_record(s));
    pending_.push_back(std::move(p));
  }
  live_.erase(it);
}

bool BlockCache::reclaim(void* ptr) {
  for (auto& [key, ptrs] : free_blocks_) {
    auto it = std::find(ptrs.begin(), ptrs.end(), ptr);
    if (it == ptrs.end()) continue;
    ptrs.erase(it);
    live_[ptr] = Block{.size = key.second, .stream = key.first, .other_streams = {}};
    stats_.allocated_bytes += key.second;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    return true;
  }
  return false;
}

void BlockCache::record_stream(void* ptr, void* stream) {
  auto it = live_.find(ptr);
  ZT_ASSERT(it != live_.end(),
            "record_stream of a pointer the caching allocator does not own "
            "(it must be the start of a block)");
  Block& b = it->second;
  if (stream == b.stream) return;
  if (std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end()) {
    b.other_streams.push_back(stream);
  }
}

void BlockCache::poll_pending() {
  // Erase-in-place, keeping the order (oldest first) of the blocks still waiting.
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    while (!p.events.empty() && device_.event_done(p.events.back())) {
      device_.event_release(p.events.back());
      p.events.pop_back();
    }
    if (p.events.empty()) {
      free_blocks_[{p.stream, p.size}].push_back(p.ptr);
    } else {
      if (kept != i) pending_[kept] = std::move(p);
      ++kept;
    }
  }
  pending_.resize(kept);
}

void BlockCache::drain_pending() {
  for (Pending& p : pending_) {
    for (void* e : p.events) {
      device_.event_synchronize(e);
      device_.event_release(e);
    }
    free_blocks_[{p.stream, p.size}].push_back(p.ptr);
  }
  pending_.clear();
}

void BlockCache::release_free() {
  for (auto& [key, ptrs] : free_blocks_) {
    for (void* p : ptrs) {
      device_.free(p);
      stats_.reserved_bytes -= key.second;
    }
  }
  free_blocks_.clear();
}

void BlockCache::empty() {
  drain_pending();
  release_free();
}

}  // namespace zt
