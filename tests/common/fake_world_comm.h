// Rank `rank` of a world of `world` ranks whose collectives do nothing (each returns a finished
// handle and leaves its tensors as they are): enough to build a ZeroState or start an Engine as
// one rank of a large world and count what it would hold, without the other ranks.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "zt/comm/communicator.h"
#include "zt/core/assert.h"

namespace zt::testing {

class FakeWorldComm final : public Communicator {
 public:
  FakeWorldComm(int world, int rank, Device device = Device::cpu())
      : world_(world), rank_(rank), device_(device) {
    auto c = communicator_create(DistEnv{}, Device::cpu());
    ZT_ASSERT(c.is_ok(), "stub");
    inner_ = std::move(c).value();
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  Device device() const override { return device_; }
  std::string_view backend_name() const override { return "fake"; }
  CommHandle all_reduce(Tensor&, ReduceOp, std::optional<Stream>) override { return done(); }
  CommHandle reduce_scatter(Tensor&, const Tensor&, ReduceOp, std::optional<Stream>) override {
    return done();
  }
  CommHandle all_reduce_coalesced(std::span<Tensor>, ReduceOp, std::optional<Stream>) override {
    return done();
  }
  CommHandle reduce_scatter_coalesced(std::span<Tensor>, std::span<const Tensor>, ReduceOp,
                                      std::optional<Stream>) override {
    return done();
  }
  CommHandle all_gather(Tensor&, const Tensor&, std::optional<Stream>) override { return done(); }
  CommHandle broadcast(Tensor&, int, std::optional<Stream>) override { return done(); }
  CommHandle send(const Tensor&, int, std::optional<Stream>) override { return done(); }
  CommHandle recv(Tensor&, int, std::optional<Stream>) override { return done(); }
  CommHandle barrier(std::optional<Stream>) override { return done(); }

 private:
  CommHandle done() { return inner_->barrier(); }
  int world_, rank_;
  Device device_;
  std::unique_ptr<Communicator> inner_;
};

}  // namespace zt::testing
