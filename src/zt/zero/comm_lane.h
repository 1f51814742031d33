// CommLane: the stream ZeroState's collectives (gradient reductions, stage-3 gathers and
// prefetches) run on, and the events that order it with the compute stream (zero_optimization.
// overlap_comm; docs/zero.md "Communication stream").
//
// With overlap off, on the CPU, or on one device without a second stream, the lane is the compute
// stream itself and begin/end/consume do nothing: stream order already puts each collective
// between the kernels around it. With overlap on a CUDA device the lane is a dedicated stream, and
// every collective follows one protocol:
//
//   lane.begin();                        // the lane waits for the compute stream's work so far:
//                                        // the inputs are written, and the last users of any
//                                        // block just allocated for an output are done
//   comm.op(..., lane.stream());         // the collective, queued on the lane
//   auto done = lane.end(tensors);       // an event after it; its tensors are marked as used on
//                                        // the lane (Tensor::record_stream), so freeing them
//                                        // later is safe whatever the compute stream does
//   ...                                  // the compute stream runs on (the overlap)
//   lane.consume(done);                  // where the result is needed: the compute stream waits
//                                        // for the event (on the device; the host never blocks)
//
// Memory: a buffer the lane reads or writes must not be reused by the compute stream before the
// collective finished. The caching allocator gives a freed block to the next request on the
// stream it was allocated on, so end() records the lane's use of every tensor, and the allocator
// then keeps the block aside until the lane passed that point (core/block_cache.h).
#pragma once

#include <memory>
#include <span>

#include "zt/core/device.h"
#include "zt/core/tensor.h"

namespace zt::zero {

enum class CommOverlap : unsigned char { kOff, kOn };

// A collective's completion on the lane; null when the lane is the compute stream.
using CommDone = std::shared_ptr<Event>;

class CommLane {
 public:
  CommLane(Device device, Stream compute, CommOverlap overlap);

  // Whether collectives run on a stream of their own.
  bool separate() const { return ready_ != nullptr; }
  const Stream& stream() const { return separate() ? lane_ : compute_; }

  void begin();
  [[nodiscard]] CommDone end(std::span<const Tensor> used);
  void consume(const CommDone& done);

 private:
  Stream compute_;
  Stream lane_;
  std::unique_ptr<Event> ready_;  // recorded on the compute stream by begin()
};

}  // namespace zt::zero
