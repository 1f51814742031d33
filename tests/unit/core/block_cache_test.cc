// Tests of BlockCache (src/zt/core/block_cache.h), the rules of the CUDA caching allocator, over a
// fake device whose events complete only when the test says so. The oracle is the rule as
// documented: a block freed with no other stream's use serves the next request of its (stream,
// size) at once; a block another stream used serves none before every event recorded on those
// streams at the free has completed; waiting happens only in empty() and on out-of-memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include "zt/core/block_cache.h"

namespace zt {
namespace {

void* stream(int i) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 * (i + 1)));
}

// Memory from malloc (real, distinct pointers), at most `capacity` bytes at once; events are
// ids whose completion the test sets, and which record the stream they were recorded on.
class FakeDevice final : public BlockCacheDevice {
 public:
  size_t capacity = SIZE_MAX;
  size_t in_use = 0;
  int mallocs = 0;
  int frees = 0;
  int synchronized = 0;
  std::map<void*, size_t> blocks;
  struct FakeEvent {
    void* stream;
    bool done;
  };
  std::map<intptr_t, FakeEvent> events;  // live events
  intptr_t next_event = 1;

  ~FakeDevice() override {
    for (auto& [p, n] : blocks) std::free(p);
  }
  void* malloc(size_t bytes) override {
    if (in_use + bytes > capacity) return nullptr;
    void* p = std::malloc(bytes);
    blocks[p] = bytes;
    in_use += bytes;
    ++mallocs;
    return p;
  }
  void free(void* ptr) override {
    in_use -= blocks.at(ptr);
    blocks.erase(ptr);
    std::free(ptr);
    ++frees;
  }
  void* event_record(void* s) override {
    intptr_t id = next_event++;
    events[id] = {s, false};
    return reinterpret_cast<void*>(id);
  }
  bool event_done(void* e) override { return events.at(reinterpret_cast<intptr_t>(e)).done; }
  void event_synchronize(void* e) override {
    events.at(reinterpret_cast<intptr_t>(e)).done = true;
    ++synchronized;
  }
  void event_release(void* e) override { events.erase(reinterpret_cast<intptr_t>(e)); }

  // The work queued so far on stream `s` completes.
  void complete(void* s) {
    for (auto& [id, ev] : events) {
      if (ev.stream == s) ev.done = true;
    }
  }
  std::set<void*> event_streams() const {
    std::set<void*> out;
    for (const auto& [id, ev] : events) out.insert(ev.stream);
    return out;
  }
};

constexpr size_t kSize = 4096;  // a multiple of 512: not rounded further

TEST(BlockCache, RoundsSmallTo512BytesAndLargeTo2MiB) {
  EXPECT_EQ(BlockCache::round_size(0), 512u);
  EXPECT_EQ(BlockCache::round_size(1), 512u);
  EXPECT_EQ(BlockCache::round_size(513), 1024u);
  EXPECT_EQ(BlockCache::round_size((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(BlockCache::round_size(1u << 20), 2u << 20);
  EXPECT_EQ(BlockCache::round_size((2u << 20) + 1), 4u << 20);
}

TEST(BlockCache, FreedBlockServesTheNextRequestOfItsStreamAndSizeOnly) {
  FakeDevice dev;
  BlockCache cache(dev);
  void* a = cache.allocate(kSize, stream(0));
  cache.free(a);
  EXPECT_EQ(cache.allocate(kSize, stream(0)), a);  // same stream and size: reused at once
  EXPECT_EQ(dev.mallocs, 1);
  cache.free(a);
  void* other_stream = cache.allocate(kSize, stream(1));
  void* other_size = cache.allocate(2 * kSize, stream(0));
  EXPECT_NE(other_stream, a);
  EXPECT_NE(other_size, a);
  EXPECT_EQ(dev.mallocs, 3);
  EXPECT_TRUE(dev.events.empty());  // no other stream used a block: no event
  EXPECT_EQ(cache.stats().allocated_bytes, 3 * kSize);
  EXPECT_EQ(cache.stats().reserved_bytes, 4 * kSize);
}

TEST(BlockCache, BlockUsedOnAnotherStreamWaitsForThatStreamBeforeReuse) {
  FakeDevice dev;
  BlockCache cache(dev);
  void* compute = stream(0);
  void* comm = stream(1);
  void* a = cache.allocate(kSize, compute);
  cache.record_stream(a, comm);  // e.g. a collective on the communication stream reads it
  cache.free(a);
  EXPECT_EQ(cache.pending_blocks(), 1u);
  EXPECT_EQ(dev.event_streams(), std::set<void*>{comm});  // the event is on the other stream
  // The collective has not finished: the next request must not get `a`, and must not wait.
  void* b = cache.allocate(kSize, compute);
  EXPECT_NE(b, a);
  EXPECT_EQ(dev.synchronized, 0);
  EXPECT_EQ(cache.pending_blocks(), 1u);
  // Work on the compute stream finishing does not release it either.
  dev.complete(compute);
  void* c = cache.allocate(kSize, compute);
  EXPECT_NE(c, a);
  // Once the communication stream passed the event, `a` serves its own stream again.
  dev.complete(comm);
  EXPECT_EQ(cache.allocate(kSize, compute), a);
  EXPECT_EQ(cache.pending_blocks(), 0u);
  EXPECT_TRUE(dev.events.empty());  // the event went back
  EXPECT_EQ(dev.synchronized, 0);   // the host never waited
}

TEST(BlockCache, BlockUsedOnSeveralStreamsWaitsForAll) {
  FakeDevice dev;
  BlockCache cache(dev);
  void* a = cache.allocate(kSize, stream(0));
  cache.record_stream(a, stream(1));
  cache.record_stream(a, stream(2));
  cache.record_stream(a, stream(1));  // twice: one event
  cache.free(a);
  EXPECT_EQ(dev.events.size(), 2u);
  dev.complete(stream(2));
  EXPECT_NE(cache.allocate(kSize, stream(0)), a);
  dev.complete(stream(1));
  EXPECT_EQ(cache.allocate(kSize, stream(0)), a);
}

TEST(BlockCache, RecordingTheBlocksOwnStreamChangesNothing) {
  FakeDevice dev;
  BlockCache cache(dev);
  void* a = cache.allocate(kSize, stream(0));
  cache.record_stream(a, stream(0));
  cache.free(a);
  EXPECT_EQ(cache.pending_blocks(), 0u);
  EXPECT_TRUE(dev.events.empty());
  EXPECT_EQ(cache.allocate(kSize, stream(0)), a);
}

TEST(BlockCache, RecordingOnlyCountsUntilTheBlockIsFreed) {
  // A later owner of the same block starts with no other stream.
  FakeDevice dev;
  BlockCache cache(dev);
  void* a = cache.allocate(kSize, stream(0));
  cache.record_stream(a, stream(1));
  cache.free(a);
  dev.complete(stream(1));
  ASSERT_EQ(cache.allocate(kSize, stream(0)), a);
  cache.free(a);
  EXPECT_EQ(cache.pending_blocks(), 0u);
  EXPECT_EQ(cache.allocate(kSize, stream(0)), a);
}

TEST(BlockCache, EmptyWaitsForPendingBlocksAndReturnsEverything) {
  FakeDevice dev;
  BlockCache cache(dev);
  void* a = cache.allocate(kSize, stream(0));
  void* b = cache.allocate(kSize, stream(0));
  void* live = cache.allocate(kSize, stream(0));
  cache.record_stream(a, stream(1));
  cache.free(a);
  cache.free(b);
  cache.empty();
  EXPECT_EQ(dev.synchronized, 1);
  EXPECT_EQ(dev.frees, 2);
  EXPECT_EQ(dev.blocks.size(), 1u);  // only the live block is left
  EXPECT_TRUE(dev.blocks.count(live));
  EXPECT_EQ(cache.stats().reserved_bytes, kSize);
  cache.free(live);
}

TEST(BlockCache, OutOfMemoryWaitsForPendingBlocksThenRetries) {
  FakeDevice dev;
  dev.capacity = 2 * kSize;
  BlockCache cache(dev);
  void* a = cache.allocate(kSize, stream(0));
  void* b = cache.allocate(2 * kSize - kSize, stream(1));
  cache.record_stream(a, stream(1));
  cache.free(a);
  cache.free(b);
  // Full: the pending block of the right size is waited for and reused.
  EXPECT_EQ(cache.allocate(kSize, stream(0)), a);
  EXPECT_EQ(dev.synchronized, 1);
  // Full again for another size: every cached block (b) goes back, then the retry fits.
  cache.free(a);
  void* big = cache.allocate(kSize + 512, stream(0));
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(dev.frees, 2);  // a and b
  // Nothing left to give back: nullptr, the caller reports out of memory.
  EXPECT_EQ(cache.allocate(kSize, stream(0)), nullptr);
  cache.free(big);
}

TEST(BlockCache, PeakTracksTheHighestAllocation) {
  FakeDevice dev;
  BlockCache cache(dev);
  void* a = cache.allocate(kSize, stream(0));
  void* b = cache.allocate(kSize, stream(0));
  cache.free(a);
  EXPECT_EQ(cache.stats().peak_allocated_bytes, 2 * kSize);
  cache.reset_peak();
  EXPECT_EQ(cache.stats().peak_allocated_bytes, kSize);
  cache.free(b);
  EXPECT_EQ(cache.stats().allocated_bytes, 0u);
}

// A CUDA graph's capture: the log names every block handed out or freed in it (one made before
// the capture and freed in it too); the blocks free at its end are reclaimed, so no later request
// gets them, and a block kept aside for another stream or still in use cannot be.
TEST(BlockCache, CaptureLogAndReclaimKeepTheGraphsBlocksFromOtherRequests) {
  FakeDevice dev;
  BlockCache cache(dev);
  void* before = cache.allocate(kSize, stream(0));  // (not logged: made and kept outside)
  void* made_before = cache.allocate(4 * kSize, stream(0));
  std::vector<void*> log;
  cache.set_allocation_log(&log);
  void* a = cache.allocate(kSize, stream(0));
  cache.free(a);
  void* again = cache.allocate(kSize, stream(0));  // the same block, reused within the capture
  void* b = cache.allocate(2 * kSize, stream(0));
  void* shared = cache.allocate(kSize, stream(0));
  cache.record_stream(shared, stream(1));
  cache.free(again);
  cache.free(b);
  cache.free(shared);  // kept aside until stream 1's event completes
  cache.free(made_before);
  cache.set_allocation_log(nullptr);
  EXPECT_EQ(std::set<void*>(log.begin(), log.end()), (std::set<void*>{a, b, shared, made_before}));
  EXPECT_EQ(log.size(), 9u);  // a: 2 allocations, 2 frees; b, shared: 1 each; made_before: 1
  EXPECT_TRUE(cache.reclaim(a));
  EXPECT_TRUE(cache.reclaim(b));
  EXPECT_TRUE(cache.reclaim(made_before));
  EXPECT_FALSE(cache.reclaim(a));       // already taken back
  EXPECT_FALSE(cache.reclaim(shared));  // not free yet (another stream)
  EXPECT_FALSE(cache.reclaim(before));  // in use
  EXPECT_EQ(cache.stats().allocated_bytes, 8 * kSize);  // before, a, b (2x), made_before (4x)
  void* next = cache.allocate(kSize, stream(0));
  EXPECT_NE(next, a);
  EXPECT_NE(next, before);
  void* next_large = cache.allocate(2 * kSize, stream(0));
  EXPECT_NE(next_large, b);
  // The graph gives them back when it goes: then they serve requests again.
  cache.free(a);
  EXPECT_EQ(cache.allocate(kSize, stream(0)), a);
  EXPECT_EQ(log.size(), 9u);  // (the log was detached: nothing more appended)
}

TEST(BlockCacheDeathTest, FreeOrRecordOfAForeignPointerAborts) {
  FakeDevice dev;
  BlockCache cache(dev);
  int x = 0;
  EXPECT_DEATH(cache.free(&x), "does not own");
  EXPECT_DEATH(cache.record_stream(&x, stream(1)), "does not own");
}

}  // namespace
}  // namespace zt
