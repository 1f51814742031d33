// Every op the models need, forward and backward, for all devices; the ops themselves are listed
// once, with their contracts, in kernels/op_table.inc. Each call
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

#include <array>
#include <cstdint>
#include <span>

#include "zt/core/tensor.h"
#include "zt/kernels/conv_ops.h"

namespace zt::kernels {

constexpr DType accum_dtype(DType compute) {
  return compute == DType::f64 ? DType::f64 : DType::f32;
}

// Attention over every earlier key and the query itself (decoders), or over every key (encoders).
enum class AttnKind : unsigned char { kCausal, kBidirectional };
// Whether an op writes its output or adds to it.
enum class Accumulate : unsigned char { kWrite, kAdd };

// ---- optimizer arguments (the optimizer ops are in kernels/op_table.inc).
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
  // When set, a float on the optimizer's device used instead of grad_scale (grad_clip_scale's
  // output: the engine's step then needs no host round trip before the optimizer).
  const float* grad_scale_at = nullptr;
  // CUDA only, when set: adam_step_scalars' three floats on the optimizer's device, read instead
  // of lr and step (a CUDA graph's replays take each step's values from device memory).
  const float* scalars_at = nullptr;
  AdamMode mode = AdamMode::kAdamW;
  BiasCorrection bias_correction = BiasCorrection::kOn;
};

// What the CUDA Adam step computes per step on the host: {lr, 1 - beta1^step, sqrt(1 -
// beta2^step)} (corrections 1 when off), the values AdamArgs::scalars_at points to.
std::array<float, 3> adam_step_scalars(const AdamArgs& a);

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

struct SgdArgs {
  float lr = 1e-3f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = true;  // torch: the momentum buffer starts as a copy of the first gradient
  float grad_scale = 1.0f;
  const float* grad_scale_at = nullptr;  // as AdamArgs'
};

struct LambArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;
  float grad_scale = 1.0f;
  const float* grad_scale_at = nullptr;  // as AdamArgs'
  float max_coeff = 10.0f;
  float min_coeff = 0.01f;
  BiasCorrection bias_correction = BiasCorrection::kOn;
};

// ---- activation functions of activation_forward/backward (kernels/op_table.inc).
// kGeluTanh: GPT-2's 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the gelu_* ops' function;
// kGeluErf: BERT's exact 0.5 x (1 + erf(x / sqrt(2))); kRelu: max(x, 0), derivative 0 at 0;
// kSilu: x sigmoid(x) (Llama's and Qwen2's MLP gate, through swiglu_*); kTanh: BERT's pooler.
// X(name) for every activation, once: the enum here and the backends' dispatch
// (kernels/activation_dispatch.h) are generated from it.
#define ZT_ACTIVATIONS(X) X(kGeluTanh) X(kGeluErf) X(kRelu) X(kSilu) X(kTanh)
enum class Activation : unsigned char {
#define ZT_ACTIVATION_ENUM(name) name,
  ZT_ACTIVATIONS(ZT_ACTIVATION_ENUM)
#undef ZT_ACTIVATION_ENUM
};

// The fused attention kernels' reach: the CUDA kernels take bf16/f16 with head size 64 or 128;
// the CPU reference (f32/f64) takes any shape.
bool flash_attention_supported(Device device, DType dtype, int64_t head_size);

// Which kernels run flash_attention_forward/backward on a GPU: kAuto (the default) cuDNN's fused
// attention where cuDNN is installed and takes the shape, else ZeroTrain's own; kCudnn requires
// cuDNN (an error when it cannot run); kOwn ZeroTrain's own kernels. The environment variable
// ZT_ATTENTION_BACKEND=auto|cudnn|own sets the starting value; tests and benchmarks switch it.
enum class AttentionBackend : unsigned char { kAuto, kCudnn, kOwn };
AttentionBackend attention_backend();
void set_attention_backend(AttentionBackend b);
// Whether cuDNN 9 can be loaded (false in a build without CUDA).
bool cudnn_available();
// Whether the attention backward must give the same bits on every run (default true;
// ZT_ATTENTION_DETERMINISTIC=0 sets it false). True: cuDNN's backward in its deterministic form,
// which keeps dP, 2 B heads T^2 bytes, in a workspace bounded by attention_workspace_limit()
// (ZT_ATTENTION_WORKSPACE_MB, default 2048): past it the backward runs over chunks of the batch
// (the same bits), and where one sequence is past it ZeroTrain's own kernels run it
// (deterministic, no workspace). False: cuDNN's atomic dQ accumulation, PyTorch's default.
bool attention_deterministic();
void set_attention_deterministic(bool on);
int64_t attention_workspace_limit();  // bytes
void set_attention_workspace_limit(int64_t bytes);
// Whether a CUDA GEMM problem met for the first time times the cuBLASLt heuristic's first few
// algorithms and keeps the fastest (kernels/cuda/gemm.cc; default false, ZT_GEMM_AUTOTUNE=1 sets
// it true). Faster where the heuristic's first pick is not the best, but a run is then no longer
// bitwise reproducible from process to process. Problems already planned keep their algorithm.
bool gemm_autotune();
void set_gemm_autotune(bool on);

// Unwraps a parenthesised list: ZT_OP_LIST((a, b)) -> a, b.
#define ZT_OP_LIST(...) __VA_ARGS__
#define ZT_OP(name, where, params, args) void name(ZT_OP_LIST params, const Stream& s = {});
#include "zt/kernels/op_table.inc"
#undef ZT_OP

}  // namespace zt::kernels
