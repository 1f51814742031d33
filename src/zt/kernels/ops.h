// Every op GPT-2 training needs, forward and backward, declared once for all devices. Each call
// runs on the device its tensors live on (all tensors of one call share a device), on `stream`
// (ignored on the CPU). The CPU versions (kernels/cpu/) are the specification; the CUDA versions
// (kernels/cuda/) are tested against them.
//
// Dtype rules (checked by every op):
// - Activations and the parameters' compute copy share one dtype, the compute dtype:
//   CPU f32 or f64 (f64 is for finite-difference checks); CUDA f32, bf16 or f16.
// - Accumulators (parameter gradients, layernorm statistics, losses) are accum_dtype(compute):
//   f64 when the compute dtype is f64, else f32.
// - Token ids and targets are i32.
// Write/accumulate contract: activation outputs and activation gradients are written (=);
// parameter gradients accumulate (+=), so gradient accumulation needs no extra buffer.
#pragma once

#include <cstdint>
#include <span>

#include "zt/core/tensor.h"

namespace zt::kernels {

constexpr DType accum_dtype(DType compute) {
  return compute == DType::f64 ? DType::f64 : DType::f32;
}

// ---- embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
// tokens (B,T) i32; wte (V,C); wpe (maxT,C) with maxT >= T; out (B,T,C).
void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       const Stream& s = {});
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:].
void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        const Stream& s = {});

// ---- layernorm over the last dimension C, eps = 1e-5.
// in, out (N,C) (any leading shape with numel N*C); weight, bias (C); mean, rstd (N) accum dtype.
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& in,
                       const Tensor& weight, const Tensor& bias, const Stream& s = {});
// din = dLN/din(dout) (+ *dresidual when given, fused); dweight += ; dbias += .
void layernorm_backward(Tensor& din, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& in, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor* dresidual, const Stream& s = {});

// ---- matmul: out (N,M) = in (N,K) @ weight (M,K)^T (+ bias (M) when given).
// CUDA: cuBLASLt with fp32 accumulation.
void matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                    const Stream& s = {});
// din (N,K) = dout @ weight (skipped when din is null); dweight (M,K) += dout^T @ in;
// dbias (M) += column sums of dout (when given). dweight/dbias are accum dtype.
void matmul_backward(Tensor* din, Tensor& dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& in, const Tensor& weight, const Stream& s = {});

// ---- GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(Tensor& out, const Tensor& in, const Stream& s = {});
void gelu_backward(Tensor& din, const Tensor& dout, const Tensor& in, const Stream& s = {});

// ---- residual: out = a + b; add: out += in (same dtype).
void residual_forward(Tensor& out, const Tensor& a, const Tensor& b, const Stream& s = {});
void add_inplace(Tensor& out, const Tensor& in, const Stream& s = {});

// ---- causal multi-head self-attention.
// qkv (B,T,3C) laid out [q | k | v], each C = num_heads x head_size. out (B,T,C).
// Saved for backward: qkvr (3,B,NH,T,HS) the permuted q,k,v; att (B,NH,T,T) the softmax
// probabilities (scale 1/sqrt(HS), causal: att[..,t,u] = 0 for u > t). Both compute dtype.
void attention_forward(Tensor& out, Tensor& qkvr, Tensor& att, const Tensor& qkv, int num_heads,
                       const Stream& s = {});
// dqkv (B,T,3C) written.
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkvr, const Tensor& att,
                        int num_heads, const Stream& s = {});

// ---- fused ("flash") causal attention: the same function as attention_forward, but the (T, T)
// probabilities are never stored. qkv (B,T,3C) and out (B,T,C) as above. Saved for backward: qkv,
// out and lse (B,NH,T) f32, lse[b,h,t] = log sum_{u<=t} exp(q_t . k_u / sqrt(HS)).
// The CUDA kernels take what flash_attention_supported() accepts (bf16/f16, head size 64 or 128);
// the CPU reference (f32/f64) takes any shape and is their specification.
bool flash_attention_supported(Device device, DType dtype, int64_t head_size);
void flash_attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads,
                             const Stream& s = {});
// dqkv (B,T,3C) written.
void flash_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int num_heads,
                              const Stream& s = {});

// ---- softmax cross-entropy over the vocabulary.
// logits (N,Vp) compute dtype, of which the first `vocab` columns are real (the rest padding,
// ignored); targets (N) i32 in [0, vocab); losses (N) accum dtype:
// losses[i] = logsumexp(logits[i, :vocab]) - logits[i, targets[i]].
void crossentropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets,
                          int64_t vocab, const Stream& s = {});
// Fused forward + backward: writes losses as above and overwrites `logits` with
// dlogits = dloss * (softmax(logits[i, :vocab]) - onehot(targets[i])), 0 in padding columns.
// No probability tensor is materialised.
void crossentropy_fused(Tensor& losses, Tensor& logits, const Tensor& targets, int64_t vocab,
                        float dloss, const Stream& s = {});

// ---- elementwise helpers on float tensors.
// dst = src converted (f32, f64, bf16, f16; same numel, same device).
void cast(Tensor& dst, const Tensor& src, const Stream& s = {});
// x *= scale.
void scale_inplace(Tensor& x, float scale, const Stream& s = {});
// x *= scale, then found_nonfinite[0] = 1 if any element of x is inf or nan (never cleared here).
// found_nonfinite: (1) f32 on x's device.
void scale_check_nonfinite(Tensor& x, float scale, Tensor& found_nonfinite, const Stream& s = {});
// acc[0] += sum(x^2), x float of any dtype, acc (1) f64 on x's device. Used for the global
// gradient norm: one accumulator for all units, one device-to-host copy per step.
void sum_squares_accumulate(Tensor& acc, const Tensor& x, const Stream& s = {});

// ---- optimizers, multi-tensor over flat fp32 buffers (unit-flat master weights).
enum class AdamMode : unsigned char { kL2 = 0, kAdamW = 1 };  // DeepSpeed adam_w_mode
enum class BiasCorrection : unsigned char { kOff = 0, kOn = 1 };

struct AdamArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based count of applied steps (for bias correction)
  float grad_scale = 1.0f;  // gradients are multiplied by this first (1 / (loss scale * clip))
  AdamMode mode = AdamMode::kAdamW;
  BiasCorrection bias_correction = BiasCorrection::kOn;
};

// One flat range the optimizer updates. `param_lowp`, when not null, receives the updated
// parameters converted to `lowp_dtype` (the 16-bit compute copy), fused into the same pass.
struct OptimChunk {
  float* param = nullptr;
  const float* grad = nullptr;
  float* state1 = nullptr;  // Adam exp_avg / SGD momentum buffer / Lamb exp_avg
  float* state2 = nullptr;  // Adam exp_avg_sq / Lamb exp_avg_sq
  void* param_lowp = nullptr;
  DType lowp_dtype = DType::bf16;
  int64_t n = 0;
};

// DeepSpeed's Adam (csrc/adam): [L2: g += wd p]; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// u = (m / bc1) / (sqrt(v) / sqrt(bc2) + eps); [AdamW: u += wd p]; p -= lr u.
void adam_step(const AdamArgs& args, std::span<const OptimChunk> chunks, Device device,
               const Stream& s = {});

struct SgdArgs {
  float lr = 1e-3f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = true;  // torch: the momentum buffer starts as a copy of the first gradient
  float grad_scale = 1.0f;
};
// torch.optim.SGD: g += wd p; buf = momentum ? (first ? g : mu buf + (1-damp) g) : -;
// d = nesterov ? g + mu buf : buf (or g without momentum); p -= lr d. state1 = buf.
void sgd_step(const SgdArgs& args, std::span<const OptimChunk> chunks, Device device,
              const Stream& s = {});

struct LambArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;
  float grad_scale = 1.0f;
  float max_coeff = 10.0f;
  float min_coeff = 0.01f;
  BiasCorrection bias_correction = BiasCorrection::kOn;
};
// DeepSpeed FusedLamb, one chunk per parameter tensor: m, v as Adam; u = m_hat/(sqrt(v_hat)+eps)
// + wd p; trust = clamp(||p|| / ||u||, min_coeff, max_coeff) (1 if either norm is 0);
// p -= lr trust u.
void lamb_step(const LambArgs& args, std::span<const OptimChunk> chunks, Device device,
               const Stream& s = {});

}  // namespace zt::kernels
