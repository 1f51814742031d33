#include "zt/nn/layers/attention.h"

#include <cstdlib>
#include <string_view>

namespace zt::nn {

bool want_flash(Device device, DType dtype, int64_t head_size) {
  static const bool enabled = [] {
    const char* v = std::getenv("ZT_FLASH_ATTENTION");
    return v == nullptr || std::string_view(v) != "0";
  }();
  // The CPU keeps the unfused reference, faster there.
  return enabled && device.is_cuda() &&
         kernels::flash_attention_supported(device, dtype, head_size);
}

bool gqa_in_place() {
  static const bool in_place = [] {
    const char* v = std::getenv("ZT_ATTENTION_GQA");
    return v == nullptr || std::string_view(v) != "expand";
  }();
  return in_place;
}

namespace {

// How many tensor-parallel ranks hold each key/value head: 1 when the ranks split them, T/KV
// when there are fewer key/value heads than ranks (each then kept whole by consecutive ranks,
// whose query heads are exactly the ones that read it).
int kv_replicas(const AttentionConfig& c) {
  return c.n_kv_heads % c.tp_size == 0 ? 1 : c.tp_size / c.n_kv_heads;
}

// This rank's part of the layer: its heads.
AttentionConfig local_heads(const AttentionConfig& c) {
  ZT_ASSERT(c.tp_size >= 1 && c.n_heads % c.tp_size == 0 &&
                (c.n_kv_heads % c.tp_size == 0 || c.tp_size % c.n_kv_heads == 0),
            "attention: {} heads and {} key/value heads do not split over {} tensor-parallel "
            "ranks",
            c.n_heads, c.n_kv_heads, c.tp_size);
  AttentionConfig l = c;
  l.n_heads = c.n_heads / c.tp_size;
  l.n_kv_heads = c.n_kv_heads * kv_replicas(c) / c.tp_size;
  return l;
}

}  // namespace

Attention::Attention(Unit& unit, const AttentionNames& names, const AttentionConfig& config,
                     Rotary* rotary)
    : config_(local_heads(config)),
      rotary_(rotary),
      qkv_(unit, names.qkv, config.hidden,
           (config_.n_heads + 2 * config_.n_kv_heads) * config.head_dim, config.qkv_bias,
           config.init_std),
      out_(unit, names.out, config_.n_heads * config.head_dim, config.hidden, config.out_bias,
           config.out_init_std) {
  if (config.tp_size > 1) {
    // The whole layer's rows [q | k | v]: this rank's heads in each of the three (its key/value
    // head shared with the other ranks of its group when there are fewer than the ranks).
    const int64_t HS = config.head_dim, NH = config.n_heads, KV = config.n_kv_heads;
    const int64_t nh = config_.n_heads, kv = config_.n_kv_heads, r = config.tp_rank;
    const int R = kv_replicas(config);
    const int64_t j = r / R;  // this rank's first key/value head: replicas share theirs
    const std::vector<std::pair<int64_t, int64_t>> rows = {
        {r * nh * HS, (r + 1) * nh * HS},
        {NH * HS + j * kv * HS, NH * HS + (j + 1) * kv * HS},
        {(NH + KV) * HS + j * kv * HS, (NH + KV) * HS + (j + 1) * kv * HS}};
    const int64_t all = (NH + 2 * KV) * HS;
    auto slice = [&](Shape full, int64_t row_elems) {
      ParamSlice s{.full = full, .dim = 0, .ranges = rows};
      if (R > 1) {  // the k and v rows, after this rank's q rows
        s.replicated = {{nh * HS * row_elems, (nh + 2 * kv) * HS * row_elems}};
        s.replicas = R;
        s.counts_replicated = r % R == 0;
      }
      return s;
    };
    qkv_.weight().slice = slice({all, config.hidden}, config.hidden);
    if (qkv_.bias() != nullptr) qkv_.bias()->slice = slice({all}, 1);
    out_.weight().slice = ParamSlice{
        .full = {config.hidden, NH * HS}, .dim = 1, .ranges = {{r * nh * HS, (r + 1) * nh * HS}}};
    out_.set_row_parallel();
  }
  ZT_ASSERT(config.n_heads > 0 && config.n_kv_heads > 0 && config.n_heads % config.n_kv_heads == 0,
            "attention: {} heads are not a multiple of {} key/value heads", config.n_heads,
            config.n_kv_heads);
}

Tensor Attention::forward(Context& ctx, const Tensor& x_in, const Tensor* residual) {
  // Sequence-parallel: x_in and the residual are this rank's tokens; the heads read them all.
  const bool sp = sp_on(ctx);
  const Tensor x = sp ? sp_gather(ctx, x_in) : x_in;
  const int64_t B = x.size(0), T = x.size(1);
  const int NH = config_.n_heads;
  const int64_t HS = config_.head_dim, A = NH * HS;
  const DType dt = ctx.compute_dtype;
  const Stream& s = ctx.stream;
  Tensor qkv = qkv_.forward(ctx, x).reshape({B, T, qkv_.out_features()});
  if (ctx.kv_cache != nullptr) return forward_cached(ctx, qkv, B, T, residual);
  const int KV = config_.n_kv_heads;
  const Tensor* mask = ctx.attention_mask;
  flash_ = mask == nullptr && want_flash(ctx.device, dt, HS);
  atty_ = Tensor::empty({B, T, A}, dt, ctx.device, s);
  flash_expanded_ = flash_ && expanded() && !gqa_in_place();
  if (flash_expanded_) {
    // ZT_ATTENTION_GQA=expand: the fused kernels read a multi-head copy (the previous path, kept
    // for A/B and as a fallback).
    qkv_full_ = expand(ctx, qkv);
    lse_ = Tensor::empty({B, NH, T}, DType::f32, ctx.device, s);
    kernels::flash_attention_forward(atty_, lse_, qkv_full_, NH, config_.kind, s);
  } else if (flash_) {
    // The fused kernels read the kv heads in place: rotary rotates q and k where they are (the
    // projection's output is this layer's own), and the rotated q/k/v is what backward reads.
    if (rotary_ != nullptr) {
      kernels::rotary_qk_forward(qkv, NH, KV, rotary_->cos(ctx.device, s),
                                 rotary_->sin(ctx.device, s), 0, s);
    }
    qkv_full_ = qkv;
    lse_ = Tensor::empty({B, NH, T}, DType::f32, ctx.device, s);
    kernels::gqa_attention_forward(atty_, lse_, qkv, NH, KV, config_.kind, s);
  } else {
    // The unfused kernels read the multi-head layout (backward needs only the rotary tables,
    // not this copy).
    if (expanded()) qkv = expand(ctx, qkv);
    qkvr_ = Tensor::empty({3, B, NH, T, HS}, dt, ctx.device, s);
    att_ = Tensor::empty({B, NH, T, T}, dt, ctx.device, s);
    kernels::attention_forward(atty_, qkvr_, att_, qkv, NH, config_.kind, mask, s);
  }
  // Tensor-parallel: each rank's output is a partial sum; the residual joins it once (after the
  // reduce-scatter when sequence-parallel: each rank's residual is its own tokens').
  if (sp) {
    Tensor y = sp_reduce_scatter(ctx, out_.forward(ctx, atty_, nullptr).reshape(x.shape()));
    if (residual != nullptr) kernels::add_inplace(y, residual->reshape(y.shape()), s);
    return y;
  }
  Tensor y = out_.forward(ctx, atty_, ctx.tp_rank == 0 ? residual : nullptr);
  tp_all_reduce(ctx, y);
  return y.reshape({B, T, config_.hidden});
}

// Decoding: rotate the new q and k at positions past_len.., store k and v in the cache, attend
// over everything cached. Nothing is kept for backward.
Tensor Attention::forward_cached(Context& ctx, const Tensor& qkv, int64_t B, int64_t T,
                                 const Tensor* residual) {
  KvCache& cache = *ctx.kv_cache;
  ZT_ASSERT(ctx.mode == Mode::kEval && config_.kind == kernels::AttnKind::kCausal,
            "a KV cache is for causal decoding in eval mode");
  ZT_ASSERT(config_.layer < static_cast<int>(cache.k.size()), "KV cache has {} layers, not {}",
            cache.k.size(), config_.layer + 1);
  ZT_ASSERT(B == cache.batch && cache.past_len + T <= cache.max_len,
            "KV cache of batch {} and {} positions cannot take {} x {} more after {}", cache.batch,
            cache.max_len, B, T, cache.past_len);
  const int NH = config_.n_heads, KV = config_.n_kv_heads;
  const int64_t HS = config_.head_dim, A = NH * HS;
  const DType dt = ctx.compute_dtype;
  const Stream& s = ctx.stream;
  Tensor& kc = cache.k[config_.layer];
  Tensor& vc = cache.v[config_.layer];
  if (!kc.defined()) {
    kc = Tensor::empty({cache.batch, KV, cache.max_len, HS}, dt, ctx.device, s);
    vc = Tensor::empty({cache.batch, KV, cache.max_len, HS}, dt, ctx.device, s);
  }
  const Tensor* cos = rotary_ != nullptr ? &rotary_->cos(ctx.device, s) : nullptr;
  const Tensor* sin = rotary_ != nullptr ? &rotary_->sin(ctx.device, s) : nullptr;
  Tensor q = Tensor::empty({B, T, A}, dt, ctx.device, s);
  kernels::kv_cache_update(q, kc, vc, qkv, NH, KV, cos, sin, cache.past_len, s);
  Tensor y = Tensor::empty({B, T, A}, dt, ctx.device, s);
  kernels::attention_cached(y, q, kc, vc, NH, KV, cache.past_len, s);
  Tensor out = out_.forward(ctx, y, ctx.tp_rank == 0 ? residual : nullptr);
  tp_all_reduce(ctx, out);
  return out.reshape({B, T, config_.hidden});
}

void Attention::backward(Context& ctx, const Tensor& dout_in, const Tensor& x_in, Tensor& dx) {
  // Sequence-parallel: the inputs are this rank's tokens; the heads' backward reads them all, and
  // the input's gradient is reduce-scattered back to this rank's tokens.
  const bool sp = sp_on(ctx);
  const Tensor x = sp ? sp_gather(ctx, x_in) : x_in;
  const Tensor dout = sp ? sp_gather(ctx, dout_in) : dout_in;
  const int64_t B = x.size(0), T = x.size(1);
  const int NH = config_.n_heads;
  const int64_t A = NH * config_.head_dim;
  const DType dt = ctx.compute_dtype;
  const Stream& s = ctx.stream;
  Tensor datty = Tensor::empty({B, T, A}, dt, ctx.device, s);
  out_.backward(ctx, dout, atty_, &datty);
  const int KV = config_.n_kv_heads;
  Tensor dqkv;
  if (flash_expanded_) {
    Tensor dfull = Tensor::empty({B, T, 3 * A}, dt, ctx.device, s);
    kernels::flash_attention_backward(dfull, datty, qkv_full_, atty_, lse_, NH, config_.kind, s);
    dqkv = expand_backward(ctx, dfull);
  } else if (flash_) {
    dqkv = Tensor::empty({B, T, qkv_.out_features()}, dt, ctx.device, s);
    kernels::gqa_attention_backward(dqkv, datty, qkv_full_, atty_, lse_, NH, KV, config_.kind, s);
    if (rotary_ != nullptr) {
      kernels::rotary_qk_backward(dqkv, NH, KV, rotary_->cos(ctx.device, s),
                                  rotary_->sin(ctx.device, s), 0, s);
    }
  } else {
    dqkv = Tensor::empty({B, T, 3 * A}, dt, ctx.device, s);
    kernels::attention_backward(dqkv, datty, qkvr_, att_, NH, config_.kind, s);
    if (expanded()) dqkv = expand_backward(ctx, dqkv);
  }
  // (each rank's heads gave part of the input's gradient)
  if (sp) {
    Tensor dwhole = Tensor::empty(x.shape(), dt, ctx.device, s);
    qkv_.backward(ctx, dqkv, x, &dwhole);
    sp_reduce_scatter(ctx, dwhole, dx);
  } else {
    qkv_.backward(ctx, dqkv, x, &dx);
    tp_all_reduce(ctx, dx);
  }
  release();
}

Tensor Attention::expand(Context& ctx, const Tensor& qkv) const {
  const Stream& s = ctx.stream;
  Tensor full = Tensor::empty({qkv.size(0), qkv.size(1), 3 * config_.n_heads * config_.head_dim},
                              ctx.compute_dtype, ctx.device, s);
  const Tensor* cos = rotary_ != nullptr ? &rotary_->cos(ctx.device, s) : nullptr;
  const Tensor* sin = rotary_ != nullptr ? &rotary_->sin(ctx.device, s) : nullptr;
  kernels::qkv_expand_forward(full, qkv, config_.n_heads, config_.n_kv_heads, cos, sin, 0, s);
  return full;
}

Tensor Attention::expand_backward(Context& ctx, const Tensor& dfull) const {
  const Stream& s = ctx.stream;
  Tensor draw = Tensor::empty({dfull.size(0), dfull.size(1), qkv_.out_features()},
                              ctx.compute_dtype, ctx.device, s);
  const Tensor* cos = rotary_ != nullptr ? &rotary_->cos(ctx.device, s) : nullptr;
  const Tensor* sin = rotary_ != nullptr ? &rotary_->sin(ctx.device, s) : nullptr;
  kernels::qkv_expand_backward(draw, dfull, config_.n_heads, config_.n_kv_heads, cos, sin, 0, s);
  return draw;
}

void Attention::release() {
  atty_ = qkv_full_ = lse_ = qkvr_ = att_ = Tensor();
  qkv_.release();
  out_.release();
}

}  // namespace zt::nn
