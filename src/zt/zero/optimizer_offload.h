// ZeRO-Offload of the optimizer (DeepSpeed's zero_optimization.offload_optimizer {device: cpu};
// DESIGN.md "Offload"; docs/zero.md "Offloading the optimizer to the CPU"). ZeroState keeps the
// fp32 master weights and optimizer state of this rank's own chunks in host memory
// (OptimizerPlacement); at the accumulation boundary this class steps them there:
//
//   for each piece of the own chunks (a unit's chunk, cut into pieces of at most
//   offload_piece_elements, or whole parameter tensors for Lamb):
//     copy stream A  reduced f32 gradient piece, device -> pinned staging slot
//     host           CPU optimizer kernel (kernels/cpu, OpenMP) on the host master and state,
//                    writing the 16-bit result into a pinned staging slot (16-bit training)
//     copy stream B  updated piece, host -> the own chunk of the compute copy on the device
//
// pipelined over two slots: the gradient of piece i+1 crosses the bus while the CPU steps piece
// i, and the result of piece i crosses back while the CPU steps piece i+1. The compute stream
// waits for the last copy back, then ZeroState::publish_params all-gathers the compute copy as
// without offload.
//
// The math is the engine's: it computes the overflow check, the gradient norm and the combined
// unscale/clip factor on the device as always, and passes them in StepValues; only where the
// optimizer kernel runs changes. Assumes the reductions of the step were enqueued on the compute
// stream before step() (Engine::apply_step runs after every backward's finish_pass).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "zt/core/tensor.h"
#include "zt/nn/model.h"
#include "zt/optim/optimizer.h"

namespace zt::zero {

class ZeroState;

// Wall-clock time of the last host step, for benchmarks and logs.
struct OffloadTimes {
  double total_ms = 0;  // step(): first copy issued to the last copy enqueued
  double cpu_ms = 0;    // in the CPU optimizer kernels
  double wait_ms = 0;   // the host waiting for gradient pieces to arrive
  int64_t pieces = 0;
};

class OptimizerOffload {
 public:
  // `zero` must be offloaded (ZeroState::offloaded()) and outlive this object.
  OptimizerOffload(ZeroState& zero, nn::Model& model);
  ~OptimizerOffload();
  OptimizerOffload(const OptimizerOffload&) = delete;
  OptimizerOffload& operator=(const OptimizerOffload&) = delete;

  // One optimizer step of every own chunk on the host (optimizer.begin_step() once, then the
  // kernels piece by piece); the updated compute copy's own chunks are on the device, ordered
  // before later work on the compute stream, when it returns.
  void step(optim::Optimizer& optimizer, const optim::StepValues& v);

  // Bytes of the staging slots (page-locked host memory).
  int64_t staging_bytes() const;
  const OffloadTimes& last_times() const { return times_; }

 private:
  static constexpr int kSlots = 2;
  // A range of one unit's own chunk that the host steps as one call of the optimizer.
  struct Piece {
    int unit = 0;
    int64_t offset = 0;  // elements into the unit's own chunk
    int64_t n = 0;
    // Sub-ranges (offset relative to the piece, length) passed as separate optimizer chunks:
    // one per parameter tensor for Lamb, else the whole piece.
    std::vector<std::pair<int64_t, int64_t>> tensors;
  };
  struct Slot {
    Tensor grad;                          // f32, the largest piece
    Tensor lowp;                          // compute dtype (16-bit training only)
    std::unique_ptr<Event> grad_arrived;  // the gradient copy into `grad` finished
    std::unique_ptr<Event> lowp_sent;     // the copy out of `lowp` (or the master) finished
  };
  void plan_pieces(nn::Model& model);
  void copy_grad_in(size_t piece);

  ZeroState& zero_;
  Device device_;
  bool write_lowp_ = false;  // 16-bit compute copy: the kernel writes it into a staging slot
  std::vector<Piece> pieces_;
  std::array<Slot, kSlots> slots_;
  Stream to_host_, to_device_;    // one copy stream per direction (the bus is full duplex)
  std::unique_ptr<Event> ready_;  // on the compute stream: gradients reduced, compute copy idle
  std::unique_ptr<Event> done_;   // on to_device_: every updated piece is on the device
  OffloadTimes times_;
};

}  // namespace zt::zero
