#include "zt/nn/models/gpt2.h"

#include <cmath>
#include <cstdlib>
#include <string_view>

#include "zt/kernels/ops.h"
#include "zt/nn/models/gpt2_units.h"

namespace zt::nn {
namespace {

Shape rows(const Tensor& t, int64_t cols) {
  return {t.numel() / cols, cols};
}

// The fused attention kernels run on GPUs where they exist (bf16/f16, head size 64 or 128); the CPU
// keeps the unfused reference, faster there. ZT_FLASH_ATTENTION=0 turns the fused path off
// (to compare, or to rule it out).
bool want_flash(Device device, DType dtype, int64_t head_size) {
  static const bool enabled = [] {
    const char* v = std::getenv("ZT_FLASH_ATTENTION");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return enabled && device.is_cuda() &&
         kernels::flash_attention_supported(device, dtype, head_size);
}

}  // namespace

int gpt2_padded_vocab(int vocab) {
  int m = vocab < 4096 ? 64 : 128;
  return (vocab + m - 1) / m * m;
}

Result<Gpt2Config> gpt2_config_named(std::string_view name) {
  auto make = [](int l, int h, int c, int vocab, int ctx) {
    return Gpt2Config{.n_layer = l,
                      .n_head = h,
                      .n_embd = c,
                      .vocab_size = vocab,
                      .padded_vocab_size = gpt2_padded_vocab(vocab),
                      .max_seq_len = ctx};
  };
  if (name == "gpt2-tiny") return make(4, 4, 128, 257, 256);
  if (name == "gpt2") return make(12, 12, 768, 50257, 1024);
  if (name == "gpt2-medium") return make(24, 16, 1024, 50257, 1024);
  if (name == "gpt2-large") return make(36, 20, 1280, 50257, 1024);
  if (name == "gpt2-xl") return make(48, 25, 1600, 50257, 1024);
  if (name == "gpt-1.3b") return make(24, 16, 2048, 50257, 1024);
  if (name == "gpt-2.7b") return make(32, 32, 2560, 50257, 2048);
  if (name == "gpt-6.7b") return make(32, 32, 4096, 50257, 2048);
  if (name == "gpt-13b") return make(40, 40, 5120, 50257, 2048);
  // Between the paper's 13B and 175B, same shape rules (head size 128): for "largest model" probes.
  if (name == "gpt-20b") return make(44, 48, 6144, 50257, 2048);
  if (name == "gpt-30b") return make(48, 56, 7168, 50257, 2048);
  if (name == "gpt-40b") return make(48, 64, 8192, 50257, 2048);
  if (name == "gpt-50b") return make(60, 64, 8192, 50257, 2048);
  if (name == "gpt-65b") return make(80, 64, 8192, 50257, 2048);
  std::string names;
  for (const auto& n : gpt2_config_names()) names += (names.empty() ? "" : ", ") + n;
  return not_found("unknown model '{}'; known models: {}", name, names);
}

std::vector<std::string> gpt2_config_names() {
  return {"gpt2-tiny", "gpt2",     "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt-1.3b",
          "gpt-2.7b",  "gpt-6.7b", "gpt-13b",     "gpt-20b",    "gpt-30b",
          "gpt-40b",   "gpt-50b",  "gpt-65b"};
}

Gpt2::Gpt2(const Gpt2Config& config) : config_(config) {
  ZT_ASSERT(config.n_embd % config.n_head == 0, "n_embd {} not divisible by n_head {}",
            config.n_embd, config.n_head);
  auto emb = std::make_unique<Gpt2Embedding>(config);
  Gpt2Embedding& emb_ref = *emb;
  units_.push_back(std::move(emb));
  for (int l = 0; l < config.n_layer; ++l) units_.push_back(std::make_unique<Gpt2Block>(config, l));
  units_.push_back(std::make_unique<Gpt2Head>(config, emb_ref, 0));
}

// ---- embedding

Gpt2Embedding::Gpt2Embedding(const Gpt2Config& c) : Unit("embedding") {
  wte_ = &add_param("wte", {c.padded_vocab_size, c.n_embd}, ParamInit::kNormal, 0.02f);
  wpe_ = &add_param("wpe", {c.max_seq_len, c.n_embd}, ParamInit::kNormal, 0.01f);
}

Tensor Gpt2Embedding::forward(Context& ctx, const Tensor& tokens) {
  ZT_ASSERT(tokens.ndim() == 2 && tokens.dtype() == DType::i32, "tokens must be (B,T) i32");
  ZT_ASSERT(tokens.size(1) <= wpe_->shape[0], "sequence {} longer than the model's context {}",
            tokens.size(1), wpe_->shape[0]);
  tokens_ = tokens;
  Tensor out = Tensor::empty({tokens.size(0), tokens.size(1), wte_->shape[1]}, ctx.compute_dtype,
                             ctx.device, ctx.stream);
  kernels::embedding_forward(out, tokens, wte_->value, wpe_->value, ctx.stream);
  return out;
}

Tensor Gpt2Embedding::backward(Context& ctx, const Tensor& dout) {
  kernels::embedding_backward(wte_->grad, wpe_->grad, dout, tokens_, ctx.stream);
  tokens_ = Tensor();
  return Tensor();
}

// ---- transformer block

Gpt2Block::Gpt2Block(const Gpt2Config& c, int index)
    : Unit(fmt::format("h.{}", index)), n_head_(c.n_head) {
  const int64_t C = c.n_embd;
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  std::string p = fmt::format("h.{}.", index);
  ln1_w_ = &add_param(p + "ln_1.weight", {C}, ParamInit::kOnes);
  ln1_b_ = &add_param(p + "ln_1.bias", {C}, ParamInit::kZeros);
  qkv_w_ = &add_param(p + "attn.c_attn.weight", {3 * C, C}, ParamInit::kNormal);
  qkv_b_ = &add_param(p + "attn.c_attn.bias", {3 * C}, ParamInit::kZeros);
  proj_w_ = &add_param(p + "attn.c_proj.weight", {C, C}, ParamInit::kNormal, proj_std);
  proj_b_ = &add_param(p + "attn.c_proj.bias", {C}, ParamInit::kZeros);
  ln2_w_ = &add_param(p + "ln_2.weight", {C}, ParamInit::kOnes);
  ln2_b_ = &add_param(p + "ln_2.bias", {C}, ParamInit::kZeros);
  fc_w_ = &add_param(p + "mlp.c_fc.weight", {4 * C, C}, ParamInit::kNormal);
  fc_b_ = &add_param(p + "mlp.c_fc.bias", {4 * C}, ParamInit::kZeros);
  fcproj_w_ = &add_param(p + "mlp.c_proj.weight", {C, 4 * C}, ParamInit::kNormal, proj_std);
  fcproj_b_ = &add_param(p + "mlp.c_proj.bias", {C}, ParamInit::kZeros);
}

// layernorm(in) again, as the forward computed it (same kernel, same inputs: the same values).
Tensor Gpt2Block::recompute_layernorm(Context& ctx, const Tensor& in, const Param& w,
                                      const Param& b) {
  const int64_t N = in.size(0);
  const DType acc = kernels::accum_dtype(ctx.compute_dtype);
  Tensor out = Tensor::empty(in.shape(), ctx.compute_dtype, ctx.device, ctx.stream);
  Tensor mean = Tensor::empty({N}, acc, ctx.device, ctx.stream);
  Tensor rstd = Tensor::empty({N}, acc, ctx.device, ctx.stream);
  kernels::layernorm_forward(out, mean, rstd, in, w.value, b.value, ctx.stream);
  return out;
}

Tensor Gpt2Block::forward(Context& ctx, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const int64_t N = B * T;
  const DType dt = ctx.compute_dtype, acc = kernels::accum_dtype(dt);
  const Device dev = ctx.device;
  const Stream& s = ctx.stream;
  const int64_t HS = C / n_head_;
  x_ = x;
  Tensor x2 = x.reshape({N, C});
  // The layernorm outputs are not kept: backward recomputes them from their inputs (kept anyway
  // for the layernorm backward), one memory-bound pass instead of holding C values per token.
  Tensor ln1 = Tensor::empty({N, C}, dt, dev, s);
  ln1_mean_ = Tensor::empty({N}, acc, dev, s);
  ln1_rstd_ = Tensor::empty({N}, acc, dev, s);
  kernels::layernorm_forward(ln1, ln1_mean_, ln1_rstd_, x2, ln1_w_->value, ln1_b_->value, s);
  Tensor qkv = Tensor::empty({B, T, 3 * C}, dt, dev, s);
  Tensor qkv2 = qkv.reshape({N, 3 * C});
  kernels::matmul_forward(qkv2, ln1, qkv_w_->value, &qkv_b_->value, s);
  atty_ = Tensor::empty({B, T, C}, dt, dev, s);
  use_flash_ = want_flash(dev, dt, HS);
  if (use_flash_) {
    // Backward recomputes the probabilities from qkv and the row log-sum-exp.
    qkv_ = qkv;
    lse_ = Tensor::empty({B, n_head_, T}, DType::f32, dev, s);
    kernels::flash_attention_forward(atty_, lse_, qkv, n_head_, s);
  } else {
    // qkv is not kept: attention's backward reads its permuted copy qkvr.
    qkvr_ = Tensor::empty({3, B, n_head_, T, HS}, dt, dev, s);
    att_ = Tensor::empty({B, n_head_, T, T}, dt, dev, s);
    kernels::attention_forward(atty_, qkvr_, att_, qkv, n_head_, s);
  }
  Tensor proj = Tensor::empty({N, C}, dt, dev, s);
  kernels::matmul_forward(proj, atty_.reshape({N, C}), proj_w_->value, &proj_b_->value, s);
  res2_ = Tensor::empty({N, C}, dt, dev, s);
  kernels::residual_forward(res2_, x2, proj, s);
  Tensor ln2 = Tensor::empty({N, C}, dt, dev, s);
  ln2_mean_ = Tensor::empty({N}, acc, dev, s);
  ln2_rstd_ = Tensor::empty({N}, acc, dev, s);
  kernels::layernorm_forward(ln2, ln2_mean_, ln2_rstd_, res2_, ln2_w_->value, ln2_b_->value, s);
  fch_ = Tensor::empty({N, 4 * C}, dt, dev, s);
  kernels::matmul_forward(fch_, ln2, fc_w_->value, &fc_b_->value, s);
  // gelu(fch) is not kept either: backward recomputes it (one cheap elementwise pass) instead of
  // holding 4C values per token per block.
  Tensor fch_gelu = Tensor::empty({N, 4 * C}, dt, dev, s);
  kernels::gelu_forward(fch_gelu, fch_, s);
  Tensor fcproj = Tensor::empty({N, C}, dt, dev, s);
  kernels::matmul_forward(fcproj, fch_gelu, fcproj_w_->value, &fcproj_b_->value, s);
  Tensor out = Tensor::empty({B, T, C}, dt, dev, s);
  Tensor out2 = out.reshape({N, C});
  kernels::residual_forward(out2, res2_, fcproj, s);
  return out;
}

Tensor Gpt2Block::backward(Context& ctx, const Tensor& dout) {
  const int64_t B = x_.size(0), T = x_.size(1), C = x_.size(2);
  const int64_t N = B * T;
  const DType dt = ctx.compute_dtype;
  const Device dev = ctx.device;
  const Stream& s = ctx.stream;
  Tensor dout2 = dout.reshape({N, C});
  // MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))).
  Tensor dfch_gelu = Tensor::empty({N, 4 * C}, dt, dev, s);
  {
    Tensor fch_gelu = Tensor::empty({N, 4 * C}, dt, dev, s);
    kernels::gelu_forward(fch_gelu, fch_, s);
    kernels::matmul_backward(&dfch_gelu, fcproj_w_->grad, &fcproj_b_->grad, dout2, fch_gelu,
                             fcproj_w_->value, s);
  }
  Tensor dfch = Tensor::empty({N, 4 * C}, dt, dev, s);
  kernels::gelu_backward(dfch, dfch_gelu, fch_, s);
  Tensor dln2 = Tensor::empty({N, C}, dt, dev, s);
  kernels::matmul_backward(&dln2, fc_w_->grad, &fc_b_->grad, dfch,
                           recompute_layernorm(ctx, res2_, *ln2_w_, *ln2_b_), fc_w_->value, s);
  Tensor dres2 = Tensor::empty({N, C}, dt, dev, s);
  kernels::layernorm_backward(dres2, ln2_w_->grad, ln2_b_->grad, dln2, res2_, ln2_w_->value,
                              ln2_mean_, ln2_rstd_, &dout2, s);
  // Attention: res2 = x + proj(attn(ln1(x))).
  Tensor datty = Tensor::empty({B, T, C}, dt, dev, s);
  Tensor datty2 = datty.reshape({N, C});
  kernels::matmul_backward(&datty2, proj_w_->grad, &proj_b_->grad, dres2, atty_.reshape({N, C}),
                           proj_w_->value, s);
  Tensor dqkv = Tensor::empty({B, T, 3 * C}, dt, dev, s);
  if (use_flash_) {
    kernels::flash_attention_backward(dqkv, datty, qkv_, atty_, lse_, n_head_, s);
  } else {
    kernels::attention_backward(dqkv, datty, qkvr_, att_, n_head_, s);
  }
  Tensor dln1 = Tensor::empty({N, C}, dt, dev, s);
  kernels::matmul_backward(&dln1, qkv_w_->grad, &qkv_b_->grad, dqkv.reshape({N, 3 * C}),
                           recompute_layernorm(ctx, x_.reshape({N, C}), *ln1_w_, *ln1_b_),
                           qkv_w_->value, s);
  Tensor dx = Tensor::empty({B, T, C}, dt, dev, s);
  Tensor dx2 = dx.reshape({N, C});
  kernels::layernorm_backward(dx2, ln1_w_->grad, ln1_b_->grad, dln1, x_.reshape({N, C}),
                              ln1_w_->value, ln1_mean_, ln1_rstd_, &dres2, s);
  // Release saved activations: memory returns to the cache for the next unit.
  x_ = ln1_mean_ = ln1_rstd_ = qkvr_ = att_ = atty_ = res2_ = qkv_ = lse_ = Tensor();
  ln2_mean_ = ln2_rstd_ = fch_ = Tensor();
  return dx;
}

// ---- final layernorm + tied LM head + loss

Gpt2Head::Gpt2Head(const Gpt2Config& c, Gpt2Embedding& embedding, int embedding_unit)
    : Unit("head"), vocab_(c.vocab_size), embedding_(embedding) {
  lnf_w_ = &add_param("ln_f.weight", {c.n_embd}, ParamInit::kOnes);
  lnf_b_ = &add_param("ln_f.bias", {c.n_embd}, ParamInit::kZeros);
  add_extra_unit(embedding_unit);
}

Tensor Gpt2Head::forward(Context& ctx, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const int64_t N = B * T;
  const DType dt = ctx.compute_dtype, acc = kernels::accum_dtype(dt);
  const Device dev = ctx.device;
  const Stream& s = ctx.stream;
  const Tensor& wte = embedding_.wte().value;
  const int64_t Vp = wte.size(0);
  x_ = x;
  lnf_ = Tensor::empty({N, C}, dt, dev, s);
  lnf_mean_ = Tensor::empty({N}, acc, dev, s);
  lnf_rstd_ = Tensor::empty({N}, acc, dev, s);
  kernels::layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x.reshape(rows(x, C)), lnf_w_->value,
                             lnf_b_->value, s);
  logits_ = Tensor::empty({N, Vp}, dt, dev, s);
  kernels::matmul_forward(logits_, lnf_, wte, nullptr, s);
  have_dlogits_ = false;
  if (ctx.targets == nullptr) return logits_.reshape({B, T, Vp});
  ZT_ASSERT(ctx.targets->numel() == N, "targets {} for {} positions", ctx.targets->numel(), N);
  Tensor losses = Tensor::empty({N}, acc, dev, s);
  Tensor targets = ctx.targets->reshape({N});
  if (ctx.mode == Mode::kTrain) {
    kernels::crossentropy_fused(losses, logits_, targets, vocab_, ctx.dloss, s);
    have_dlogits_ = true;
  } else {
    kernels::crossentropy_forward(losses, logits_, targets, vocab_, s);
  }
  return losses;
}

Tensor Gpt2Head::backward(Context& ctx, const Tensor& /*dout*/) {
  ZT_ASSERT(have_dlogits_, "head backward without a training forward with targets");
  const int64_t N = lnf_.size(0), C = lnf_.size(1);
  const Stream& s = ctx.stream;
  Param& wte = embedding_.wte();
  Tensor dlnf = Tensor::empty({N, C}, ctx.compute_dtype, ctx.device, s);
  kernels::matmul_backward(&dlnf, wte.grad, nullptr, logits_, lnf_, wte.value, s);
  Tensor dx = Tensor::empty(x_.shape(), ctx.compute_dtype, ctx.device, s);
  Tensor dx2 = dx.reshape({N, C});
  kernels::layernorm_backward(dx2, lnf_w_->grad, lnf_b_->grad, dlnf, x_.reshape({N, C}),
                              lnf_w_->value, lnf_mean_, lnf_rstd_, nullptr, s);
  x_ = lnf_ = lnf_mean_ = lnf_rstd_ = logits_ = Tensor();
  have_dlogits_ = false;
  return dx;
}

nlohmann::json Gpt2::config_json() const {
  // Hugging Face's GPT-2 config keys where they exist.
  return {{"model_type", "gpt2"},          {"n_layer", config_.n_layer},
          {"n_head", config_.n_head},          {"n_embd", config_.n_embd},
          {"vocab_size", config_.vocab_size},  {"padded_vocab_size", config_.padded_vocab_size},
          {"n_positions", config_.max_seq_len}};
}

}  // namespace zt::nn
