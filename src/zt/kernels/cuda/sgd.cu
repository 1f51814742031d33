// CUDA SGD step, torch.optim.SGD semantics (contract in kernels/ops.h): weight decay, momentum
// with dampening, Nesterov, the first step copying the gradient into the momentum buffer; one
// multi-tensor pass that also writes the optional 16-bit parameter copy.
#include "zt/kernels/cuda/multi_tensor.cuh"

#include <vector>

#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

enum class Momentum : unsigned char { kOff, kOn };
enum class Nesterov : unsigned char { kOff, kOn };
enum class FirstStep : unsigned char { kNo, kYes };

struct SgdOp {
  static constexpr unsigned kLoads = kMtParam | kMtGrad | kMtState1;
  static constexpr unsigned kStores = kMtParam | kMtState1;
  struct Partial {
    float grad_scale;
  };

  float lr, momentum, dampening, weight_decay, grad_scale;
  const float* grad_scale_at;  // when set, read instead of grad_scale
  Momentum use_momentum;
  Nesterov nesterov;
  FirstStep first;

  __device__ void apply(MtPack& k, int j, Partial& part) const {
    const float p = k.p[j];
    float g = k.g[j] * part.grad_scale;
    if (weight_decay != 0.0f) g += weight_decay * p;
    float d = g;
    if (use_momentum == Momentum::kOn) {
      const float buf = first == FirstStep::kYes ? g : momentum * k.s1[j] + (1.0f - dampening) * g;
      k.s1[j] = buf;
      d = nesterov == Nesterov::kOn ? g + momentum * buf : buf;
    }
    k.p[j] = p - lr * d;
  }
  __device__ void begin(const MtChunk&, Partial& part) const {
    part.grad_scale = grad_scale_at != nullptr ? *grad_scale_at : grad_scale;
  }
  __device__ void finish(const MtChunk&, Partial&) const {}
};

}  // namespace

void sgd_step(const SgdArgs& args, std::span<const OptimChunk> chunks, Device /*device*/,
              const Stream& s) {
  const bool with_momentum = args.momentum != 0.0f;
  std::vector<MtChunk> mt;
  mt.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    MtChunk c = mt_chunk(chunks[i], static_cast<int32_t>(i),
                         kMtParam | kMtGrad | (with_momentum ? kMtState1 : 0u), "sgd_step");
    if (!with_momentum) c.state1 = nullptr;  // no buffer to read or write
    mt.push_back(c);
  }
  if (mt.empty()) return;
  DeviceGuard guard(optim_device(chunks, s));
  SgdOp op{};
  op.lr = args.lr;
  op.momentum = args.momentum;
  op.dampening = args.dampening;
  op.weight_decay = args.weight_decay;
  op.grad_scale = args.grad_scale;
  op.grad_scale_at = args.grad_scale_at;
  op.use_momentum = with_momentum ? Momentum::kOn : Momentum::kOff;
  op.nesterov = args.nesterov ? Nesterov::kOn : Nesterov::kOff;
  op.first = args.first_step ? FirstStep::kYes : FirstStep::kNo;
  multi_tensor_apply<SgdOp>(mt, op, stream_of(s));
}

}  // namespace zt::kernels::cuda
