// BlockCache: the bookkeeping of the CUDA caching allocator (core/cuda/caching_allocator.cc),
// written against a small device interface (BlockCacheDevice) and free of CUDA, so that its rules
// are unit-tested on any machine (tests/unit/core/block_cache_test.cc) with a fake device. Not
// thread-safe: the caller holds a lock.
//
// The rules:
//  - Sizes are rounded (512 B below 1 MiB, multiples of 2 MiB from there) and a request is served
//    from the free list of (its stream, its rounded size), or from the device.
//  - A freed block returns to the free list of the stream it was allocated on. Work on one stream
//    runs in order, so the next user on that stream queues behind every earlier user: reuse
//    needs no synchronisation.
//  - record_stream(ptr, s) (PyTorch's Tensor.record_stream): the block is also used by work on
//    another stream s, e.g. a collective on the communication stream, which stream order does
//    not cover. When such a block is freed the cache records an event on each of those streams
//    (after the last work the host enqueued there) and keeps the block aside until every event
//    has completed. allocate() polls the blocks kept aside and never blocks the host; only
//    empty() and the out-of-memory retry wait for them.
//  - Memory goes back to the device only in empty() and, once per request, when the device is out
//    of memory (then every cached block is returned and the request retried).
#pragma once

#include <cstddef>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "zt/core/device.h"

namespace zt {

// What the cache needs from a device. Streams and events are opaque handles.
class BlockCacheDevice {
 public:
  virtual ~BlockCacheDevice() = default;
  virtual void* malloc(size_t bytes) = 0;  // nullptr when the device is out of memory
  virtual void free(void* ptr) = 0;
  virtual void* event_record(void* stream) = 0;  // a new event, recorded now on `stream`
  virtual bool event_done(void* event) = 0;      // completed? Never blocks.
  virtual void event_synchronize(void* event) = 0;
  virtual void event_release(void* event) = 0;  // the event is no longer needed
};

class BlockCache {
 public:
  explicit BlockCache(BlockCacheDevice& device) : device_(device) {}
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  static size_t round_size(size_t bytes);

  // A block of at least `bytes` for work on `stream`; nullptr when the device is out of memory
  // even after every cached block was returned to it.
  void* allocate(size_t bytes, void* stream);
  // `ptr` is a pointer allocate() returned (a bug otherwise).
  void free(void* ptr);
  // The block at `ptr` (as allocate() returned it) is also used by work on `stream`; a no-op for
  // the block's own stream.
  void record_stream(void* ptr, void* stream);
  // Waits for the blocks kept aside, then returns every unused block to the device.
  void empty();

  // CUDA graphs (core/device.h CapturedGraph). While a log is set, every block allocate() hands
  // out or free() takes back is appended to it (the graph's replays use both: a block made
  // before the capture and freed in it was read by the captured work).
  void set_allocation_log(std::vector<void*>* log) { log_ = log; }
  // Takes the free block at `ptr` (one allocate() returned and free() gave back) off the free
  // lists, allocated again: a captured graph's replays write the blocks its capture used, so
  // nothing else may get them while it lives (it frees them when destroyed). False when `ptr` is
  // not in a free list (still in use, or kept aside for another stream).
  bool reclaim(void* ptr);

  const AllocatorStats& stats() const { return stats_; }
  void reset_peak() { stats_.peak_allocated_bytes = stats_.allocated_bytes; }
  // Blocks freed but kept aside for another stream's work (tests, diagnostics).
  size_t pending_blocks() const { return pending_.size(); }

 private:
  struct Block {
    size_t size = 0;
    void* stream = nullptr;
    std::vector<void*> other_streams;  // from record_stream
  };
  struct Pending {
    void* ptr = nullptr;
    size_t size = 0;
    void* stream = nullptr;
    std::vector<void*> events;  // one per other stream; the block is free when all completed
  };

  void* take_free(size_t size, void* stream);
  void poll_pending();
  void drain_pending();
  void release_free();

  BlockCacheDevice& device_;
  std::map<std::pair<void*, size_t>, std::vector<void*>> free_blocks_;  // (stream, size) -> ptrs
  std::unordered_map<void*, Block> live_;
  std::vector<Pending> pending_;
  AllocatorStats stats_;
  std::vector<void*>* log_ = nullptr;
};

}  // namespace zt
