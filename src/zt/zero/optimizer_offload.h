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
class OptimizerSwap;
class SwapBuffer;
struct ZeroOptions;

// A range of one unit's own chunk that the host steps as one call of the optimizer, and (NVMe)
// reads and writes as one request.
struct OffloadPiece {
  int unit = 0;
  int64_t offset = 0;  // elements into the unit's own chunk
  int64_t n = 0;
  // Sub-ranges (offset relative to the piece, length) passed as separate optimizer chunks: one
  // per parameter tensor for Lamb, else the whole piece.
  std::vector<std::pair<int64_t, int64_t>> tensors;
  int64_t file_offset = 0;  // NVMe: where the piece's blocks start in the swap file
};

// The pieces of every trainable unit's own chunk on this rank, in unit order: pieces of at most
// options.offload_piece_elements (Adam, SGD), or whole units with one chunk per parameter tensor
// (Lamb). Needs only the model's shapes, so the swap file can be laid out before any value exists.
std::vector<OffloadPiece> plan_offload_pieces(nn::Model& model, const ZeroOptions& options,
                                              int world, int rank);

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
  // A failed read or write of the NVMe swap file is returned (the step is then incomplete: the
  // run must stop, and the last checkpoint is what survives).
  Status step(optim::Optimizer& optimizer, const optim::StepValues& v);

  // Bytes of the staging slots (page-locked host memory).
  int64_t staging_bytes() const;
  const OffloadTimes& last_times() const { return times_; }

 private:
  static constexpr int kSlots = 2;
  struct Slot {
    Tensor grad;                          // f32, the largest piece
    Tensor lowp;                          // compute dtype (16-bit training only)
    // offload_param nvme: the updated piece, aligned for O_DIRECT, while it is written to the
    // parameter swap file (param_writing: a write is in flight).
    std::unique_ptr<SwapBuffer> param_out;
    int64_t param_ticket = 0;
    bool param_writing = false;
    std::unique_ptr<Event> grad_arrived;  // the gradient copy into `grad` finished
    std::unique_ptr<Event> lowp_sent;     // the copy out of `lowp` (or the master) finished
  };
  void copy_grad_in(size_t piece);
  // The host step of piece i with its master and state at `master`, `state1`, `state2`.
  void step_piece(optim::Optimizer& optimizer, const optim::StepValues& v, size_t i, float* master,
                  float* state1, float* state2);
  // The updated piece i to the own chunk of the compute copy (16-bit from the slot, or f32 from
  // `master`), recorded on the slot's lowp_sent.
  // A failed write of the parameter swap file (offload_param nvme) is returned.
  Status send_piece(size_t i, const float* master);
  Status finish_param_writes();
  // offload_param cpu in 16-bit: the kernel writes piece p's values into the unit's chunk in
  // host memory itself (host_chunk: where the piece starts there).
  bool lowp_in_host_chunk(const OffloadPiece& p);
  void* host_chunk(const OffloadPiece& p);
  Status step_swapped(optim::Optimizer& optimizer, const optim::StepValues& v);

  ZeroState& zero_;
  Device device_;
  bool write_lowp_ = false;  // 16-bit compute copy: the kernel writes it into a staging slot
  OptimizerSwap* swap_ = nullptr;  // NVMe: the swap file the master and state live in
  std::vector<OffloadPiece> pieces_;
  std::array<Slot, kSlots> slots_;
  Stream to_host_, to_device_;    // one copy stream per direction (the bus is full duplex)
  std::unique_ptr<Event> ready_;  // on the compute stream: gradients reduced, compute copy idle
  std::unique_ptr<Event> done_;   // on to_device_: every updated piece is on the device
  OffloadTimes times_;
};

}  // namespace zt::zero
