// Device dispatch for kernels/ops.h: every op runs where its first tensor lives.
#include "zt/kernels/ops.h"

#include "zt/build_config.h"
#include "zt/kernels/cpu/cpu_ops.h"
#if ZT_HAVE_CUDA
#include "zt/kernels/cuda/cuda_ops.h"
#endif

namespace zt::kernels {

#if ZT_HAVE_CUDA
#define ZT_DISPATCH(device, op, ...) \
  do {                               \
    if ((device).is_cuda()) {        \
      cuda::op(__VA_ARGS__);         \
    } else {                         \
      cpu::op(__VA_ARGS__);          \
    }                                \
  } while (0)
#else
#define ZT_DISPATCH(device, op, ...)                                                    \
  do {                                                                                  \
    ZT_ASSERT((device).is_cpu(), #op " on {} in a build without CUDA", (device).str()); \
    cpu::op(__VA_ARGS__);                                                               \
  } while (0)
#endif

void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       const Stream& s) {
  ZT_DISPATCH(out.device(), embedding_forward, out, tokens, wte, wpe, s);
}
void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        const Stream& s) {
  ZT_DISPATCH(dout.device(), embedding_backward, dwte, dwpe, dout, tokens, s);
}
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& in,
                       const Tensor& weight, const Tensor& bias, const Stream& s) {
  ZT_DISPATCH(in.device(), layernorm_forward, out, mean, rstd, in, weight, bias, s);
}
void layernorm_backward(Tensor& din, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& in, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor* dresidual, const Stream& s) {
  ZT_DISPATCH(in.device(), layernorm_backward, din, dweight, dbias, dout, in, weight, mean, rstd,
              dresidual, s);
}
void matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                    const Stream& s) {
  ZT_DISPATCH(in.device(), matmul_forward, out, in, weight, bias, s);
}
void matmul_backward(Tensor* din, Tensor& dweight, Tensor* dbias, const Tensor& dout,
                     const Tensor& in, const Tensor& weight, const Stream& s) {
  ZT_DISPATCH(in.device(), matmul_backward, din, dweight, dbias, dout, in, weight, s);
}
void gelu_forward(Tensor& out, const Tensor& in, const Stream& s) {
  ZT_DISPATCH(in.device(), gelu_forward, out, in, s);
}
void gelu_backward(Tensor& din, const Tensor& dout, const Tensor& in, const Stream& s) {
  ZT_DISPATCH(in.device(), gelu_backward, din, dout, in, s);
}
void residual_forward(Tensor& out, const Tensor& a, const Tensor& b, const Stream& s) {
  ZT_DISPATCH(a.device(), residual_forward, out, a, b, s);
}
void add_inplace(Tensor& out, const Tensor& in, const Stream& s) {
  ZT_DISPATCH(out.device(), add_inplace, out, in, s);
}
void attention_forward(Tensor& out, Tensor& qkvr, Tensor& att, const Tensor& qkv, int num_heads,
                       const Stream& s) {
  ZT_DISPATCH(qkv.device(), attention_forward, out, qkvr, att, qkv, num_heads, s);
}
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkvr, const Tensor& att,
                        int num_heads, const Stream& s) {
  ZT_DISPATCH(dout.device(), attention_backward, dqkv, dout, qkvr, att, num_heads, s);
}
bool flash_attention_supported(Device device, DType dtype, int64_t head_size) {
  if (device.is_cpu()) return dtype == DType::f32 || dtype == DType::f64;
  return ZT_HAVE_CUDA && (dtype == DType::bf16 || dtype == DType::f16) &&
         (head_size == 64 || head_size == 128);
}
void flash_attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads,
                             const Stream& s) {
  ZT_DISPATCH(qkv.device(), flash_attention_forward, out, lse, qkv, num_heads, s);
}
void flash_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int num_heads,
                              const Stream& s) {
  ZT_DISPATCH(qkv.device(), flash_attention_backward, dqkv, dout, qkv, out, lse, num_heads, s);
}
void crossentropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets,
                          int64_t vocab, const Stream& s) {
  ZT_DISPATCH(logits.device(), crossentropy_forward, losses, logits, targets, vocab, s);
}
void crossentropy_fused(Tensor& losses, Tensor& logits, const Tensor& targets, int64_t vocab,
                        float dloss, const Stream& s) {
  ZT_DISPATCH(logits.device(), crossentropy_fused, losses, logits, targets, vocab, dloss, s);
}
void cast(Tensor& dst, const Tensor& src, const Stream& s) {
  ZT_DISPATCH(src.device(), cast, dst, src, s);
}
void scale_inplace(Tensor& x, float scale, const Stream& s) {
  ZT_DISPATCH(x.device(), scale_inplace, x, scale, s);
}
void scale_check_nonfinite(Tensor& x, float scale, Tensor& found_nonfinite, const Stream& s) {
  ZT_DISPATCH(x.device(), scale_check_nonfinite, x, scale, found_nonfinite, s);
}
void sum_squares_accumulate(Tensor& acc, const Tensor& x, const Stream& s) {
  ZT_DISPATCH(x.device(), sum_squares_accumulate, acc, x, s);
}
void adam_step(const AdamArgs& args, std::span<const OptimChunk> chunks, Device device,
               const Stream& s) {
  ZT_DISPATCH(device, adam_step, args, chunks, s);
}
void sgd_step(const SgdArgs& args, std::span<const OptimChunk> chunks, Device device,
              const Stream& s) {
  ZT_DISPATCH(device, sgd_step, args, chunks, s);
}
void lamb_step(const LambArgs& args, std::span<const OptimChunk> chunks, Device device,
               const Stream& s) {
  ZT_DISPATCH(device, lamb_step, args, chunks, s);
}

}  // namespace zt::kernels
