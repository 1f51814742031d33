// CommLane (comm_lane.h): the communication stream and its events.
#include "zt/zero/comm_lane.h"

namespace zt::zero {

CommLane::CommLane(Device device, Stream compute, CommOverlap overlap) : compute_(compute) {
  if (overlap == CommOverlap::kOn && device.is_cuda()) {
    // A blocking stream, like the compute stream: host reads made on the legacy default stream
    // (Tensor::to_doubles) then also wait for collectives still running here.
    lane_ = Stream::create(device);
    ready_ = std::make_unique<Event>(device, EventTiming::kSyncOnly);
  }
}

void CommLane::begin() {
  if (!separate()) return;
  // One event serves every begin(): cudaStreamWaitEvent takes the event's state at the call, so
  // recording it again later does not disturb a wait already queued.
  ready_->record(compute_);
  ready_->wait(lane_);
}

CommDone CommLane::end(std::span<const Tensor> used) {
  if (!separate()) return nullptr;
  for (const Tensor& t : used) t.record_stream(lane_);
  auto done = std::make_shared<Event>(compute_.device(), EventTiming::kSyncOnly);
  done->record(lane_);
  return done;
}

void CommLane::consume(const CommDone& done) {
  if (done != nullptr) done->wait(compute_);
}

}  // namespace zt::zero
