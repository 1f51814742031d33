#include "zt/nn/layers/linear.h"

#include <cstdlib>
#include <string_view>

#include "zt/kernels/ops.h"

namespace zt::nn {

Linear::Linear(Unit& unit, const std::string& name, int64_t in, int64_t out, Bias bias,
               float init_std)
    : in_(in), out_(out) {
  weight_ = &unit.add_param(name + ".weight", {out, in}, ParamInit::kNormal, init_std);
  if (bias == Bias::kWith) bias_ = &unit.add_param(name + ".bias", {out}, ParamInit::kZeros);
}

namespace {

bool dropout_on(const LoraAdapter& a, bool training) { return training && a.dropout > 0.0f; }

// The adapter's input: x, or x after dropout (training with dropout > 0). Dropout is linear in
// its input for a given mask, so the same call on a gradient is its backward.
Tensor adapter_input(const Context& ctx, const LoraAdapter& a, const Tensor& x) {
  if (!dropout_on(a, ctx.mode == Mode::kTrain)) return x;
  Tensor h = Tensor::empty(x.shape(), x.dtype(), x.device(), ctx.stream);
  kernels::dropout_apply(h, x, a.dropout, ctx.dropout_seed ^ a.salt, ctx.stream);
  return h;
}

// Whether `t` starts right where `prev` ends (both defined, of one dtype).
bool follows(const Tensor& prev, const Tensor& t) {
  return prev.defined() && t.defined() && prev.dtype() == t.dtype() &&
         static_cast<const char*>(prev.data()) + prev.nbytes() == t.data();
}

}  // namespace

std::vector<AdapterGroup> adapter_groups(std::span<const LoraAdapter> adapters, bool training) {
  // ZT_LORA_GROUPS=0: every adapter alone (the previous path, for A/B; read once).
  static const bool grouping = [] {
    const char* v = std::getenv("ZT_LORA_GROUPS");
    return v == nullptr || std::string_view(v) != "0";
  }();
  std::vector<AdapterGroup> groups;
  for (size_t i = 0; i < adapters.size(); ++i) {
    const LoraAdapter& a = adapters[i];
    if (grouping && !groups.empty()) {
      AdapterGroup& g = groups.back();
      const LoraAdapter& prev = adapters[g.first + g.count - 1];
      if (!dropout_on(prev, training) && !dropout_on(a, training) &&
          a.a->shape == prev.a->shape && a.a->offset == prev.a->offset + prev.a->numel()) {
        ++g.count;
        continue;
      }
    }
    groups.push_back({.first = i, .count = 1, .r = a.a->shape[0]});
  }
  return groups;
}

std::vector<AdapterGroup> Linear::bound_groups(const Context& ctx) const {
  std::vector<AdapterGroup> out;
  for (const AdapterGroup& g : adapter_groups(adapters_, ctx.mode == Mode::kTrain)) {
    size_t begin = g.first;
    for (size_t j = g.first + 1; j <= g.first + g.count; ++j) {
      if (j < g.first + g.count && follows(adapters_[j - 1].a->value, adapters_[j].a->value)) {
        continue;
      }
      out.push_back({.first = begin, .count = j - begin, .r = g.r});
      begin = j;
    }
  }
  return out;
}

Tensor Linear::forward(Context& ctx, const Tensor& x, const Tensor* residual) const {
  Tensor x2 = x.reshape(as_rows(x, in_));
  const int64_t N = x2.size(0);
  Tensor y = Tensor::empty({N, out_}, ctx.compute_dtype, ctx.device, ctx.stream);
  const Tensor* b = forward_bias(ctx);
  if (residual != nullptr) {
    kernels::matmul_residual_forward(y, x2, weight_->value, b, residual->reshape({N, out_}),
                                     ctx.stream);
  } else {
    kernels::matmul_forward(y, x2, weight_->value, b, ctx.stream);
  }
  const std::vector<AdapterGroup> groups = bound_groups(ctx);
  const bool keep = ctx.mode == Mode::kTrain && !adapters_.empty();
  saved_u_.assign(keep ? groups.size() : 0, Tensor());
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const AdapterGroup& g = groups[gi];
    const LoraAdapter& first = adapters_[g.first];
    const int64_t R = static_cast<int64_t>(g.count) * g.r;
    const Tensor h = adapter_input(ctx, first, x2);  // (a group of several has no dropout)
    // u = h [A_1; ...; A_k]^T, then y[:, rows_j] += scale_j u_j B_j^T straight into the block
    // of the fused output.
    Tensor u = Tensor::empty({N, R}, ctx.compute_dtype, ctx.device, ctx.stream);
    kernels::matmul_forward(u, h, first.a->value.extend({R, in_}), nullptr, ctx.stream);
    for (size_t j = 0; j < g.count; ++j) {
      const LoraAdapter& a = adapters_[g.first + j];
      kernels::matmul_cols_forward(y, u, a.b->value, a.row0, a.scale,
                                   static_cast<int64_t>(j) * g.r, ctx.stream);
    }
    if (keep) saved_u_[gi] = u;
  }
  return y;
}

void Linear::backward(Context& ctx, const Tensor& dout, const Tensor& x, Tensor* din) const {
  const Stream& s = ctx.stream;
  Tensor din2;
  if (din != nullptr) din2 = din->reshape(as_rows(*din, in_));
  const Tensor x2 = x.reshape(as_rows(x, in_));
  const Tensor dout2 = dout.reshape(as_rows(dout, out_));
  const int64_t N = x2.size(0);
  // A frozen unit's weight and bias have no gradient buffers: undefined skips them. The weight's
  // gradient is its own GEMM, which writes it when it is unwritten (weight_grad).
  Tensor no_dweight;
  kernels::matmul_backward(din != nullptr ? &din2 : nullptr, no_dweight, bias_grad(s), dout2, x2,
                           weight_->value, s);
  weight_grad(dout2, x2, s);
  const std::vector<AdapterGroup> groups = bound_groups(ctx);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    // Per adapter j of the group, with g_j = scale_j * dout[:, rows_j] (read in place, never
    // copied) and u = h A^T (forward's, or recomputed where forward kept none): du_j = g_j B_j
    // into du's columns j, dB_j += g_j^T u_j; then for the group dA += du^T h and
    // dx += dropout(du A), one GEMM each where the A gradients lie back to back too.
    const AdapterGroup& g = groups[gi];
    const LoraAdapter& first = adapters_[g.first];
    const int64_t R = static_cast<int64_t>(g.count) * g.r;
    const Tensor a_all = first.a->value.extend({R, in_});
    const Tensor h = adapter_input(ctx, first, x2);
    Tensor u;
    if (gi < saved_u_.size() && saved_u_[gi].defined() && saved_u_[gi].size(0) == N &&
        saved_u_[gi].size(1) == R) {
      u = saved_u_[gi];
    } else {
      u = Tensor::empty({N, R}, ctx.compute_dtype, ctx.device, s);
      kernels::matmul_forward(u, h, a_all, nullptr, s);
    }
    // Each gradient is written by its GEMM where the pass has not written it yet (beta 0: no
    // clear first, no read of the buffer), and added to after (Param::grad_unwritten).
    using kernels::Accumulate;
    Tensor du = Tensor::empty({N, R}, ctx.compute_dtype, ctx.device, s);
    bool da_together = true;  // the A gradients back to back, all written or all unwritten
    for (size_t j = 0; j < g.count; ++j) {
      const LoraAdapter& a = adapters_[g.first + j];
      const int64_t c0 = static_cast<int64_t>(j) * g.r;
      const Accumulate db_mode = grad_write(*a.b) ? Accumulate::kWrite : Accumulate::kAdd;
      kernels::matmul_cols_backward(&du, a.b->grad, dout2, a.row0, a.scale, u, a.b->value,
                                    /*din_accumulate=*/false, db_mode, c0, s);
      if (j > 0) {
        const Param& prev = *adapters_[g.first + j - 1].a;
        da_together = da_together && follows(prev.grad, a.a->grad) &&
                      prev.grad_unwritten == a.a->grad_unwritten;
      }
    }
    const bool dropout = dropout_on(first, ctx.mode == Mode::kTrain);
    Tensor dh;
    if (din != nullptr && dropout) dh = Tensor::empty({N, in_}, ctx.compute_dtype, ctx.device, s);
    // din target: the input gradient itself (du A accumulated by the GEMM), or dh for dropout.
    Tensor* dx = din == nullptr ? nullptr : dropout ? &dh : &din2;
    if (da_together) {
      Accumulate da_mode = Accumulate::kAdd;
      for (size_t j = 0; j < g.count; ++j) {
        if (grad_write(*adapters_[g.first + j].a)) da_mode = Accumulate::kWrite;
      }
      Tensor da_all = first.a->grad.extend({R, in_});
      kernels::matmul_cols_backward(dx, da_all, du, 0, 1.0f, h, a_all,
                                    /*din_accumulate=*/!dropout, da_mode, 0, s);
    } else {
      for (size_t j = 0; j < g.count; ++j) {
        const LoraAdapter& a = adapters_[g.first + j];
        const Accumulate da_mode = grad_write(*a.a) ? Accumulate::kWrite : Accumulate::kAdd;
        kernels::matmul_cols_backward(dx, a.a->grad, du, static_cast<int64_t>(j) * g.r, 1.0f, h,
                                      a.a->value, /*din_accumulate=*/!dropout, da_mode, 0, s);
      }
    }
    if (dh.defined()) {
      kernels::dropout_apply(dh, dh, first.dropout, ctx.dropout_seed ^ first.salt, s);
      kernels::add_inplace(din2, dh, s);
    }
  }
  saved_u_.clear();
}

Tensor Linear::forward_act(Context& ctx, const Tensor& x, kernels::Activation act,
                           Tensor& pre) const {
  ZT_ASSERT(fusable(),
            "Linear::forward_act: a layer with adapters runs forward and the activation");
  Tensor x2 = x.reshape(as_rows(x, in_));
  const int64_t N = x2.size(0);
  pre = Tensor::empty({N, out_}, ctx.compute_dtype, ctx.device, ctx.stream);
  Tensor y = Tensor::empty({N, out_}, ctx.compute_dtype, ctx.device, ctx.stream);
  kernels::matmul_act_forward(y, pre, x2, weight_->value, forward_bias(ctx), act, ctx.stream);
  return y;
}

void Linear::backward_act(Context& ctx, const Tensor& dout, const Tensor& x, const Tensor& pre_in,
                          kernels::Activation act, Tensor& dpre_in) const {
  ZT_ASSERT(fusable(),
            "Linear::backward_act: a layer with adapters runs backward and the "
            "activation's backward");
  const Tensor x2 = x.reshape(as_rows(x, in_));
  Tensor dpre2 = dpre_in.reshape(as_rows(dpre_in, in_));
  const Tensor dout2 = dout.reshape(as_rows(dout, out_));
  Tensor no_dweight;
  kernels::matmul_backward_act(dpre2, no_dweight, bias_grad(ctx.stream), dout2, x2, weight_->value,
                               pre_in.reshape(as_rows(pre_in, in_)), act, ctx.stream);
  weight_grad(dout2, x2, ctx.stream);
}

void Linear::weight_grad(const Tensor& dout2, const Tensor& x2, const Stream& s) const {
  if (!weight_->grad.defined()) return;  // frozen
  kernels::matmul_weight_grad(
      weight_->grad, dout2, x2,
      grad_write(*weight_) ? kernels::Accumulate::kWrite : kernels::Accumulate::kAdd, s);
}

}  // namespace zt::nn
