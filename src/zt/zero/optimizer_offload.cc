#include "zt/zero/optimizer_offload.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "zt/zero/optimizer_swap.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {
namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<OffloadPiece> plan_offload_pieces(nn::Model& model, const ZeroOptions& o, int world,
                                              int rank) {
  std::vector<OffloadPiece> pieces;
  const auto& units = model.units();
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (units[u]->frozen()) continue;  // nothing offloaded, nothing to step
    const UnitLayout l = unit_layout(units[u]->flat_numel(), world, rank, o);
    if (o.offload_granularity == OffloadGranularity::kParamTensors) {
      // Lamb: its trust ratio is per parameter tensor, so a piece is the whole unit and each
      // tensor a chunk of its own (initialize() refuses Lamb where ranks split the tensors).
      ZT_ASSERT(l.shard == l.padded, "whole parameter tensors need the whole unit on one rank");
      OffloadPiece p{.unit = u, .offset = 0, .n = l.shard, .tensors = {}};
      for (const nn::Param* prm : units[u]->params()) {
        p.tensors.emplace_back(prm->offset, prm->numel());
      }
      pieces.push_back(std::move(p));
      continue;
    }
    const int64_t step = offload_piece_step(o, l.shard);
    for (int64_t off = 0; off < l.shard; off += step) {
      const int64_t n = std::min(step, l.shard - off);
      pieces.push_back({.unit = u, .offset = off, .n = n, .tensors = {{0, n}}});
    }
  }
  return pieces;
}

OptimizerOffload::OptimizerOffload(ZeroState& zero, nn::Model& model)
    : zero_(zero), device_(zero.options().device) {
  const ZeroOptions& o = zero.options();
  ZT_ASSERT(zero.offloaded(), "OptimizerOffload on a ZeroState without offload");
  // On the CPU the compute copy is f32 and a 16-bit precision is emulated by rounding: the
  // pipeline copies the f32 master into it and rounds it there (send_piece).
  write_lowp_ = o.compute_dtype != DType::f32;
  swap_ = zero.swap();
  // The swap file was laid out over these pieces at start-up (ZeroState): take them from there.
  pieces_ = swap_ != nullptr ? zero.swap_pieces()
                             : plan_offload_pieces(model, o, zero.world_size(), zero.rank());
  int64_t largest = 0;
  for (const OffloadPiece& p : pieces_) largest = std::max(largest, p.n);
  // The staging slots are page-locked whatever pin_memory says: they are small, and copies
  // through them overlap with the host's work only when pinned.
  for (Slot& s : slots_) {
    s.grad = Tensor::empty_pinned({largest}, DType::f32);
    if (write_lowp_) s.lowp = Tensor::empty_pinned({largest}, o.compute_dtype);
    s.grad_arrived = std::make_unique<Event>(device_);
    s.lowp_sent = std::make_unique<Event>(device_);
  }
  // offload_param nvme: the pieces of a unit must start on O_DIRECT boundaries of its block in
  // the parameter swap file (zero_options_from_config rounds the piece size for this).
  if (zero.param_file() != nullptr) {
    const int64_t esize = static_cast<int64_t>(dtype_size(o.compute_dtype));
    for (const OffloadPiece& p : pieces_) {
      ZT_ASSERT(!zero.units()[p.unit].shard_offloaded || (p.offset * esize) % aio::kAlign == 0,
                "piece at element {} of unit {} is not aligned in the parameter swap file",
                p.offset, p.unit);
    }
    for (Slot& s : slots_) {
      s.param_out = std::make_unique<SwapBuffer>(aio::align_up(largest * esize),
                                                 device_.is_cuda());
    }
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

int64_t OptimizerOffload::staging_bytes() const {
  int64_t b = 0;
  for (const Slot& s : slots_) {
    b += static_cast<int64_t>(s.grad.nbytes());
    if (s.lowp.defined()) b += static_cast<int64_t>(s.lowp.nbytes());
    if (s.param_out) b += s.param_out->size();
  }
  return b;
}

void OptimizerOffload::copy_grad_in(size_t piece) {
  const OffloadPiece& p = pieces_[piece];
  Slot& slot = slots_[piece % kSlots];
  const Tensor& g = zero_.step_grad(p.unit);
  memory_copy_async(slot.grad.data(), Device::cpu(), g.data<float>() + p.offset, device_,
                    static_cast<size_t>(p.n) * sizeof(float), to_host_);
  slot.grad_arrived->record(to_host_);
}

void OptimizerOffload::step_piece(optim::Optimizer& optimizer, const optim::StepValues& v,
                                  size_t i, float* master, float* state1, float* state2) {
  const OffloadPiece& p = pieces_[i];
  Slot& slot = slots_[i % kSlots];
  const double w0 = now_ms();
  slot.grad_arrived->synchronize();
  // The kernel overwrites the slot's 16-bit buffer: the copy of piece i - kSlots out of it must
  // have finished.
  slot.lowp_sent->synchronize();
  const double c0 = now_ms();
  times_.wait_ms += c0 - w0;
  std::vector<kernels::OptimChunk> chunks;
  chunks.reserve(p.tensors.size());
  for (const auto& [off, n] : p.tensors) {
    kernels::OptimChunk c;
    c.param = master + off;
    c.grad = slot.grad.data<float>() + off;
    if (state1 != nullptr) c.state1 = state1 + off;
    if (state2 != nullptr) c.state2 = state2 + off;
    if (write_lowp_) {
      // offload_param cpu: straight into the chunk's home in host memory (no staging copy, no
      // bus crossing: the next gather takes it from there).
      char* lowp = static_cast<char*>(lowp_in_host_chunk(p) ? host_chunk(p) : slot.lowp.data());
      c.param_lowp = lowp + off * dtype_size(slot.lowp.dtype());
      c.lowp_dtype = slot.lowp.dtype();
    }
    c.n = n;
    chunks.push_back(c);
  }
  optimizer.apply(v, chunks, Device::cpu(), {});
  times_.cpu_ms += now_ms() - c0;
}

Status OptimizerOffload::send_piece(size_t i, const float* master) {
  const OffloadPiece& p = pieces_[i];
  Slot& slot = slots_[i % kSlots];
  const ZeroOptions& o = zero_.options();
  UnitState& st = zero_.units()[p.unit];
  const void* src = write_lowp_ ? slot.lowp.data() : static_cast<const void*>(master);
  if (st.shard_offloaded && o.param_placement == ParamPlacement::kNvme) {
    // offload_param nvme: the updated 16-bit piece goes to the unit's block of the parameter
    // swap file (through an aligned buffer: the write may outlive the next use of the slot).
    aio::SwapFile& file = *zero_.param_file();
    if (slot.param_writing) {
      slot.param_writing = false;
      ZT_RETURN_IF_ERROR(file.wait(slot.param_ticket));
    }
    const size_t esize = dtype_size(o.compute_dtype);
    const size_t bytes = static_cast<size_t>(p.n) * esize;
    char* out = slot.param_out->data();
    std::memcpy(out, src, bytes);
    if (device_.is_cpu() && o.round_dtype != DType::f32) {
      Tensor piece = Tensor::from_blob(out, {p.n}, DType::f32, Device::cpu());
      round_into(piece, piece, o.round_dtype, {});
    }
    const int64_t block = aio::align_up(static_cast<int64_t>(bytes));
    std::memset(out + bytes, 0, static_cast<size_t>(block) - bytes);
    slot.param_ticket = file.write_async(
        out, block, st.param_file_offset + p.offset * static_cast<int64_t>(esize));
    slot.param_writing = true;
    slot.lowp_sent->record(to_device_);  // (nothing crossed the bus: keeps the slot protocol)
    return Status::ok();
  }
  if (lowp_in_host_chunk(p)) {  // the kernel wrote the chunk in place
    slot.lowp_sent->record(to_device_);
    return Status::ok();
  }
  // The updated piece to the own chunk of the compute copy (on the device, or in host memory
  // with offload_param cpu in f32): the 16-bit values the kernel wrote, or (f32 training) the
  // master weights themselves.
  Tensor own = zero_.own_compute_chunk(p.unit);
  const size_t esize = dtype_size(own.dtype());
  memory_copy_async(static_cast<char*>(own.data()) + p.offset * esize, own.device(), src,
                    Device::cpu(), static_cast<size_t>(p.n) * esize, to_device_);
  if (device_.is_cpu() && o.round_dtype != DType::f32) {
    // The CPU's emulated 16-bit training: the f32 copy rounded as publish_params would.
    Tensor piece = own.view(p.offset, {p.n});
    round_into(piece, piece, o.round_dtype, {});
  }
  slot.lowp_sent->record(to_device_);
  return Status::ok();
}

bool OptimizerOffload::lowp_in_host_chunk(const OffloadPiece& p) {
  const UnitState& st = zero_.units()[p.unit];
  return write_lowp_ && st.shard_offloaded && st.value_shard.defined() &&
         st.value_shard.device().is_cpu();
}

void* OptimizerOffload::host_chunk(const OffloadPiece& p) {
  const Tensor& v = zero_.units()[p.unit].value_shard;
  return static_cast<char*>(v.data()) + p.offset * dtype_size(v.dtype());
}

Status OptimizerOffload::finish_param_writes() {
  Status status;
  for (Slot& s : slots_) {
    if (!s.param_writing) continue;
    s.param_writing = false;
    const Status w = zero_.param_file()->wait(s.param_ticket);
    if (status.is_ok()) status = w;
  }
  return status;
}

Status OptimizerOffload::step(optim::Optimizer& optimizer, const optim::StepValues& v) {
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
  Status status;
  if (swap_ != nullptr) {
    status = step_swapped(optimizer, v);
  } else {
    if (!pieces_.empty()) copy_grad_in(0);
    for (size_t i = 0; i < pieces_.size(); ++i) {
      // The next gradient crosses while the host steps this one. Its slot was last read by the
      // host for piece i + 1 - kSlots, which is already stepped.
      if (i + 1 < pieces_.size()) copy_grad_in(i + 1);
      const OffloadPiece& p = pieces_[i];
      UnitState& st = zero_.units()[p.unit];
      float* master = st.master.data<float>() + p.offset;
      step_piece(optimizer, v, i, master,
                 st.state.empty() ? nullptr : st.state[0].data<float>() + p.offset,
                 st.state.size() > 1 ? st.state[1].data<float>() + p.offset : nullptr);
      status = send_piece(i, master);
      if (!status.is_ok()) break;
    }
  }
  const Status params = finish_param_writes();
  if (status.is_ok() && !params.is_ok()) {
    status = Status(params.code(), fmt::format("the optimizer step could not write the "
                                               "parameters ({}); the step is incomplete, so the "
                                               "run stops here: resume from the last checkpoint "
                                               "once the disk is fixed",
                                               params.message()));
  }
  done_->record(to_device_);
  done_->wait(compute);
  times_.total_ms = now_ms() - t0;
  return status;
}

// The NVMe pipeline over the swap's three staging slots: piece i + 1 is read while piece i is
// stepped and piece i - 1 written (pipeline_read / pipeline_write; without them each read is
// waited for as it is issued, and each write right after it, as DeepSpeed does).
Status OptimizerOffload::step_swapped(optim::Optimizer& optimizer, const optim::StepValues& v) {
  const ZeroOptions& o = zero_.options();
  constexpr int kIo = OptimizerSwap::kSlots;
  const int kinds = swap_->kinds();
  std::array<aio::Ticket, kIo> writes{};
  std::array<bool, kIo> writing{};
  std::array<aio::Ticket, kIo> reads{};
  std::array<bool, kIo> reading{};
  auto read = [&](size_t i) -> Status {
    const int s = static_cast<int>(i % kIo);
    // The slot's last piece (i - kIo) must be on disk, and its f32 copy to the device (f32
    // training sends the master from the slot) done, before the slot is filled again.
    if (writing[s]) {
      ZT_RETURN_IF_ERROR(swap_->wait(writes[s]));
      writing[s] = false;
    }
    if (!write_lowp_ && i >= static_cast<size_t>(kIo)) {
      slots_[(i - kIo) % kSlots].lowp_sent->synchronize();
    }
    reads[s] = swap_->read_piece(pieces_[i], s);
    reading[s] = true;
    if (!o.swap_pipeline_read) {
      reading[s] = false;
      ZT_RETURN_IF_ERROR(swap_->wait(reads[s]));
    }
    return Status::ok();
  };
  Status status;
  if (!pieces_.empty()) {
    status = read(0);
    copy_grad_in(0);
  }
  for (size_t i = 0; i < pieces_.size() && status.is_ok(); ++i) {
    if (i + 1 < pieces_.size()) {
      status = read(i + 1);
      if (!status.is_ok()) break;
      copy_grad_in(i + 1);
    }
    const int s = static_cast<int>(i % kIo);
    if (reading[s]) {
      const double w0 = now_ms();
      reading[s] = false;
      status = swap_->wait(reads[s]);
      times_.wait_ms += now_ms() - w0;
      if (!status.is_ok()) break;
    }
    const OffloadPiece& p = pieces_[i];
    float* master = swap_->slot_block(s, 0, p.n);
    step_piece(optimizer, v, i, master, kinds > 1 ? swap_->slot_block(s, 1, p.n) : nullptr,
               kinds > 2 ? swap_->slot_block(s, 2, p.n) : nullptr);
    status = send_piece(i, master);
    if (!status.is_ok()) break;
    writes[s] = swap_->write_piece(p, s);
    writing[s] = true;
    if (!o.swap_pipeline_write) {
      status = swap_->wait(writes[s]);
      writing[s] = false;
    }
  }
  // Every write on disk before the step counts as done (a checkpoint may read the file next).
  const Status flushed = swap_->wait_all();
  if (status.is_ok()) status = flushed;
  const Status params = finish_param_writes();
  if (status.is_ok()) status = params;
  // The f32 sends read the slots: they finish before a later step or checkpoint refills them.
  to_device_.synchronize();
  if (!status.is_ok()) {
    return Status(status.code(),
                  fmt::format("the optimizer step could not swap its state ({}); the step is "
                              "incomplete, so the run stops here: resume from the last "
                              "checkpoint once the disk is fixed",
                              status.message()));
  }
  return Status::ok();
}

}  // namespace zt::zero
