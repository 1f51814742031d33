// ZeroState's side of checkpoints: which elements a rank saves and keeps, and moving them
// between the training buffers (device or host) and host memory. The files themselves are
// checkpoint/'s; the engine (runtime/engine_checkpoint.cc) puts the two together.
#include "zt/kernels/ops.h"
#include "zt/zero/optimizer_swap.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {

ckpt::FlatChunk ZeroState::saved_chunk(int u) const {
  return ckpt::flat_chunk(units_[u].numel, world_size(), rank());
}

std::pair<int64_t, int64_t> ZeroState::master_extent(int u) const {
  const UnitState& st = units_[u];
  if (options_.stage == 0 || (!st.trainable && st.persistent)) return {0, st.padded};
  return {st.shard_offset, st.shard_offset + st.shard};
}

namespace {

Tensor& kind_tensor(UnitState& st, int kind) {
  ZT_ASSERT(kind >= 0 && kind <= static_cast<int>(st.state.size()), "tensor kind {}", kind);
  if (!st.trainable) return st.persistent ? st.value : st.value_shard;  // kind 0 only
  return kind == 0 ? st.master : st.state[kind - 1];
}

}  // namespace

Status ZeroState::read_saved(int u, int kind, float* dst) {
  const ckpt::FlatChunk c = saved_chunk(u);
  if (c.saved_numel() == 0) return Status::ok();
  const int64_t offset = c.saved_begin - master_extent(u).first;
  if (swap_ != nullptr && units_[u].trainable) {
    // Straight from the swap file into the checkpoint's buffer: no GPU involved.
    return swap_->read_range(swap_pieces_, u, kind, offset, c.saved_numel(), dst);
  }
  Tensor t = kind_tensor(units_[u], kind);
  if (units_[u].shard_offloaded) {  // a frozen unit's chunk at rest off the device
    ZT_ASSIGN_OR_RETURN(t, load_own_chunk(u, options_.stream));
  }
  Tensor out = Tensor::from_blob(dst, {c.saved_numel()}, DType::f32, Device::cpu());
  Tensor src = t.view(offset, {c.saved_numel()});
  if (src.dtype() != DType::f32) {  // a frozen unit's compute copy
    Tensor f = Tensor::empty(src.shape(), DType::f32, options_.device, options_.stream);
    kernels::cast(f, src, options_.stream);
    src = f;
  }
  out.copy_from(src, options_.stream);
  options_.stream.synchronize();
  return Status::ok();
}

Status ZeroState::zero_extent(int u, int kind) {
  drop_prefetches();
  if (swap_ != nullptr && units_[u].trainable) return swap_->zero_unit(swap_pieces_, u, kind);
  if (units_[u].shard_offloaded) {  // a frozen unit's chunk at rest off the device
    return store_own_chunk(u, Tensor::zeros({units_[u].shard}, options_.compute_dtype,
                                            options_.device, options_.stream));
  }
  kind_tensor(units_[u], kind).zero(options_.stream);
  return Status::ok();
}

Status ZeroState::write_range(int u, int kind, int64_t offset, const float* src, int64_t n) {
  drop_prefetches();  // a gather issued ahead would hold the old values
  if (swap_ != nullptr && units_[u].trainable) {
    return swap_->write_range(swap_pieces_, u, kind, offset, n, src);
  }
  const bool at_rest_off_device = units_[u].shard_offloaded;  // a frozen unit's chunk
  Tensor t = kind_tensor(units_[u], kind);
  if (at_rest_off_device) {
    ZT_ASSIGN_OR_RETURN(t, load_own_chunk(u, options_.stream));
  }
  Tensor in = Tensor::from_blob(const_cast<float*>(src), {n}, DType::f32, Device::cpu());
  Tensor dst = t.view(offset, {n});
  if (dst.dtype() != DType::f32) {
    // A frozen unit's compute copy: rounded as at start-up (to the training precision).
    round_into(dst, in.to(options_.device, options_.stream), options_.round_dtype,
               options_.stream);
  } else {
    dst.copy_from(in, options_.stream);
  }
  if (at_rest_off_device) ZT_RETURN_IF_ERROR(store_own_chunk(u, t));
  // The source is reused for the next piece as soon as this returns.
  options_.stream.synchronize();
  return Status::ok();
}

Status ZeroState::refresh_params() {
  drop_prefetches();
  ZT_RETURN_IF_ERROR(publish_params(/*lowp_written=*/false));
  options_.stream.synchronize();
  return Status::ok();
}

}  // namespace zt::zero
