// ZeRO-Infinity's optimizer swap (zero_optimization.offload_optimizer {device: nvme}; DESIGN.md
// "Offload"; docs/zero.md "Swapping the optimizer state to NVMe"). The fp32 master weights and the
// optimizer state of this rank's own chunks live in one file under nvme_path instead of host
// memory:
//
//   <nvme_path>/zero_stage_<S>/optimizer/rank<R>/optimizer_state.swp
//
// laid out piece by piece, in the pieces OptimizerOffload steps (plan_offload_pieces): piece p
// holds `kinds` blocks (master, then each optimizer state buffer) of its n f32 values, each block
// padded to the O_DIRECT alignment, so that one piece is one contiguous read and one write.
// The file is created (and its space reserved) at start-up and removed when the run ends.
//
// The step pipeline (OptimizerOffload::step) reads piece i+1 into one staging slot while the CPU
// steps piece i in another and piece i-1 is written from a third. Checkpoints, exports and
// refreshes reach single blocks through read_block / write_block (synchronous, rare).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "zt/core/aio.h"
#include "zt/core/device.h"
#include "zt/core/status.h"
#include "zt/zero/optimizer_offload.h"

namespace zt::zero {

// Page-aligned host memory for O_DIRECT transfers: page-locked on a GPU machine (the copies to
// and from the device then run asynchronously), ordinary aligned memory on a CPU engine.
class SwapBuffer {
 public:
  SwapBuffer() = default;
  SwapBuffer(int64_t bytes, bool pinned);
  ~SwapBuffer();
  SwapBuffer(SwapBuffer&& o) noexcept;
  SwapBuffer& operator=(SwapBuffer&& o) noexcept;
  SwapBuffer(const SwapBuffer&) = delete;
  SwapBuffer& operator=(const SwapBuffer&) = delete;
  char* data() const { return aligned_; }
  int64_t size() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  void release();
  void* base_ = nullptr;
  char* aligned_ = nullptr;
  int64_t bytes_ = 0;
  bool pinned_ = false;
};

// Bytes of one block of n f32 values in the swap file (padded to the O_DIRECT alignment).
inline int64_t swap_block_bytes(int64_t n) { return aio::align_up(n * 4); }

// The swap file's size for these pieces: `kinds` blocks per piece.
int64_t swap_file_bytes(const std::vector<OffloadPiece>& pieces, int kinds);

// The swap file of this rank under `folder` (nvme_path): zero_stage_<S>/optimizer/rank<R>.
std::string optimizer_swap_path(const std::string& folder, int stage, int rank);

class OptimizerSwap {
 public:
  static constexpr int kSlots = 3;  // read ahead, step, write behind

  // Lays the pieces out in the file (assigning file_offset), creates the file (reserving its
  // space) and the staging slots. `kinds` = 1 (master) + optimizer state buffers.
  static Result<std::unique_ptr<OptimizerSwap>> create(const std::string& path,
                                                       std::vector<OffloadPiece>& pieces,
                                                       int kinds, const aio::Options& aio,
                                                       bool pinned);
  ~OptimizerSwap();

  int kinds() const { return kinds_; }
  // Block `kind` of staging slot `slot` holding a piece of n elements (blocks spaced as in the
  // file; a slot has room for the largest piece).
  float* slot_block(int slot, int kind, int64_t n) const;
  // The whole piece between the file and a staging slot, asynchronously.
  aio::Ticket read_piece(const OffloadPiece& p, int slot);
  aio::Ticket write_piece(const OffloadPiece& p, int slot);
  Status wait(aio::Ticket t) { return file_->wait(t); }
  Status wait_all() { return file_->wait_all(); }

  // Synchronous access to values [offset, offset + n) of tensor `kind` of unit u's own chunk
  // (checkpoints, exports, refreshes): read into dst, written from src (read-modify-write of the
  // blocks it touches), or set to zero. Pieces of unit u must be consecutive in `pieces`.
  Status read_range(const std::vector<OffloadPiece>& pieces, int u, int kind, int64_t offset,
                    int64_t n, float* dst);
  Status write_range(const std::vector<OffloadPiece>& pieces, int u, int kind, int64_t offset,
                     int64_t n, const float* src);
  Status zero_unit(const std::vector<OffloadPiece>& pieces, int u, int kind);

  int64_t file_bytes() const { return file_->size(); }
  int64_t staging_bytes() const;
  const std::string& path() const { return file_->path(); }
  std::string backend_note() const { return file_->backend_note(); }

 private:
  OptimizerSwap() = default;
  // Calls fn(piece, first, count, at) for the pieces of unit u overlapping [offset, offset + n):
  // `first` elements into the piece, `count` of them, `at` elements into the range.
  template <typename Fn>
  Status for_range(const std::vector<OffloadPiece>& pieces, int u, int64_t offset, int64_t n,
                   Fn&& fn);

  std::unique_ptr<aio::SwapFile> file_;
  int kinds_ = 0;
  int64_t largest_ = 0;  // elements of the largest piece
  std::array<SwapBuffer, kSlots> slots_;
  SwapBuffer bounce_;  // one block, for the synchronous range access
};

}  // namespace zt::zero
