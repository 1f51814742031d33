#include "zt/zero/optimizer_swap.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "zt/core/assert.h"

namespace zt::zero {

SwapBuffer::SwapBuffer(int64_t bytes, bool pinned) : bytes_(bytes), pinned_(pinned) {
  if (bytes <= 0) return;
  const auto total = static_cast<size_t>(bytes + aio::kAlign);
  // Page-locked blocks are page-aligned in practice, but O_DIRECT's rule is checked, not assumed:
  // one extra page lets the start be rounded up.
  base_ = pinned ? memory_allocate_pinned(total) : std::aligned_alloc(aio::kAlign, total);
  ZT_ASSERT(base_ != nullptr, "allocating {} bytes of swap staging memory", total);
  const auto addr = reinterpret_cast<uintptr_t>(base_);
  const uintptr_t up = (addr + aio::kAlign - 1) / aio::kAlign * aio::kAlign;
  aligned_ = static_cast<char*>(base_) + (up - addr);
}

void SwapBuffer::release() {
  if (base_ == nullptr) return;
  if (pinned_) {
    memory_free_pinned(base_, static_cast<size_t>(bytes_ + aio::kAlign));
  } else {
    std::free(base_);
  }
  base_ = nullptr;
  aligned_ = nullptr;
}

SwapBuffer::~SwapBuffer() { release(); }

SwapBuffer::SwapBuffer(SwapBuffer&& o) noexcept
    : base_(o.base_), aligned_(o.aligned_), bytes_(o.bytes_), pinned_(o.pinned_) {
  o.base_ = nullptr;
  o.aligned_ = nullptr;
}

SwapBuffer& SwapBuffer::operator=(SwapBuffer&& o) noexcept {
  if (this != &o) {
    release();
    base_ = o.base_;
    aligned_ = o.aligned_;
    bytes_ = o.bytes_;
    pinned_ = o.pinned_;
    o.base_ = nullptr;
    o.aligned_ = nullptr;
  }
  return *this;
}

int64_t swap_file_bytes(const std::vector<OffloadPiece>& pieces, int kinds) {
  int64_t b = 0;
  for (const OffloadPiece& p : pieces) b += kinds * swap_block_bytes(p.n);
  return b;
}

std::string optimizer_swap_path(const std::string& folder, int stage, int rank) {
  return fmt::format("{}/zero_stage_{}/optimizer/rank{}/optimizer_state.swp", folder, stage, rank);
}

Result<std::unique_ptr<OptimizerSwap>> OptimizerSwap::create(const std::string& path,
                                                             std::vector<OffloadPiece>& pieces,
                                                             int kinds, const aio::Options& aio,
                                                             bool pinned) {
  ZT_ASSERT(kinds >= 1, "swap kinds {}", kinds);
  std::unique_ptr<OptimizerSwap> s(new OptimizerSwap());
  s->kinds_ = kinds;
  int64_t at = 0;
  for (OffloadPiece& p : pieces) {
    p.file_offset = at;
    at += kinds * swap_block_bytes(p.n);
    s->largest_ = std::max(s->largest_, p.n);
  }
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) {
    return invalid_argument("cannot create the swap folder '{}': {}; check that nvme_path is "
                            "writable",
                            folder.string(), ec.message());
  }
  ZT_ASSIGN_OR_RETURN(s->file_, aio::SwapFile::create(path, std::max<int64_t>(at, aio::kAlign),
                                                      aio, "optimizer swap file"));
  const int64_t slot_bytes = kinds * swap_block_bytes(s->largest_);
  for (SwapBuffer& b : s->slots_) b = SwapBuffer(slot_bytes, pinned);
  s->bounce_ = SwapBuffer(swap_block_bytes(s->largest_), /*pinned=*/false);
  return s;
}

OptimizerSwap::~OptimizerSwap() {
  if (file_ == nullptr) return;
  (void)file_->wait_all();
  // The state is rebuilt from a checkpoint on the next run; the file is only scratch space.
  (void)file_->remove();
}

float* OptimizerSwap::slot_block(int slot, int kind, int64_t n) const {
  return reinterpret_cast<float*>(slots_[slot].data() + kind * swap_block_bytes(n));
}

int64_t OptimizerSwap::staging_bytes() const {
  int64_t b = bounce_.size();
  for (const SwapBuffer& s : slots_) b += s.size();
  return b;
}

// A slot holds a piece's blocks spaced as in the file, so a piece is one contiguous request.
aio::Ticket OptimizerSwap::read_piece(const OffloadPiece& p, int slot) {
  return file_->read_async(slots_[slot].data(), kinds_ * swap_block_bytes(p.n), p.file_offset);
}

aio::Ticket OptimizerSwap::write_piece(const OffloadPiece& p, int slot) {
  return file_->write_async(slots_[slot].data(), kinds_ * swap_block_bytes(p.n), p.file_offset);
}

template <typename Fn>
Status OptimizerSwap::for_range(const std::vector<OffloadPiece>& pieces, int u, int64_t offset,
                                int64_t n, Fn&& fn) {
  for (const OffloadPiece& p : pieces) {
    if (p.unit != u) continue;
    const int64_t lo = std::max(offset, p.offset);
    const int64_t hi = std::min(offset + n, p.offset + p.n);
    if (lo >= hi) continue;
    ZT_RETURN_IF_ERROR(fn(p, lo - p.offset, hi - lo, lo - offset));
  }
  return Status::ok();
}

// Waits for every request of the file first: a block read here may be in a write still in flight.
Status OptimizerSwap::read_range(const std::vector<OffloadPiece>& pieces, int u, int kind,
                                 int64_t offset, int64_t n, float* dst) {
  ZT_RETURN_IF_ERROR(file_->wait_all());
  float* b = reinterpret_cast<float*>(bounce_.data());
  return for_range(pieces, u, offset, n,
                   [&](const OffloadPiece& p, int64_t first, int64_t count, int64_t at) -> Status {
                     const int64_t blk = swap_block_bytes(p.n);
                     ZT_RETURN_IF_ERROR(file_->wait(
                         file_->read_async(b, blk, p.file_offset + kind * blk)));
                     std::memcpy(dst + at, b + first, static_cast<size_t>(count) * 4);
                     return Status::ok();
                   });
}

Status OptimizerSwap::write_range(const std::vector<OffloadPiece>& pieces, int u, int kind,
                                  int64_t offset, int64_t n, const float* src) {
  ZT_RETURN_IF_ERROR(file_->wait_all());
  float* b = reinterpret_cast<float*>(bounce_.data());
  return for_range(pieces, u, offset, n,
                   [&](const OffloadPiece& p, int64_t first, int64_t count, int64_t at) -> Status {
                     const int64_t blk = swap_block_bytes(p.n);
                     const int64_t where = p.file_offset + kind * blk;
                     if (count < p.n) {  // the rest of the block keeps its values
                       ZT_RETURN_IF_ERROR(file_->wait(file_->read_async(b, blk, where)));
                     }
                     std::memcpy(b + first, src + at, static_cast<size_t>(count) * 4);
                     return file_->wait(file_->write_async(b, blk, where));
                   });
}

Status OptimizerSwap::zero_unit(const std::vector<OffloadPiece>& pieces, int u, int kind) {
  ZT_RETURN_IF_ERROR(file_->wait_all());
  std::memset(bounce_.data(), 0, static_cast<size_t>(bounce_.size()));
  for (const OffloadPiece& p : pieces) {
    if (p.unit != u) continue;
    const int64_t blk = swap_block_bytes(p.n);
    ZT_RETURN_IF_ERROR(
        file_->wait(file_->write_async(bounce_.data(), blk, p.file_offset + kind * blk)));
  }
  return Status::ok();
}

}  // namespace zt::zero
