#include "zt/zero/optimizer_offload.h"

#include <algorithm>
#include <chrono>

#include "zt/zero/zero_state.h"

namespace zt::zero {
namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

OptimizerOffload::OptimizerOffload(ZeroState& zero, nn::Model& model)
    : zero_(zero), device_(zero.options().device) {
  const ZeroOptions& o = zero.options();
  ZT_ASSERT(zero.offloaded(), "OptimizerOffload on a ZeroState without offload");
  // On the CPU (tests only) the compute copy is f32 and a 16-bit precision is emulated by
  // rounding in publish_params, which reads the master; the pipeline writes the compute copy
  // itself, so it supports only f32 there.
  ZT_ASSERT(device_.is_cuda() || o.round_dtype == DType::f32,
            "offload on the CPU supports only f32 training");
  write_lowp_ = o.compute_dtype != DType::f32;
  plan_pieces(model);
  int64_t largest = 0;
  for (const Piece& p : pieces_) largest = std::max(largest, p.n);
  // The staging slots are page-locked whatever pin_memory says: they are small, and copies
  // through them overlap with the host's work only when pinned.
  for (Slot& s : slots_) {
    s.grad = Tensor::empty_pinned({largest}, DType::f32);
    if (write_lowp_) s.lowp = Tensor::empty_pinned({largest}, o.compute_dtype);
    s.grad_arrived = std::make_unique<Event>(device_);
    s.lowp_sent = std::make_unique<Event>(device_);
  }
  to_host_ = Stream::create(device_);
  to_device_ = Stream::create(device_);
  ready_ = std::make_unique<Event>(device_);
  done_ = std::make_unique<Event>(device_);
}

OptimizerOffload::~OptimizerOffload() {
  // Copies may still read the staging slots, which are freed with this object.
  to_host_.synchronize();
  to_device_.synchronize();
}

void OptimizerOffload::plan_pieces(nn::Model& model) {
  const ZeroOptions& o = zero_.options();
  const auto& units = zero_.units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    const UnitState& st = units[u];
    if (!st.trainable) continue;  // frozen: nothing offloaded, nothing to step
    if (o.offload_granularity == OffloadGranularity::kParamTensors) {
      // Lamb: its trust ratio is per parameter tensor, so a piece is the whole unit and each
      // tensor a chunk of its own (initialize() refuses Lamb where ranks split the tensors).
      ZT_ASSERT(st.shard == st.padded, "whole parameter tensors need the whole unit on one rank");
      Piece p{.unit = u, .offset = 0, .n = st.shard, .tensors = {}};
      for (const nn::Param* prm : model.units()[u]->params()) {
        p.tensors.emplace_back(prm->offset, prm->numel());
      }
      pieces_.push_back(std::move(p));
      continue;
    }
    const int64_t step = o.offload_piece_elements;
    ZT_ASSERT(step > 0, "offload_piece_elements {} must be positive", step);
    for (int64_t off = 0; off < st.shard; off += step) {
      const int64_t n = std::min(step, st.shard - off);
      pieces_.push_back({.unit = u, .offset = off, .n = n, .tensors = {{0, n}}});
    }
  }
}

int64_t OptimizerOffload::staging_bytes() const {
  int64_t b = 0;
  for (const Slot& s : slots_) {
    b += static_cast<int64_t>(s.grad.nbytes());
    if (s.lowp.defined()) b += static_cast<int64_t>(s.lowp.nbytes());
  }
  return b;
}

void OptimizerOffload::copy_grad_in(size_t piece) {
  const Piece& p = pieces_[piece];
  Slot& slot = slots_[piece % kSlots];
  const Tensor& g = zero_.step_grad(p.unit);
  memory_copy_async(slot.grad.data(), Device::cpu(), g.data<float>() + p.offset, device_,
                    static_cast<size_t>(p.n) * sizeof(float), to_host_);
  slot.grad_arrived->record(to_host_);
}

void OptimizerOffload::step(optim::Optimizer& optimizer, const optim::StepValues& v) {
  const double t0 = now_ms();
  times_ = {};
  times_.pieces = static_cast<int64_t>(pieces_.size());
  // The previous step's copies back are long done (the compute stream waited for them); make
  // it explicit before the host writes the master weights they may read.
  done_->synchronize();
  const Stream& compute = zero_.options().stream;
  ready_->record(compute);
  ready_->wait(to_host_);
  ready_->wait(to_device_);
  optimizer.begin_step();
  if (!pieces_.empty()) copy_grad_in(0);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    // The next gradient crosses while the host steps this one. Its slot was last read by the
    // host for piece i + 1 - kSlots, which is already stepped.
    if (i + 1 < pieces_.size()) copy_grad_in(i + 1);
    const Piece& p = pieces_[i];
    Slot& slot = slots_[i % kSlots];
    UnitState& st = zero_.units()[p.unit];
    const double w0 = now_ms();
    slot.grad_arrived->synchronize();
    // The kernel overwrites the slot's 16-bit buffer: the copy of piece i - kSlots out of it
    // must have finished.
    slot.lowp_sent->synchronize();
    const double c0 = now_ms();
    times_.wait_ms += c0 - w0;

    std::vector<kernels::OptimChunk> chunks;
    chunks.reserve(p.tensors.size());
    for (const auto& [off, n] : p.tensors) {
      kernels::OptimChunk c;
      const int64_t at = p.offset + off;  // into the unit's own chunk
      c.param = st.master.data<float>() + at;
      c.grad = slot.grad.data<float>() + off;
      if (!st.state.empty()) c.state1 = st.state[0].data<float>() + at;
      if (st.state.size() > 1) c.state2 = st.state[1].data<float>() + at;
      if (write_lowp_) {
        c.param_lowp = static_cast<char*>(slot.lowp.data()) + off * dtype_size(slot.lowp.dtype());
        c.lowp_dtype = slot.lowp.dtype();
      }
      c.n = n;
      chunks.push_back(c);
    }
    optimizer.apply(v, chunks, Device::cpu(), {});
    times_.cpu_ms += now_ms() - c0;

    // The updated piece to the own chunk of the compute copy: the 16-bit values the kernel
    // wrote, or (f32 training) the master weights themselves.
    Tensor own = zero_.own_compute_chunk(p.unit);
    const size_t esize = dtype_size(own.dtype());
    const void* src = write_lowp_ ? slot.lowp.data()
                                  : static_cast<const void*>(st.master.data<float>() + p.offset);
    memory_copy_async(static_cast<char*>(own.data()) + p.offset * esize, device_, src,
                      Device::cpu(), static_cast<size_t>(p.n) * esize, to_device_);
    slot.lowp_sent->record(to_device_);
  }
  done_->record(to_device_);
  done_->wait(compute);
  times_.total_ms = now_ms() - t0;
}

}  // namespace zt::zero
