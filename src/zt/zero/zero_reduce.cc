// ZeroState's gradient reduction (zero_state.h): units join a bucket as backward finishes them
// (grad_bucket.h), a flushed bucket is one coalesced collective (stage 0: all-reduce of the full
// gradients in place; stages 1-3: reduce-scatter into fresh own-chunk buffers), and completing it
// scales the result and adds it into the unit's grad_shard (kernels::add_scaled, one pass; the
// first reduction of a step writes it). Stages 0-1 reduce only at the
// accumulation boundary, stages 2-3 every micro-step.
//
// With overlap_comm, up to kInFlight buckets stay in flight while backward goes on (on the GPU
// on the communication stream, on the CPU on Gloo's worker thread); completing the oldest makes
// the compute stream (GPU) or the host (CPU) wait for it. Without, each bucket is completed as it
// is issued: on the GPU everything is then ordered on the compute stream, on the CPU the host
// waits for Gloo. The result is the same sum whatever the bucketing: each unit's gradient is
// scaled, summed over ranks and scaled again exactly as with one collective per unit.
#include <utility>

#include "zt/kernels/ops.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {
namespace {

// Buckets in flight with overlap_comm: one being reduced while the next fills, as DeepSpeed's
// two alternating buffers.
constexpr size_t kInFlight = 2;

}  // namespace

void ZeroState::scale_pre(Tensor& g) {
  const int W = world_size();
  if (options_.prescale) {
    if (W > 1) kernels::scale_inplace(g, 1.0f / static_cast<float>(W), options_.stream);
  } else if (options_.predivide_factor != 1.0) {
    kernels::scale_inplace(g, static_cast<float>(1.0 / options_.predivide_factor), options_.stream);
  }
}

float ZeroState::post_factor() const {
  if (options_.prescale) return 1.0f;
  return static_cast<float>(options_.predivide_factor / world_size());
}

void ZeroState::scale_post(Tensor& g) {
  const float f = post_factor();
  if (f != 1.0f) kernels::scale_inplace(g, f, options_.stream);
}

void ZeroState::ensure_grad(int u) {
  UnitState& st = units_[u];
  if (!st.trainable || st.grad.defined()) return;
  // Not cleared: the backward's first op on each parameter writes its gradient (a weight GEMM
  // with beta 0), the others clear what they add to, and bucket_unit clears what no op reached.
  st.grad = Tensor::empty({st.padded}, kernels::accum_dtype(options_.compute_dtype),
                          options_.device, options_.stream);
  model_.units()[u]->bind_grads(st.grad, /*unwritten=*/true, options_.stream);
}

void ZeroState::bucket_unit(int u) {
  if (!units_[u].trainable) return;
  model_.units()[u]->clear_unwritten_grads(options_.stream);
  const int64_t elems = units_[u].padded;
  if (bucket_.overflows_with(elems)) flush_bucket();
  bucket_.add(u, elems);
  if (bucket_.full()) flush_bucket();
}

void ZeroState::flush_bucket() {
  if (bucket_.empty()) return;
  Communicator& comm = *options_.comm;
  const Stream& s = options_.stream;
  PendingReduce p;
  p.units = bucket_.take();
  std::vector<Tensor> ins;
  for (int u : p.units) {
    UnitState& st = units_[u];
    scale_pre(st.grad);  // on the compute stream, before the lane's begin()
    if (options_.comm_dtype && *options_.comm_dtype != st.grad.dtype()) {
      // communication_data_type: the collective sums a copy rounded to that dtype.
      Tensor c = Tensor::empty(st.grad.shape(), *options_.comm_dtype, options_.device, s);
      kernels::cast(c, st.grad, s);
      ins.push_back(c);
    } else {
      ins.push_back(st.grad);
    }
  }
  std::vector<Tensor> used = ins;
  if (comm.backend_name() == "stub") {
    // One process alone: nothing to combine, its one chunk is the whole. No collective and no
    // second stream (a CUDA graph captures the step on the compute stream).
    p.outs = ins;
    complete_reduce(p);
    if (options_.stage >= 2) {
      for (int u : p.units) {
        units_[u].grad = Tensor();
        model_.units()[u]->bind_grads(Tensor());
      }
    }
    return;
  }
  lane_.begin();
  if (options_.stage == 0) {
    p.outs = ins;
    p.handle = comm.all_reduce_coalesced(p.outs, ReduceOp::kSum, lane_.stream());
  } else {
    for (int u : p.units) {
      // On the compute stream, which reads it in complete_reduce; the lane writes it.
      p.outs.push_back(
          Tensor::empty({units_[u].shard}, ins[p.outs.size()].dtype(), options_.device, s));
      used.push_back(p.outs.back());
    }
    p.handle = comm.reduce_scatter_coalesced(p.outs, ins, ReduceOp::kSum, lane_.stream());
  }
  p.done = lane_.end(used);
  if (options_.stage >= 2) {
    // The units let go of their full gradients; the memory is reused once the collective is
    // done (Gloo's worker holds them until then; on a GPU they were marked as used on its stream).
    for (int u : p.units) {
      units_[u].grad = Tensor();
      model_.units()[u]->bind_grads(Tensor());
    }
  }
  pending_.push_back(std::move(p));
  const size_t in_flight = options_.overlap == CommOverlap::kOn ? kInFlight : 0;
  while (pending_.size() > in_flight) {
    complete_reduce(pending_.front());
    pending_.pop_front();
  }
}

void ZeroState::complete_reduce(PendingReduce& p) {
  if (options_.device.is_cuda()) {
    // The compute stream waits for the collective (nothing to wait for when it ran there); the
    // host waits for its handle once per pass, in finish_pass.
    lane_.consume(p.done);
    keep_stream_handle(std::move(p.handle));
  } else {
    record(p.handle.wait());
  }
  const Stream& s = options_.stream;
  for (size_t i = 0; i < p.units.size(); ++i) {
    UnitState& st = units_[p.units[i]];
    Tensor r = p.outs[i];
    if (options_.stage == 0) {
      // The optimizer reads the full gradient: bring a communication_data_type copy back.
      if (r.data() != st.grad.data()) kernels::cast(st.grad, r, s);
      scale_post(st.grad);
      continue;
    }
    // Converted (communication_data_type), scaled and added in one pass; the first reduction
    // after zero_grads() writes the chunk instead of adding to zeros.
    kernels::add_scaled(st.grad_shard, r, post_factor(),
                        st.shard_stale ? kernels::Accumulate::kWrite : kernels::Accumulate::kAdd, s);
    st.shard_stale = false;
  }
}

Status ZeroState::reduce_grads() {
  ZT_ASSERT(options_.stage <= 1, "reduce_grads is for stages 0-1 (stage {} reduces in backward)",
            options_.stage);
  for (int u = static_cast<int>(units_.size()); u-- > 0;) bucket_unit(u);
  return finish_pass();
}

Status ZeroState::finish_pass() {
  flush_bucket();  // the end of backward (a no-op after a forward)
  while (!pending_.empty()) {
    complete_reduce(pending_.front());
    pending_.pop_front();
  }
  for (auto& h : stream_handles_) record(h.wait());
  stream_handles_.clear();
  Status s = hook_status_;
  hook_status_ = Status::ok();
  return s;
}

}  // namespace zt::zero
