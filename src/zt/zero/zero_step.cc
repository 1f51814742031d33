// ZeroState::optimizer_step: the one path from the engine's step values to the optimizer
// (engine -> zero -> optim). The engine decides *what* the step is (overflow, clipping, lr); this
// decides *where* each rank's master weights are stepped and in which pieces.
#include "zt/kernels/ops.h"
#include "zt/zero/optimizer_offload.h"
#include "zt/zero/zero_state.h"

namespace zt::zero {

Result<int64_t> ZeroState::optimizer_step(optim::Optimizer& optimizer,
                                          const optim::StepValues& v) {
  // A gather issued ahead that no forward consumed (two steps with no pass between) read the
  // weights this step is about to change: drop it (also the parameter-file reads no gather
  // took, which must not cross the step's writes to the file).
  drop_prefetches();
  if (offload_) {
    // ZeRO-Offload: the same step values, applied by the CPU kernels to the host master weights;
    // the pipeline writes the compute copy's own chunks back to the device.
    ZT_RETURN_IF_ERROR(offload_->step(optimizer, v));
    ZT_RETURN_IF_ERROR(publish_params(/*lowp_written=*/true));
    return int64_t{0};  // no optimizer call on the device
  }
  const Device dev = options_.device;
  const Stream& s = options_.stream;
  const bool write_lowp = dev.is_cuda() && options_.compute_dtype != DType::f32;
  const bool lamb = optimizer.spec().kind == optim::OptimizerKind::kLamb;
  std::vector<kernels::OptimChunk> chunks;
  // A chunk of `n` elements starting `offset` elements into unit u's master extent.
  auto chunk_at = [&](int u, int64_t offset, int64_t n) {
    UnitState& b = units_[u];
    kernels::OptimChunk c;
    c.param = b.master.data<float>() + offset;
    c.grad = step_grad(u).data<float>() + offset;
    if (!b.state.empty()) c.state1 = b.state[0].data<float>() + offset;
    if (b.state.size() > 1) c.state2 = b.state[1].data<float>() + offset;
    Tensor own = write_lowp ? own_compute_chunk(u) : Tensor();
    if (own.defined()) {  // undefined: stage 3 casts the chunk from the master at each gather
      c.param_lowp = static_cast<char*>(own.data()) + offset * dtype_size(own.dtype());
      c.lowp_dtype = own.dtype();
    }
    c.n = n;
    return c;
  };
  const int n_units = static_cast<int>(units_.size());
  for (int u = 0; u < n_units; ++u) {
    if (!units_[u].trainable) continue;
    if (lamb) {
      // Whole parameter tensors (initialize() refused Lamb where ZeRO splits them).
      for (nn::Param* p : model_.units()[u]->params()) chunks.push_back(chunk_at(u, p->offset,
                                                                                 p->numel()));
    } else {
      chunks.push_back(chunk_at(u, 0, units_[u].master.numel()));
    }
  }
  int64_t groups = 1;
  if (options_.stage == 3) {
    // Stage 3 steps the optimizer in sub-groups of at most sub_group_size elements, as DeepSpeed
    // steps its fp32 partition groups.
    optimizer.begin_step();
    const auto parts = optim::split_into_groups(
        chunks, options_.sub_group_elements,
        lamb ? optim::Split::kWholeChunks : optim::Split::kAnywhere);
    for (const auto& g : parts) optimizer.apply(v, g, dev, s);
    groups = static_cast<int64_t>(parts.size());
  } else {
    optimizer.step(v, chunks, dev, s);
  }
  ZT_RETURN_IF_ERROR(publish_params(write_lowp));
  return groups;
}

}  // namespace zt::zero
