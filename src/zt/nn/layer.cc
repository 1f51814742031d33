#include "zt/nn/layer.h"

#include <algorithm>

#include "zt/kernels/ops.h"

namespace zt::nn {

std::vector<Param*> Unit::params() {
  std::vector<Param*> out;
  out.reserve(params_.size());
  for (auto& p : params_) out.push_back(p.get());
  return out;
}

Param& Unit::add_param(std::string name, Shape shape, ParamInit init, float std) {
  auto p = std::make_unique<Param>();
  p->name = std::move(name);
  p->shape = shape;
  p->init = init;
  p->init_std = std;
  p->offset = (flat_numel_ + kParamAlignElems - 1) / kParamAlignElems * kParamAlignElems;
  flat_numel_ = p->offset + shape.numel();
  params_.push_back(std::move(p));
  return *params_.back();
}

void Unit::bind_values(const Tensor& flat_value) {
  for (auto& p : params_) {
    p->value = flat_value.defined() ? flat_value.view(p->offset, p->shape) : Tensor();
  }
}

namespace {

// A gradient cleared with the rest of its unit's in one launch before the backward instead of by
// its first op: a vector (a bias or a norm's weight), which ops only ever add into (sums over the
// tokens), small enough that clearing it costs nothing but a launch when done alone.
bool cleared_up_front(const Param& p) {
  return p.shape.ndim() == 1;
}

}  // namespace

void Unit::bind_grads(const Tensor& flat_grad, bool unwritten, const Stream& s) {
  std::vector<Tensor> clear;  // alignment gaps, the padding after, vectors: one zero_tensors
  int64_t covered = 0;        // params_ are in offset order
  for (auto& p : params_) {
    p->grad = flat_grad.defined() ? flat_grad.view(p->offset, p->shape) : Tensor();
    p->grad_unwritten = unwritten && flat_grad.defined();
    if (p->grad_unwritten && p->offset > covered) {
      clear.push_back(flat_grad.view(covered, {p->offset - covered}));  // an alignment gap
    }
    if (p->grad_unwritten && cleared_up_front(*p)) {
      clear.push_back(p->grad);
      p->grad_unwritten = false;
    }
    covered = std::max(covered, p->offset + p->numel());
  }
  if (unwritten && flat_grad.defined() && flat_grad.numel() > covered) {
    clear.push_back(flat_grad.view(covered, {flat_grad.numel() - covered}));  // the padding after
  }
  if (!clear.empty()) kernels::zero_tensors(clear, flat_grad.device(), s);
}

void Unit::mark_grads_unwritten(std::vector<Tensor>& clear) {
  for (auto& p : params_) {
    p->grad_unwritten = false;
    if (!p->grad.defined()) continue;
    if (cleared_up_front(*p)) {
      clear.push_back(p->grad);
    } else {
      p->grad_unwritten = true;
    }
  }
}

void Unit::clear_unwritten_grads(const Stream& s) {
  for (auto& p : params_) {
    if (p->grad_unwritten) (void)grad_for_add(*p, s);
  }
}

std::vector<std::pair<int64_t, int64_t>> slice_runs(const ParamSlice& s, int64_t lo, int64_t hi) {
  std::vector<std::pair<int64_t, int64_t>> out;
  auto add = [&](int64_t a, int64_t b) {
    if (a >= b) return;
    if (!out.empty() && out.back().second == a) {
      out.back().second = b;
    } else {
      out.emplace_back(a, b);
    }
  };
  // The slice as runs of whole-parameter elements, walked in the slice's own element order.
  const int64_t rows = s.full[0];
  const int64_t cols = s.full.ndim() > 1 ? s.full.numel() / rows : 1;
  int64_t local = 0;  // slice elements before the current run
  auto take = [&](int64_t full_lo, int64_t n) {
    const int64_t a = std::max(lo, local), b = std::min(hi, local + n);
    if (a < b) add(full_lo + (a - local), full_lo + (b - local));
    local += n;
  };
  if (s.dim == 0) {
    for (const auto& [r0, r1] : s.ranges) take(r0 * cols, (r1 - r0) * cols);
  } else {
    for (int64_t r = 0; r < rows && local < hi; ++r) {
      for (const auto& [c0, c1] : s.ranges) take(r * cols + c0, c1 - c0);
    }
  }
  return out;
}

namespace {

// A tensor-parallel collective just issued: on the CPU waited for now (the caller reads its
// result next), a failure kept for the engine to report; on a GPU ordered on the stream, its
// handle left to the engine.
void tp_finish(Context& ctx, CommHandle h) {
  if (ctx.device.is_cpu()) {
    Status st = h.wait();
    if (!st.is_ok() && ctx.tp_pending != nullptr) ctx.tp_pending->push_back(CommHandle::ready(st));
    return;
  }
  if (ctx.tp_pending != nullptr) {
    ctx.tp_pending->push_back(std::move(h));
  } else {
    (void)h.wait();  // (no engine to hand it to: a test driving layers directly)
  }
}

// The shape of the whole tensor for a part (`whole`) or of a part for the whole: the sequence
// dimension of (B, S, ...), the rows of a 2-D tensor, times or over the group's size.
Shape sp_shape(const Tensor& t, int tp, bool whole) {
  std::vector<int64_t> d = t.shape().to_vector();
  const size_t i = d.size() >= 3 ? 1 : 0;
  if (whole) {
    d[i] *= tp;
  } else {
    ZT_ASSERT(d[i] % tp == 0,
              "sequence parallelism: {} {} do not split over {} tensor-parallel ranks; use a "
              "sequence length that is a multiple of --tensor-parallel-size",
              d[i], i == 1 ? "positions" : "rows", tp);
    d[i] /= tp;
  }
  return Shape(d);
}

}  // namespace

void tp_all_reduce(Context& ctx, Tensor& t, ReduceOp op) {
  if (ctx.tp_size <= 1 || ctx.tp_comm == nullptr) return;
  tp_finish(ctx, ctx.tp_comm->all_reduce(t, op, ctx.stream));
}

Tensor sp_gather(Context& ctx, const Tensor& part) {
  Tensor whole = Tensor::empty(sp_shape(part, ctx.tp_size, true), part.dtype(), ctx.device,
                               ctx.stream);
  tp_finish(ctx, ctx.tp_comm->all_gather(whole, part, ctx.stream));
  return whole;
}

Tensor sp_reduce_scatter(Context& ctx, const Tensor& whole, const Tensor& into) {
  const Shape shape = sp_shape(whole, ctx.tp_size, false);
  ZT_ASSERT(!into.defined() || into.numel() == shape.numel(),
            "sequence parallelism: {} elements for a part of {}", into.numel(), shape.str());
  Tensor part = into.defined() ? into.reshape(shape)
                               : Tensor::empty(shape, whole.dtype(), ctx.device, ctx.stream);
  tp_finish(ctx, ctx.tp_comm->reduce_scatter(part, whole, ReduceOp::kSum, ctx.stream));
  return part;
}

Tensor tp_gather_columns(Context& ctx, const Tensor& part) {
  ZT_ASSERT(part.ndim() == 2, "tp_gather_columns takes (N, M), got {}", part.shape().str());
  const int64_t N = part.size(0), M = part.size(1), T = ctx.tp_size;
  Tensor stacked = Tensor::empty({T, N, M}, part.dtype(), ctx.device, ctx.stream);
  tp_finish(ctx, ctx.tp_comm->all_gather(stacked, part, ctx.stream));
  // (on the CPU the collective is complete here; on a GPU it is ordered before the copies)
  Tensor whole = Tensor::empty({N, T * M}, part.dtype(), ctx.device, ctx.stream);
  const size_t e = dtype_size(part.dtype());
  for (int64_t r = 0; r < T; ++r) {
    memory_copy_2d_async(static_cast<char*>(whole.data()) + static_cast<size_t>(r * M) * e,
                         static_cast<size_t>(T * M) * e,
                         static_cast<const char*>(stacked.data()) + static_cast<size_t>(r * N * M) * e,
                         static_cast<size_t>(M) * e, static_cast<size_t>(M) * e,
                         static_cast<size_t>(N), ctx.device, ctx.stream);
  }
  return whole;
}

Tensor sp_part_of(Context& ctx, const Tensor& whole) {
  const Shape shape = sp_shape(whole, ctx.tp_size, false);
  Tensor part = Tensor::empty(shape, whole.dtype(), ctx.device, ctx.stream);
  part.copy_from(whole.view(ctx.tp_rank * shape.numel(), shape), ctx.stream);
  return part;
}

}  // namespace zt::nn
