// The bookkeeping behind predict_memory (estimate_walk.cc): a timeline of allocations with
// reference counts and the high-water mark, and ZeroState's hooks replayed on it (gathers and
// prefetches at stage 3, gradient buffers and buckets at stages 2-3, reduce outputs). Internal to
// tools/estimate*.cc.
#pragma once

#include <array>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "zt/core/block_cache.h"
#include "zt/tools/estimate.h"
#include "zt/zero/zero_state.h"

namespace zt::tools::estimate_detail {

enum class Kind : unsigned char { kActivation, kTemporary, kGathered, kGradient, kBatch };
constexpr size_t kKinds = 5;

// Live bytes over time, with the caching allocator's rounding (core/block_cache.h) on a GPU and
// the CPU allocator's 64 bytes on the CPU.
class Timeline {
 public:
  // `base`: the bytes alive before the step (model states, buffers).
  Timeline(EstimateDevice device, int64_t base)
      : cuda_(device == EstimateDevice::kCuda), total_(base), peak_(base) {}
  int64_t rounded(int64_t bytes) const {
    if (cuda_) return static_cast<int64_t>(BlockCache::round_size(static_cast<size_t>(bytes)));
    return bytes <= 0 ? 64 : (bytes + 63) / 64 * 64;
  }
  int alloc(int64_t bytes, Kind kind) {
    const int64_t size = rounded(bytes);
    blocks_.push_back({size, kind, 1});
    live_[static_cast<size_t>(kind)] += size;
    total_ += size;
    if (total_ > peak_) {
      peak_ = total_;
      at_peak_ = live_;
      peak_at_ = where_;
    }
    return static_cast<int>(blocks_.size()) - 1;
  }
  int retain(int id) {
    if (id >= 0) ++blocks_[static_cast<size_t>(id)].refs;
    return id;
  }
  // Drops one reference and forgets the handle.
  void release(int& id) {
    if (id < 0) return;
    Block& b = blocks_[static_cast<size_t>(id)];
    if (--b.refs == 0) {
      live_[static_cast<size_t>(b.kind)] -= b.size;
      total_ -= b.size;
    }
    id = -1;
  }
  void release_all(std::vector<int>& ids) {
    for (int& id : ids) release(id);
    ids.clear();
  }
  // A temporary allocated and freed at once (kernel scratch).
  void touch(int64_t bytes, Kind kind = Kind::kTemporary) {
    int id = alloc(bytes, kind);
    release(id);
  }
  void set_where(std::string w) { where_ = std::move(w); }
  int64_t peak() const { return peak_; }
  const std::string& peak_at() const { return peak_at_; }
  PeakParts parts() const {
    return {at_peak_[0], at_peak_[1], at_peak_[2], at_peak_[3], at_peak_[4]};
  }

 private:
  struct Block {
    int64_t size;
    Kind kind;
    int refs;
  };
  bool cuda_;
  int64_t total_, peak_;
  std::vector<Block> blocks_;
  std::array<int64_t, kKinds> live_{}, at_peak_{};
  std::string where_ = "start", peak_at_ = "start";
};

// ZeroState's hooks (zero/zero_state.cc, zero_reduce.cc) on the timeline.
class ZeroSim {
 public:
  struct Unit {
    int64_t padded = 0, shard = 0;
    bool persistent = true, trainable = true, passive = false;
    std::vector<int> extras{};
  };
  ZeroSim(Timeline& m, const zero::ZeroOptions& o, std::vector<Unit> units)
      : m_(m),
        o_(o),
        units_(std::move(units)),
        value_(units_.size(), -1),
        refs_(units_.size(), 0),
        in_flight_(units_.size(), false),
        grad_(units_.size(), -1) {}

  void before_forward(int u) {
    if (o_.stage < 3) return;
    gather(u);
    for (int e : units_[u].extras) gather(e);
    prefetch(u + 1);
  }
  void after_forward(int u) {
    if (o_.stage < 3) return;
    for (int e : units_[u].extras) release(e);
    release(u);
  }
  void before_backward(int u) {
    if (o_.stage >= 3) {
      gather(u);
      for (int e : units_[u].extras) gather(e);
      prefetch(u - 1);
    }
    if (o_.stage >= 2) {
      ensure_grad(u);
      for (int e : units_[u].extras) ensure_grad(e);
    }
  }
  void after_backward(int u) {
    bucket_unit(u);  // every micro-step at stages 2-3; stages 0-1 at the boundary (the peak one)
    for (int e : units_[u].extras) {
      if (units_[e].passive) bucket_unit(e);
    }
    if (o_.stage >= 3) {
      for (int e : units_[u].extras) release(e);
      release(u);
    }
  }
  void finish_pass() {
    flush();
    while (!pending_.empty()) complete();
  }

 private:
  int64_t compute_bytes() const { return static_cast<int64_t>(dtype_size(o_.compute_dtype)); }
  void issue_gather(int u) {
    value_[u] = m_.alloc(units_[u].padded * compute_bytes(), Kind::kGathered);
    // 16-bit stage 3 on a GPU casts its own chunk from the master for each gather.
    const zero::UnitLayout l{
        .padded = units_[u].padded, .shard = units_[u].shard, .persistent = units_[u].persistent};
    // offload_param: the chunk crosses from the host or the file into a device buffer first.
    if ((units_[u].trainable && zero::shard_from_master(o_, l)) || zero::shard_offloaded(o_, l)) {
      m_.touch(units_[u].shard * compute_bytes(), Kind::kGathered);
    }
    live_elements_ += units_[u].padded;
  }
  void gather(int u) {
    if (units_[u].persistent) return;
    if (refs_[u]++ > 0) return;
    if (in_flight_[u]) {
      in_flight_[u] = false;
    } else {
      issue_gather(u);
    }
  }
  void prefetch(int u) {
    if (u < 0 || u >= static_cast<int>(units_.size()) || units_[u].passive) return;
    if (units_[u].persistent || refs_[u] > 0 || in_flight_[u]) return;
    if (!zero::should_prefetch(o_.prefetch_elements, o_.max_live_elements, live_elements_)) return;
    issue_gather(u);
    in_flight_[u] = true;
  }
  void release(int u) {
    if (units_[u].persistent) return;
    if (--refs_[u] > 0) return;
    m_.release(value_[u]);
    live_elements_ -= units_[u].padded;
  }
  void ensure_grad(int u) {
    if (!units_[u].trainable || grad_[u] >= 0) return;
    grad_[u] = m_.alloc(units_[u].padded * 4, Kind::kGradient);
  }
  void bucket_unit(int u) {
    if (!units_[u].trainable) return;
    const int64_t elems = units_[u].padded;
    if (!bucket_.empty() && bucket_elems_ + elems > o_.reduce_bucket_elements) flush();
    bucket_.push_back(u);
    bucket_elems_ += elems;
    if (bucket_elems_ >= o_.reduce_bucket_elements) flush();
  }
  void flush() {
    if (bucket_.empty()) return;
    // What the collective reads (stages 2-3: the full gradients, let go by the units but held
    // until the flush returns; communication_data_type: rounded copies) and its outputs (stages
    // 1-3: a fresh own-chunk buffer per unit; stage 0 reduces in place).
    const bool cast = o_.comm_dtype && *o_.comm_dtype != DType::f32;
    const int64_t in_bytes = cast ? static_cast<int64_t>(dtype_size(*o_.comm_dtype)) : 4;
    std::vector<int> ins;
    Pending p;
    for (int u : bucket_) {
      if (cast) ins.push_back(m_.alloc(units_[u].padded * in_bytes, Kind::kGradient));
    }
    if (o_.stage >= 1) {
      for (int u : bucket_) {
        p.outs.push_back(m_.alloc(units_[u].shard * in_bytes, Kind::kGradient));
        p.shards.push_back(units_[u].shard);
      }
    }
    if (o_.stage >= 2) {
      for (int u : bucket_) ins.push_back(std::exchange(grad_[u], -1));
    }
    bucket_.clear();
    bucket_elems_ = 0;
    pending_.push_back(std::move(p));
    // With overlap_comm, two buckets stay in flight (zero_reduce.cc's kInFlight).
    const size_t in_flight = o_.overlap == zero::CommOverlap::kOn ? 2 : 0;
    while (pending_.size() > in_flight) complete();
    m_.release_all(ins);
  }
  void complete() {
    Pending& p = pending_.front();
    if (o_.comm_dtype && *o_.comm_dtype != DType::f32) {
      for (int64_t shard : p.shards) m_.touch(shard * 4, Kind::kGradient);  // back to f32
    }
    m_.release_all(p.outs);
    pending_.pop_front();
  }

  struct Pending {
    std::vector<int> outs;
    std::vector<int64_t> shards;
  };
  Timeline& m_;
  const zero::ZeroOptions& o_;
  std::vector<Unit> units_;
  std::vector<int> value_, refs_;
  std::vector<bool> in_flight_;
  std::vector<int> grad_;
  std::vector<int> bucket_;
  int64_t bucket_elems_ = 0;
  std::deque<Pending> pending_;
  int64_t live_elements_ = 0;
};

}  // namespace zt::tools::estimate_detail
