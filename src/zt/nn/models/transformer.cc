#include "zt/nn/models/transformer.h"

#include <cmath>
#include <map>
#include <utility>

#include "zt/nn/hf/hf_config.h"
#include "zt/nn/models/family_names.h"

namespace zt::nn {

int padded_vocab(int vocab) {
  const int m = vocab < 4096 ? 64 : 128;
  return (vocab + m - 1) / m * m;
}

Status tensor_parallel_check(const TransformerConfig& c) {
  const int T = c.tp_size;
  if (T <= 1) return Status::ok();
  if (c.n_head % T != 0) {
    return invalid_argument("--tensor-parallel-size {} does not divide {}'s {} attention heads", T,
                            c.model_type, c.n_head);
  }
  if (c.n_kv_head % T != 0 && T % c.n_kv_head != 0) {
    return invalid_argument(
        "--tensor-parallel-size {} neither divides {}'s {} key/value heads nor is a multiple of "
        "them (each head is then kept by T/{} ranks): use a divisor or a multiple of {}",
        T, c.model_type, c.n_kv_head, c.n_kv_head, c.n_kv_head);
  }
  if (c.inner % T != 0) {
    return invalid_argument("--tensor-parallel-size {} does not divide {}'s MLP width {}", T,
                            c.model_type, c.inner);
  }
  if (c.padded_vocab_size % T != 0) {
    return invalid_argument("--tensor-parallel-size {} does not divide {}'s padded vocabulary {}",
                            T, c.model_type, c.padded_vocab_size);
  }
  if (c.embed_dim != c.hidden) {
    return invalid_argument(
        "--tensor-parallel-size: {} (a projected embedding) is not supported yet (tensor "
        "parallelism splits models whose token table is as wide as the model)",
        c.model_type);
  }
  if (c.tp_rank < 0 || c.tp_rank >= T) {
    return invalid_argument("tensor-parallel rank {} outside a group of {}", c.tp_rank, T);
  }
  return Status::ok();
}

Result<std::unique_ptr<Transformer>> tensor_parallel_part(const Transformer& whole, int tp_rank,
                                                          int tp_size) {
  TransformerConfig c = whole.transformer_config();
  c.tp_size = tp_size;
  c.tp_rank = tp_rank;
  ZT_RETURN_IF_ERROR(tensor_parallel_check(c));
  auto part = std::make_unique<Transformer>(c);
  part->set_source_config(whole.source_config());
  std::map<std::string, std::shared_ptr<const ParamSource>> sources;
  for (const auto& u : whole.units()) {
    for (Param* p : u->params()) {
      if (p->source) sources[p->name] = p->source;
    }
  }
  for (auto& u : part->units()) {
    for (Param* p : u->params()) {
      if (auto it = sources.find(p->name); it != sources.end()) p->source = it->second;
    }
  }
  return part;
}

// ---- embedding: token table (+ learned positions) (+ token types) (+ norm) (+ projection)

TransformerEmbedding::TransformerEmbedding(const TransformerConfig& c) : Unit("embedding"), c_(c) {
  const FamilyNames& n = family_names(c.model_type);
  const int64_t E = c.embed_dim;
  const int64_t rows = c.padded_vocab_size / c.tp_size;  // (this rank's part of the vocabulary)
  wte_ = &add_param(n.wte + ".weight", {rows, E}, ParamInit::kNormal, c.init_std);
  if (c.tp_size > 1) {
    wte_->slice = ParamSlice{.full = {c.padded_vocab_size, E},
                             .dim = 0,
                             .ranges = {{c.tp_rank * rows, (c.tp_rank + 1) * rows}}};
  }
  if (c.positions == Positions::kLearned) {
    wpe_ = &add_param(n.wpe + ".weight", {c.max_positions + c.position_offset, c.hidden},
                      ParamInit::kNormal, c.position_init_std);
  }
  if (c.type_vocab > 0) {
    types_ =
        &add_param(n.types + ".weight", {c.type_vocab, c.hidden}, ParamInit::kNormal, c.init_std);
  }
  if (c.embed_norm) norm_.emplace(*this, n.embed_norm, c.hidden, NormKind::kLayerNorm, c.norm_eps);
  if (E != c.hidden) {
    project_in_.emplace(*this, n.project_in, E, c.hidden, Bias::kNone, c.init_std);
  }
  ZT_ASSERT(!(norm_ && project_in_), "embedding: a norm and an input projection together");
}

// Rows of the position table each token reads: offset + t (cached per batch shape and device).
// The ones that start at position 0 (training, evaluation, a prompt) are kept per shape for the
// model's life: a CUDA-graph step reads them at a fixed address, so one made for another shape
// in between must not replace them.
const Tensor& TransformerEmbedding::position_ids(Context& ctx, int64_t B, int64_t T) {
  const int64_t first = ctx.kv_cache != nullptr ? ctx.kv_cache->past_len : 0;
  if (first == 0) {
    Tensor& kept = pos_kept_[{B, T, ctx.device.str()}];
    if (!kept.defined()) {
      Tensor host = Tensor::empty({B, T}, DType::i32);
      int32_t* p = host.data<int32_t>();
      for (int64_t i = 0; i < B * T; ++i) {
        p[i] = static_cast<int32_t>(c_.position_offset + i % T);
      }
      kept = host.to(ctx.device, ctx.stream);
    }
    pos_ids_ = kept;
    pos_b_ = -1;  // (the decoding cache below is for positions past 0)
    return pos_ids_;
  }
  if (pos_b_ != B || pos_t_ != T || pos_first_ != first || pos_device_ != ctx.device.str()) {
    Tensor host = Tensor::empty({B, T}, DType::i32);
    int32_t* p = host.data<int32_t>();
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        p[b * T + t] = static_cast<int32_t>(c_.position_offset + first + t);
      }
    }
    pos_ids_ = host.to(ctx.device, ctx.stream);
    pos_b_ = B;
    pos_t_ = T;
    pos_first_ = first;
    pos_device_ = ctx.device.str();
  }
  return pos_ids_;
}

Tensor TransformerEmbedding::forward(Context& ctx, const Tensor& tokens) {
  ZT_ASSERT(tokens.ndim() == 2 && tokens.dtype() == DType::i32, "tokens must be (B,T) i32");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t first = ctx.kv_cache != nullptr ? ctx.kv_cache->past_len : 0;
  ZT_ASSERT(c_.positions != Positions::kLearned || first + T <= c_.max_positions,
            "positions up to {} past the model's {}", first + T, c_.max_positions);
  tokens_ = tokens;
  const Stream& s = ctx.stream;
  if (fused() && first == 0) {  // GPT-2: tokens and positions in one pass
    Tensor e = Tensor::empty({B, T, c_.hidden}, ctx.compute_dtype, ctx.device, s);
    kernels::embedding_forward(e, tokens, wte_->value, wpe_->value, s);
    return e;
  }
  Tensor e = Tensor::empty({B, T, c_.embed_dim}, ctx.compute_dtype, ctx.device, s);
  const bool split = c_.tp_size > 1;  // each rank looks up its rows; the parts are summed below
  if (split) {
    kernels::embedding_range_forward(e, tokens, wte_->value, c_.tp_rank * wte_->shape[0], s);
  } else {
    kernels::embedding_lookup_forward(e, tokens, wte_->value, kernels::Accumulate::kWrite, s);
  }
  if (project_in_) {  // OPT: positions are added after the projection, at the model's width
    sum_ = e;
    e = project_in_->forward(ctx, e).reshape({B, T, c_.hidden});
  }
  // (positions and types join the tensor-parallel sum on rank 0 only)
  if (wpe_ != nullptr && ctx.tp_rank == 0) {
    kernels::embedding_lookup_forward(e, position_ids(ctx, B, T), wpe_->value,
                                      kernels::Accumulate::kAdd, s);
  } else if (wpe_ != nullptr) {
    (void)position_ids(ctx, B, T);  // (backward reads them on every rank)
  }
  if (types_ != nullptr) {
    types_in_ = ctx.token_types != nullptr
                    ? *ctx.token_types
                    : Tensor::zeros({B, T}, DType::i32, ctx.device, s);  // all type 0
    if (ctx.tp_rank == 0) {
      kernels::embedding_lookup_forward(e, types_in_, types_->value, kernels::Accumulate::kAdd, s);
    }
  }
  if (split && sp_on(ctx)) {
    e = sp_reduce_scatter(ctx, e);  // (sequence-parallel: the sum, this rank's tokens only)
  } else if (split) {
    tp_all_reduce(ctx, e);
  }
  if (norm_) {
    sum_ = e;
    return norm_->forward(ctx, e);
  }
  return e;
}

Tensor TransformerEmbedding::backward(Context& ctx, const Tensor& dout) {
  const Stream& s = ctx.stream;
  if (frozen()) {  // nothing to train here, and no input gradient to return
    tokens_ = types_in_ = sum_ = Tensor();
    if (norm_) norm_->release();
    return Tensor();
  }
  if (fused()) {  // (training never runs with a cache: positions start at 0)
    kernels::embedding_backward(grad_for_add(*wte_, s), grad_for_add(*wpe_, s), dout, tokens_, s);
    tokens_ = Tensor();
    return Tensor();
  }
  Tensor d = dout;
  if (norm_) {
    Tensor dsum = Tensor::empty(sum_.shape(), ctx.compute_dtype, ctx.device, s);
    norm_->backward(ctx, d, sum_, dsum, nullptr);
    norm_->release();
    d = dsum;
  }
  if (c_.tp_size > 1 && sp_on(ctx)) d = sp_gather(ctx, d);  // (every token's, for the lookups)
  if (wpe_ != nullptr) kernels::embedding_lookup_backward(grad_for_add(*wpe_, s), d, pos_ids_, s);
  if (types_ != nullptr) {
    kernels::embedding_lookup_backward(grad_for_add(*types_, s), d, types_in_, s);
  }
  if (project_in_) {
    Tensor de = Tensor::empty(sum_.shape(), ctx.compute_dtype, ctx.device, s);
    project_in_->backward(ctx, d, sum_, &de);
    d = de;
  }
  if (c_.tp_size > 1) {
    kernels::embedding_range_backward(grad_for_add(*wte_, s), d, tokens_,
                                      c_.tp_rank * wte_->shape[0], s);
  } else {
    kernels::embedding_lookup_backward(grad_for_add(*wte_, s), d, tokens_, s);
  }
  tokens_ = types_in_ = sum_ = Tensor();
  return Tensor();
}

// ---- transformer block

namespace {

AttentionConfig attention_config(const TransformerConfig& c, int layer) {
  return {.hidden = c.hidden,
          .n_heads = c.n_head,
          .n_kv_heads = c.n_kv_head,
          .head_dim = c.head_dim,
          .qkv_bias = c.qkv_bias,
          .out_bias = c.out_bias,
          .kind = c.model_type == "bert" ? kernels::AttnKind::kBidirectional
                                         : kernels::AttnKind::kCausal,
          .init_std = c.init_std,
          .out_init_std = c.residual_init_std,
          .layer = layer,
          .tp_size = c.tp_size,
          .tp_rank = c.tp_rank};
}

MlpConfig mlp_config(const TransformerConfig& c) {
  return {.hidden = c.hidden,
          .inner = c.inner,
          .act = c.act,
          .gated = c.gated,
          .bias = c.mlp_bias,
          .init_std = c.init_std,
          .out_init_std = c.residual_init_std,
          .tp_size = c.tp_size,
          .tp_rank = c.tp_rank};
}

}  // namespace

TransformerBlock::Names TransformerBlock::names(const TransformerConfig& c, int index) {
  const FamilyNames& n = family_names(c.model_type);
  const std::string unit = fmt::format("{}.{}", n.block, index);
  const std::string p = unit + ".";
  return {unit, p + n.norm1, p + n.qkv, p + n.attn_out, p + n.norm2, p + n.up, p + n.down};
}

TransformerBlock::TransformerBlock(const TransformerConfig& c, int index, const Names& n,
                                   Rotary* rotary)
    : Unit(n.unit),
      placement_(c.placement),
      norm1_(*this, n.norm1, c.hidden, c.norm, c.norm_eps),
      attn_(*this, {n.qkv, n.attn_out}, attention_config(c, index), rotary),
      norm2_(*this, n.norm2, c.hidden, c.norm, c.norm_eps),
      mlp_(*this, {n.up, n.down}, mlp_config(c)) {}

Tensor TransformerBlock::forward(Context& ctx, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  x_ = x;
  // Each residual add is done by the projection that ends its branch (in its GEMM on CUDA).
  if (placement_ == NormPlacement::kPre) {
    // x + attn(norm1(x)), then + mlp(norm2(.)). The norms' outputs are recomputed in backward,
    // or kept (Context::keep_activations).
    const bool keep = ctx.keep_activations && ctx.mode == Mode::kTrain;
    Tensor n1 = norm1_.forward(ctx, x);
    res_ = attn_.forward(ctx, n1, &x).reshape({B, T, C});
    if (keep) n1_ = std::move(n1);
    n1 = Tensor();
    Tensor n2 = norm2_.forward(ctx, res_);
    Tensor out = mlp_.forward(ctx, n2, &res_).reshape({B, T, C});
    if (keep) n2_ = std::move(n2);
    return out;
  }
  // Post-LN: h = norm1(x + attn(x)); out = norm2(h + mlp(h)).
  res_ = attn_.forward(ctx, x, &x).reshape({B, T, C});
  h_ = norm1_.forward(ctx, res_).reshape({B, T, C});
  res2_ = mlp_.forward(ctx, h_, &h_).reshape({B, T, C});
  return norm2_.forward(ctx, res2_).reshape({B, T, C});
}

void TransformerBlock::release_activations() {
  x_ = res_ = h_ = res2_ = n1_ = n2_ = Tensor();
  norm1_.release();
  norm2_.release();
  attn_.release();
  mlp_.release();
}

Tensor TransformerBlock::backward(Context& ctx, const Tensor& dout) {
  const DType dt = ctx.compute_dtype;
  const Stream& s = ctx.stream;
  const Shape shape = x_.shape();
  Tensor dx = Tensor::empty(shape, dt, ctx.device, s);
  if (placement_ == NormPlacement::kPre) {
    // A norm's output: kept from forward (dropped once used), or recomputed.
    const auto output = [&](Tensor& kept, const Norm& norm, const Tensor& in) {
      return kept.defined() ? std::exchange(kept, Tensor()) : norm.recompute(ctx, in);
    };
    Tensor dn2 = Tensor::empty(shape, dt, ctx.device, s);
    mlp_.backward(ctx, dout, output(n2_, norm2_, res_), dn2);
    Tensor dres = Tensor::empty(shape, dt, ctx.device, s);
    norm2_.backward(ctx, dn2, res_, dres, &dout);
    Tensor dn1 = Tensor::empty(shape, dt, ctx.device, s);
    attn_.backward(ctx, dres, output(n1_, norm1_, x_), dn1);
    norm1_.backward(ctx, dn1, x_, dx, &dres);
  } else {
    Tensor dres2 = Tensor::empty(shape, dt, ctx.device, s);
    norm2_.backward(ctx, dout, res2_, dres2, nullptr);
    Tensor dh = Tensor::empty(shape, dt, ctx.device, s);
    mlp_.backward(ctx, dres2, h_, dh);
    kernels::add_inplace(dh, dres2, s);
    Tensor dres = Tensor::empty(shape, dt, ctx.device, s);
    norm1_.backward(ctx, dh, res_, dres, nullptr);
    attn_.backward(ctx, dres, x_, dx);
    kernels::add_inplace(dx, dres, s);
  }
  norm1_.release();
  norm2_.release();
  x_ = res_ = h_ = res2_ = n1_ = n2_ = Tensor();
  return dx;
}

// ---- head: final norm, projection or MLM transform, LM matmul, loss

TransformerHead::TransformerHead(const TransformerConfig& c, TransformerEmbedding& embedding,
                                 int embedding_unit)
    : Unit("head"), c_(c), embedding_(embedding) {
  const FamilyNames& n = family_names(c.model_type);
  if (c.final_norm) final_norm_.emplace(*this, n.final_norm, c.hidden, c.norm, c.norm_eps);
  if (c.embed_dim != c.hidden) {
    project_out_.emplace(*this, n.project_out, c.hidden, c.embed_dim, Bias::kNone, c.init_std);
  }
  if (c.task == Task::kSequenceClassification) {
    // No LM matmul: the pooler reads the first token, the classifier the pooled vector.
    pooler_.emplace(*this, n.pooler, c.hidden, c.hidden, Bias::kWith, c.init_std);
    classifier_.emplace(*this, n.classifier, c.hidden, c.num_labels, Bias::kWith, c.init_std);
    return;
  }
  if (c.task == Task::kReward) {
    // No LM matmul: the value head reads the final norm's (and projection's) output.
    ZT_ASSERT(!n.score.empty(), "a reward head on a {} model", c.model_type);
    score_.emplace(*this, n.score, c.embed_dim, 1, Bias::kNone, c.init_std);
    return;
  }
  if (c.task == Task::kMaskedLM) {
    transform_.emplace(*this, n.transform, c.hidden, c.hidden, Bias::kWith, c.init_std);
    transform_norm_.emplace(*this, n.transform_norm, c.hidden, NormKind::kLayerNorm, c.norm_eps);
    // (tensor-parallel: this rank's vocabulary columns, as the tied token table's rows)
    const int64_t cols = c.padded_vocab_size / c.tp_size;
    lm_bias_ = &add_param(n.lm_bias, {cols}, ParamInit::kZeros);
    if (c.tp_size > 1) {
      lm_bias_->slice = ParamSlice{.full = {c.padded_vocab_size},
                                   .dim = 0,
                                   .ranges = {{c.tp_rank * cols, (c.tp_rank + 1) * cols}}};
    }
  }
  if (c.tied == Tied::kYes) {
    add_extra_unit(embedding_unit);
  } else {
    const int64_t rows = c.padded_vocab_size / c.tp_size;  // (tensor-parallel: this rank's rows)
    lm_weight_ = &add_param(n.lm_head + ".weight", {rows, c.embed_dim}, ParamInit::kNormal,
                            c.init_std);
    if (c.tp_size > 1) {
      lm_weight_->slice = ParamSlice{.full = {c.padded_vocab_size, c.embed_dim},
                                     .dim = 0,
                                     .ranges = {{c.tp_rank * rows, (c.tp_rank + 1) * rows}}};
    }
  }
}

Param& TransformerHead::table() {
  return lm_weight_ != nullptr ? *lm_weight_ : embedding_.tokens_table();
}

// Decoding needs only each row's last position: the head runs on those (B, 1, C), as
// transformers' generate does (logits_to_keep = 1), not on a prompt's whole (B, T, V) logits.
static Tensor last_positions(const Context& ctx, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  Tensor last = Tensor::empty({B, 1, C}, x.dtype(), x.device(), ctx.stream);
  for (int64_t b = 0; b < B; ++b) {
    Tensor dst = last.view(b * C, {C});
    dst.copy_from(x.view((b * T + T - 1) * C, {C}), ctx.stream);
  }
  return last;
}

Tensor TransformerHead::forward(Context& ctx, const Tensor& x_in) {
  if (classifier_) return forward_classify(ctx, x_in);
  if (score_) return forward_reward(ctx, x_in);
  const Tensor x = ctx.kv_cache != nullptr && ctx.targets == nullptr && x_in.size(1) > 1
                       ? last_positions(ctx, x_in)
                       : x_in;
  const int64_t B = x.size(0), T = x.size(1), N = B * T;
  const DType dt = ctx.compute_dtype, acc = kernels::accum_dtype(dt);
  const Stream& s = ctx.stream;
  in_shape_ = x.shape();
  x_ = x.reshape({N, c_.hidden});
  Tensor h = x_;
  if (final_norm_) h = normed_ = final_norm_->forward(ctx, h);
  // Sequence-parallel: x is this rank's tokens; the vocabulary's columns are computed for all.
  const bool sp = sp_on(ctx);
  ZT_ASSERT(!sp || !transform_, "sequence parallelism does not split BERT's masked-LM head");
  gathered_ = sp ? sp_gather(ctx, h) : Tensor();
  if (sp) h = gathered_;
  const int64_t rows = h.size(0);
  if (project_out_) h = projected_ = project_out_->forward(ctx, h);
  if (transform_) {
    t_pre_ = transform_->forward(ctx, h);
    t_act_ = Tensor::empty(t_pre_.shape(), dt, ctx.device, s);
    kernels::activation_forward(t_act_, t_pre_, kernels::Activation::kGeluErf, s);
    h = transform_norm_->forward(ctx, t_act_);
  }
  features_ = h;
  const Tensor& w = table().value;
  const int64_t Vp = w.size(0);
  logits_ = Tensor::empty({rows, Vp}, dt, ctx.device, s);
  kernels::matmul_forward(logits_, features_, w, lm_bias_ != nullptr ? &lm_bias_->value : nullptr,
                          s);
  have_dlogits_ = false;
  if (ctx.targets == nullptr) {
    if (c_.tp_size == 1) return logits_.reshape({B, T, Vp});
    // Vocabulary-parallel logits (generation): every rank's columns gathered, in rank order.
    ZT_ASSERT(ctx.tp_comm != nullptr && ctx.tp_size == c_.tp_size,
              "a tensor-parallel head (this rank holds {} of {} vocabulary columns) gives logits "
              "only with its tensor-parallel group in the context",
              Vp, c_.padded_vocab_size);
    return tp_gather_columns(ctx, logits_).reshape({B, T, c_.padded_vocab_size});
  }
  ZT_ASSERT(ctx.targets->numel() == rows, "targets {} for {} positions", ctx.targets->numel(), rows);
  Tensor losses = Tensor::empty({rows}, acc, ctx.device, s);
  Tensor targets = ctx.targets->reshape({rows});
  if (c_.tp_size > 1) {
    // Vocabulary-parallel: each rank holds columns [col0, col0 + Vp / T) of the logits; the
    // softmax's max and sums (and the target's logit) are reduced over the ranks, never the
    // logits themselves.
    const int64_t col0 = c_.tp_rank * Vp;
    Tensor rowmax = Tensor::empty({rows}, DType::f32, ctx.device, s);
    kernels::crossentropy_parallel_max(rowmax, logits_, col0, c_.vocab_size, s);
    tp_all_reduce(ctx, rowmax, ReduceOp::kMax);
    Tensor sums = Tensor::empty({rows, 2}, DType::f32, ctx.device, s);
    kernels::crossentropy_parallel_sums(sums, logits_, targets, rowmax, col0, c_.vocab_size, s);
    tp_all_reduce(ctx, sums);
    const bool train = ctx.mode == Mode::kTrain;
    Tensor out = acc == DType::f32 ? losses : Tensor::empty({rows}, DType::f32, ctx.device, s);
    kernels::crossentropy_parallel_finish(out, logits_, targets, rowmax, sums, col0,
                                          c_.vocab_size, ctx.dloss, train, s);
    if (acc != DType::f32) kernels::cast(losses, out, s);
    have_dlogits_ = train;
    return losses;
  }
  if (ctx.mode == Mode::kTrain) {
    kernels::crossentropy_fused(losses, logits_, targets, c_.vocab_size, ctx.dloss, s);
    have_dlogits_ = true;
  } else {
    kernels::crossentropy_forward(losses, logits_, targets, c_.vocab_size, s);
  }
  return losses;
}

// BERT's classifier: pooled = tanh(W_p x[:, 0] + b_p); logits = W_c pooled + b_c (B, labels).
// With targets (B) i32 (negative: not counted) it returns per-row losses (B).
Tensor TransformerHead::forward_classify(Context& ctx, const Tensor& x) {
  ZT_ASSERT(!sp_on(ctx), "sequence parallelism does not split the classifier's rows");
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const DType dt = ctx.compute_dtype, acc = kernels::accum_dtype(dt);
  const Stream& s = ctx.stream;
  in_shape_ = x.shape();
  first_ = Tensor::empty({B, C}, dt, ctx.device, s);
  for (int64_t b = 0; b < B; ++b) {
    Tensor row = first_.view(b * C, {C});
    row.copy_from(x.view(b * T * C, {C}), s);
  }
  pooled_pre_ = pooler_->forward(ctx, first_);
  features_ = Tensor::empty(pooled_pre_.shape(), dt, ctx.device, s);
  kernels::activation_forward(features_, pooled_pre_, kernels::Activation::kTanh, s);
  logits_ = classifier_->forward(ctx, features_);
  have_dlogits_ = false;
  if (ctx.targets == nullptr) return logits_;
  ZT_ASSERT(ctx.targets->numel() == B,
            "sequence classification takes one label per row: {} for "
            "{} rows",
            ctx.targets->numel(), B);
  Tensor losses = Tensor::empty({B}, acc, ctx.device, s);
  Tensor targets = ctx.targets->reshape({B});
  if (ctx.mode == Mode::kTrain) {
    kernels::crossentropy_fused(losses, logits_, targets, c_.num_labels, ctx.dloss, s);
    have_dlogits_ = true;
  } else {
    kernels::crossentropy_forward(losses, logits_, targets, c_.num_labels, s);
  }
  return losses;
}

Tensor TransformerHead::backward_classify(Context& ctx) {
  const DType dt = ctx.compute_dtype;
  const Stream& s = ctx.stream;
  const int64_t B = in_shape_[0], T = in_shape_[1], C = in_shape_[2];
  Tensor dpooled = Tensor::empty(features_.shape(), dt, ctx.device, s);
  classifier_->backward(ctx, logits_, features_, &dpooled);
  kernels::activation_backward(dpooled, dpooled, pooled_pre_, kernels::Activation::kTanh, s);
  Tensor dfirst = Tensor::empty(first_.shape(), dt, ctx.device, s);
  pooler_->backward(ctx, dpooled, first_, &dfirst);
  // Only the first token of each row reaches the loss.
  Tensor dx = Tensor::zeros(in_shape_, dt, ctx.device, s);
  for (int64_t b = 0; b < B; ++b) {
    Tensor row = dx.view(b * T * C, {C});
    row.copy_from(dfirst.view(b * C, {C}), s);
  }
  first_ = pooled_pre_ = features_ = logits_ = Tensor();
  have_dlogits_ = false;
  return dx;
}

// ---- reward head

namespace {

// Host values into a new tensor of `dtype` on ctx's device (a few per batch: scores' losses and
// gradients).
Tensor upload_doubles(const Context& ctx, const std::vector<double>& v, const Shape& shape,
                      DType dtype) {
  Tensor host = Tensor::empty(shape, dtype, Device::cpu());
  convert_host(host.data(), dtype, v.data(), DType::f64, static_cast<int64_t>(v.size()));
  return ctx.device.is_cpu() ? host : host.to(ctx.device, ctx.stream);
}

}  // namespace

// The value head, as transformers' <Family>ForSequenceClassification with num_labels 1:
// score = W (final_norm(x)) at a row's last real token.
//   - Without targets: scores at every position (B,T) (as an LM returns logits at every
//     position); the caller reads each row's last real token. Under causal attention a row's
//     score at t never depends on the tokens after t (padding on the right is never read).
//   - With targets (B,T) i32: B is 2P rows, the P chosen rows then the P rejected rows (data/
//     jsonl_dataset.h's pairs); each row has exactly one target >= 0, at its last real token
//     (the position scored; the value is that token's id, so the engine counts 2P targets).
//     Returns per-position losses (B*T accum dtype): both rows of pair p carry
//     L_p = -log sigmoid(r_chosen - r_rejected) at their scored position, zero elsewhere, so
//     sum / 2P (the engine's mean over counted targets) is the mean pair loss. In kTrain mode the
//     gradient is kept for backward: with dloss = scale / (GAS * 2P) (the engine's), the mean
//     over pairs has d/dr_chosen = -2 dloss sigmoid(-(r_c - r_r)) and d/dr_rejected the opposite.
// Only the scored rows go through the final norm and the head when targets are given.
Tensor TransformerHead::forward_reward(Context& ctx, const Tensor& x) {
  ZT_ASSERT(!sp_on(ctx), "sequence parallelism does not split the reward head's rows");
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), N = B * T;
  const DType dt = ctx.compute_dtype, acc = kernels::accum_dtype(dt);
  const Stream& s = ctx.stream;
  in_shape_ = x.shape();
  have_dlogits_ = false;
  score_at_.clear();
  if (ctx.targets == nullptr) {
    x_ = x.reshape({N, C});
  } else {
    ZT_ASSERT(ctx.targets->numel() == N, "targets {} for {} positions", ctx.targets->numel(), N);
    ZT_ASSERT(B % 2 == 0, "a reward batch holds pairs: chosen rows then rejected rows, got {} rows",
              B);
    const Tensor th =
        ctx.targets->device().is_cpu() ? *ctx.targets : ctx.targets->to(Device::cpu(), s);
    const int32_t* tg = th.data<int32_t>();
    for (int64_t b = 0; b < B; ++b) {
      int64_t at = -1;
      for (int64_t t = 0; t < T; ++t) {
        if (tg[b * T + t] < 0) continue;
        ZT_ASSERT(at < 0, "reward targets: row {} marks positions {} and {} (one per row)", b, at,
                  t);
        at = t;
      }
      ZT_ASSERT(at >= 0, "reward targets: row {} marks no position to score", b);
      score_at_.push_back(b * T + at);
    }
    x_ = Tensor::empty({B, C}, dt, ctx.device, s);
    for (int64_t b = 0; b < B; ++b) {
      Tensor row = x_.view(b * C, {C});
      row.copy_from(x.view(score_at_[static_cast<size_t>(b)] * C, {C}), s);
    }
  }
  Tensor h = x_;
  if (final_norm_) h = normed_ = final_norm_->forward(ctx, h);
  if (project_out_) h = projected_ = project_out_->forward(ctx, h);
  features_ = h;
  logits_ = score_->forward(ctx, features_);  // (rows, 1)
  if (ctx.targets == nullptr) return logits_.reshape({B, T});
  const std::vector<double> r =
      (ctx.device.is_cpu() ? logits_ : logits_.to(Device::cpu(), s)).to_doubles();
  const int64_t P = B / 2;
  std::vector<double> losses(static_cast<size_t>(N), 0.0), dscores(static_cast<size_t>(B), 0.0);
  for (int64_t p = 0; p < P; ++p) {
    const double d = r[static_cast<size_t>(p)] - r[static_cast<size_t>(P + p)];
    // -log sigmoid(d) = log(1 + e^-d), and sigmoid(-d), without overflow for any d.
    const double loss = d > 0 ? std::log1p(std::exp(-d)) : -d + std::log1p(std::exp(d));
    const double g = d > 0 ? std::exp(-d) / (1 + std::exp(-d)) : 1 / (1 + std::exp(d));
    losses[static_cast<size_t>(score_at_[static_cast<size_t>(p)])] = loss;
    losses[static_cast<size_t>(score_at_[static_cast<size_t>(P + p)])] = loss;
    dscores[static_cast<size_t>(p)] = -2.0 * ctx.dloss * g;
    dscores[static_cast<size_t>(P + p)] = 2.0 * ctx.dloss * g;
  }
  if (ctx.mode == Mode::kTrain) {
    logits_ = upload_doubles(ctx, dscores, {B, 1}, dt);  // now the scores' gradient
    have_dlogits_ = true;
  }
  return upload_doubles(ctx, losses, {N}, acc);
}

Tensor TransformerHead::backward_reward(Context& ctx) {
  const DType dt = ctx.compute_dtype;
  const Stream& s = ctx.stream;
  const int64_t C = in_shape_[2];
  Tensor dh = Tensor::empty(features_.shape(), dt, ctx.device, s);
  score_->backward(ctx, logits_, features_, &dh);
  const Tensor& before_project = final_norm_ ? normed_ : x_;
  if (project_out_) {
    Tensor din = Tensor::empty(before_project.shape(), dt, ctx.device, s);
    project_out_->backward(ctx, dh, before_project, &din);
    dh = din;
  }
  Tensor drows = dh;
  if (final_norm_) {
    drows = Tensor::empty(x_.shape(), dt, ctx.device, s);
    final_norm_->backward(ctx, dh, x_, drows, nullptr);
    final_norm_->release();
  }
  // Only the scored position of each row reaches the loss (every position, for a value head
  // trained from outside).
  if (score_at_.empty()) {
    x_ = normed_ = projected_ = features_ = logits_ = Tensor();
    have_dlogits_ = false;
    return drows.reshape(in_shape_);
  }
  Tensor dx = Tensor::zeros(in_shape_, dt, ctx.device, s);
  for (size_t b = 0; b < score_at_.size(); ++b) {
    Tensor row = dx.view(score_at_[b] * C, {C});
    row.copy_from(drows.view(static_cast<int64_t>(b) * C, {C}), s);
  }
  x_ = normed_ = projected_ = features_ = logits_ = Tensor();
  score_at_.clear();
  have_dlogits_ = false;
  return dx;
}

Tensor TransformerHead::backward(Context& ctx, const Tensor& dout) {
  if (score_ && dout.defined()) {
    // A value head trained from outside (PPO's critic): dout is the gradient of the values
    // (B,T) its forward without targets returned, at every position.
    ZT_ASSERT(score_at_.empty() && x_.defined() && dout.numel() == x_.size(0),
              "value head backward: {} gradients for {} positions of a forward without targets",
              dout.numel(), x_.defined() ? x_.size(0) : 0);
    logits_ = Tensor::empty({dout.numel(), 1}, ctx.compute_dtype, ctx.device, ctx.stream);
    kernels::cast(logits_, dout.reshape({dout.numel(), 1}), ctx.stream);
    return backward_reward(ctx);
  }
  ZT_ASSERT(have_dlogits_, "head backward without a training forward with targets");
  if (classifier_) return backward_classify(ctx);
  if (score_) return backward_reward(ctx);
  const DType dt = ctx.compute_dtype;
  const Stream& s = ctx.stream;
  if (ctx.row_scale != nullptr) kernels::scale_rows(logits_, *ctx.row_scale, s);
  Param& w = table();
  Tensor dh = Tensor::empty(features_.shape(), dt, ctx.device, s);
  // A frozen head (or a frozen tied table) has no gradient buffers: undefined skips them. The
  // table's gradient is its own GEMM, which writes it when unwritten (a tied table's: the head
  // runs before the embedding's backward, which then adds).
  Tensor no_dweight;
  kernels::matmul_backward(
      &dh, no_dweight,
      lm_bias_ != nullptr && lm_bias_->grad.defined() ? &grad_for_add(*lm_bias_, s) : nullptr,
      logits_, features_, w.value, s);
  if (w.grad.defined()) {
    kernels::matmul_weight_grad(
        w.grad, logits_, features_,
        grad_write(w) ? kernels::Accumulate::kWrite : kernels::Accumulate::kAdd, s);
  }
  // Tensor-parallel: each rank's vocabulary columns gave part of the features' gradient.
  // Sequence-parallel, the sum is needed on this rank's tokens only, unless a projection (whose
  // weight every rank holds whole) reads all of it first.
  const bool sp = gathered_.defined();
  if (sp && !project_out_) {
    dh = sp_reduce_scatter(ctx, dh);
  } else if (c_.tp_size > 1) {
    tp_all_reduce(ctx, dh);
  }
  // The input of each stage, walking back: the transform reads the projection's output (or the
  // norm's, or x), the projection reads the norm's output (or x); gathered when sequence-parallel.
  const Tensor& before_project = sp ? gathered_ : final_norm_ ? normed_ : x_;
  const Tensor& before_transform = project_out_ ? projected_ : before_project;
  if (transform_) {
    Tensor dact = Tensor::empty(t_act_.shape(), dt, ctx.device, s);
    transform_norm_->backward(ctx, dh, t_act_, dact, nullptr);
    transform_norm_->release();
    Tensor dpre = Tensor::empty(t_pre_.shape(), dt, ctx.device, s);
    kernels::activation_backward(dpre, dact, t_pre_, kernels::Activation::kGeluErf, s);
    Tensor din = Tensor::empty(before_transform.shape(), dt, ctx.device, s);
    transform_->backward(ctx, dpre, before_transform, &din);
    dh = din;
  }
  if (project_out_) {
    Tensor din = Tensor::empty(before_project.shape(), dt, ctx.device, s);
    project_out_->backward(ctx, dh, before_project, &din);
    dh = sp ? sp_part_of(ctx, din) : din;
  }
  Tensor dx = dh;
  if (final_norm_) {
    dx = Tensor::empty(x_.shape(), dt, ctx.device, s);
    final_norm_->backward(ctx, dh, x_, dx, nullptr);
    final_norm_->release();
  }
  x_ = normed_ = gathered_ = projected_ = t_pre_ = t_act_ = features_ = logits_ = Tensor();
  have_dlogits_ = false;
  return dx.reshape(in_shape_);
}

// ---- the model

Transformer::Transformer(const TransformerConfig& config) : config_(config) {
  ZT_ASSERT(config.n_head > 0 && config.n_kv_head > 0 && config.head_dim > 0 && config.hidden > 0 &&
                config.n_layer > 0,
            "transformer: layers {}, heads {}/{}, width {}, head size {} must be positive",
            config.n_layer, config.n_head, config.n_kv_head, config.hidden, config.head_dim);
  if (config.positions == Positions::kRotary) {
    RopeConfig rope = config.rope;
    rope.head_dim = config.head_dim;
    rope.max_positions = config.max_positions;
    rotary_ = std::make_unique<Rotary>(rope);
  }
  auto emb = std::make_unique<TransformerEmbedding>(config_);
  TransformerEmbedding& emb_ref = *emb;
  units_.push_back(std::move(emb));
  for (int l = 0; l < config.n_layer; ++l) {
    units_.push_back(std::make_unique<TransformerBlock>(config_, l, rotary_.get()));
  }
  units_.push_back(std::make_unique<TransformerHead>(config_, emb_ref, 0));
}

nlohmann::json Transformer::config_json() const {
  return source_config_.is_null() ? hf_config_from_transformer(config_) : source_config_;
}

}  // namespace zt::nn
