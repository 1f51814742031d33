#include "zt/tasks/tp_inference.h"

#include <algorithm>

#include "zt/core/device.h"
#include "zt/zero/zero_state.h"

namespace zt::tasks {

Result<std::unique_ptr<TpInference>> TpInference::create(nn::Transformer& actor, Engine& engine,
                                                         Communicator& world, int tp_size) {
  const int W = world.world_size();
  if (tp_size < 1 || W % tp_size != 0) {
    return invalid_argument("--inference-tp-size {} must divide the {} ranks", tp_size, W);
  }
  for (const auto& u : actor.units()) {
    if (u->passive()) {
      return invalid_argument("--inference-tp-size with adapters on the actor (LoRA): split "
                              "generation runs plain models only; drop --actor-lora-dim or "
                              "--inference-tp-size");
    }
  }
  std::unique_ptr<TpInference> t(new TpInference(actor, engine));
  t->tp_size_ = tp_size;
  t->tp_rank_ = world.rank() % tp_size;
  // Every rank forms every group, in the same order (Communicator::new_group).
  for (int g = 0; g < W / tp_size; ++g) {
    std::vector<int> ranks;
    for (int r = 0; r < tp_size; ++r) ranks.push_back(g * tp_size + r);
    ZT_ASSIGN_OR_RETURN(auto c, world.new_group(ranks));
    if (c) t->group_ = std::move(c);
  }
  ZT_ASSIGN_OR_RETURN(t->part_, nn::tensor_parallel_part(actor, t->tp_rank_, tp_size));
  if (t->part_->units().size() != actor.units().size()) {
    return invalid_argument("the actor's tensor-parallel part has {} units, the actor {}",
                            t->part_->units().size(), actor.units().size());
  }
  return t;
}

int64_t TpInference::part_bytes() const {
  int64_t n = 0;
  for (const auto& u : part_->units()) n += u->flat_numel();
  return n * static_cast<int64_t>(dtype_size(engine_.compute_dtype()));
}

Status TpInference::fill() {
  release();
  const Device dev = engine_.device();
  const DType dt = engine_.compute_dtype();
  const Stream& s = engine_.stream();
  const size_t e = dtype_size(dt);
  nn::UnitHooks* hooks = engine_.hooks();
  for (size_t u = 0; u < actor_.units().size(); ++u) {
    nn::Unit& whole = *actor_.units()[u];
    nn::Unit& part = *part_->units()[u];
    hooks->before_forward(static_cast<int>(u));  // ZeRO-3: the unit gathered and bound
    Tensor flat = Tensor::zeros({part.flat_numel()}, dt, dev, s);
    const auto& wp = whole.params();
    const auto& pp = part.params();
    ZT_ASSERT(wp.size() == pp.size(), "unit {}: {} parameters whole, {} in the part", whole.name(),
              wp.size(), pp.size());
    for (size_t i = 0; i < pp.size(); ++i) {
      const nn::Param& p = *pp[i];
      const nn::Param& w = *wp[i];
      ZT_ASSERT(p.name == w.name && w.value.defined(), "unit {}: parameter {} against {}",
                whole.name(), p.name, w.name);
      char* dst = static_cast<char*>(flat.data()) + static_cast<size_t>(p.offset) * e;
      const char* src = static_cast<const char*>(w.value.data());
      if (!p.slice) {
        memory_copy_async(dst, dev, src, dev, static_cast<size_t>(p.numel()) * e, s);
        continue;
      }
      // The part's elements, in its own order: row ranges (dim 0) one after another, or for
      // column ranges (dim 1) each row's ranges side by side.
      const nn::ParamSlice& sl = *p.slice;
      const int64_t rows = sl.full[0];
      const int64_t cols = sl.full.ndim() > 1 ? sl.full.numel() / rows : 1;
      if (sl.dim == 0) {
        for (const auto& [r0, r1] : sl.ranges) {
          const size_t n = static_cast<size_t>((r1 - r0) * cols) * e;
          memory_copy_async(dst, dev, src + static_cast<size_t>(r0 * cols) * e, dev, n, s);
          dst += n;
        }
      } else {
        int64_t width = 0;
        for (const auto& [c0, c1] : sl.ranges) width += c1 - c0;
        int64_t at = 0;
        for (const auto& [c0, c1] : sl.ranges) {
          memory_copy_2d_async(dst + static_cast<size_t>(at) * e, static_cast<size_t>(width) * e,
                               src + static_cast<size_t>(c0) * e, static_cast<size_t>(cols) * e,
                               static_cast<size_t>(c1 - c0) * e, static_cast<size_t>(rows), dev, s);
          at += c1 - c0;
        }
      }
    }
    part.bind_values(flat);
    flats_.push_back(flat);
    hooks->after_forward(static_cast<int>(u));
  }
  return engine_.zero_state().finish_pass().with_context("filling the tensor-parallel actor: ");
}

void TpInference::release() {
  for (auto& u : part_->units()) u->bind_values(Tensor());
  flats_.clear();
}

Result<std::vector<std::vector<int32_t>>> TpInference::generate(
    const std::vector<std::vector<int32_t>>& prompts, nn::GenerateOptions options) {
  if (flats_.empty()) return invalid_argument("TpInference::generate before fill()");
  const int64_t B = static_cast<int64_t>(prompts.size());
  const int T = tp_size_;
  nn::Context ctx = engine_.eval_context();
  ctx.tp_rank = tp_rank_;
  ctx.tp_size = T;
  ctx.tp_comm = group_.get();
  ctx.tp_pending = &pending_;
  const Device dev = ctx.device;
  // The group's prompts: every rank's B rows, in rank order - their lengths first, then the
  // rows padded to the longest.
  auto gather_ints = [&](const std::vector<int32_t>& v) -> Result<std::vector<int32_t>> {
    Tensor h = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i32);
    std::copy(v.begin(), v.end(), h.data<int32_t>());
    Tensor send = h.to(dev, ctx.stream);
    Tensor all = Tensor::empty({T * static_cast<int64_t>(v.size())}, DType::i32, dev, ctx.stream);
    ZT_RETURN_IF_ERROR(group_->all_gather(all, send, ctx.stream).wait().with_context(
        "gathering the prompts of the tensor-parallel group"));
    const Tensor back = all.to(Device::cpu(), ctx.stream);
    return std::vector<int32_t>(back.data<int32_t>(), back.data<int32_t>() + back.numel());
  };
  std::vector<int32_t> lengths;
  for (const auto& p : prompts) lengths.push_back(static_cast<int32_t>(p.size()));
  ZT_ASSIGN_OR_RETURN(const std::vector<int32_t> all_lengths, gather_ints(lengths));
  const int64_t P = *std::max_element(all_lengths.begin(), all_lengths.end());
  std::vector<int32_t> mine(static_cast<size_t>(B * P), 0);
  for (int64_t b = 0; b < B; ++b) {
    std::copy(prompts[b].begin(), prompts[b].end(), mine.begin() + b * P);
  }
  ZT_ASSIGN_OR_RETURN(const std::vector<int32_t> all, gather_ints(mine));
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(T * B));
  for (int64_t r = 0; r < T * B; ++r) {
    rows[static_cast<size_t>(r)].assign(all.begin() + r * P, all.begin() + r * P + all_lengths[r]);
  }
  // The group's ranks hold the same rows and compute the same logits, so they finish together;
  // agreeing on it each step (one small all-reduce in the group) also settles the layers'
  // collectives queued so far and makes a divergence a stop, not a hang.
  Status failed = Status::ok();
  Tensor flag = Tensor::empty({1}, DType::f32, dev, ctx.stream);
  options.everyone_done = [&](bool local_done) {
    for (CommHandle& h : pending_) {
      if (Status st = h.wait(); !st.is_ok() && failed.is_ok()) failed = st;
    }
    pending_.clear();
    flag.copy_from(Tensor::from_floats({local_done ? 0.0f : 1.0f}, {1}, DType::f32), ctx.stream);
    if (Status st = group_->all_reduce(flag, ReduceOp::kMax, ctx.stream).wait();
        !st.is_ok() && failed.is_ok()) {
      failed = st;
    }
    return !failed.is_ok() || flag.to_doubles()[0] == 0.0;
  };
  auto answers = nn::generate_batch(*part_, ctx, rows, options);
  for (CommHandle& h : pending_) {
    if (Status st = h.wait(); !st.is_ok() && failed.is_ok()) failed = st;
  }
  pending_.clear();
  ZT_RETURN_IF_ERROR(failed.with_context("tensor-parallel generation: "));
  return std::vector<std::vector<int32_t>>(answers.begin() + tp_rank_ * B,
                                           answers.begin() + (tp_rank_ + 1) * B);
}

}  // namespace zt::tasks
