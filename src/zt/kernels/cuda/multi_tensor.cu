// Host side of multi_tensor.cuh: the device of an optimizer call and the checked conversion of
// the caller's chunks into kernel-parameter form.
#include "zt/kernels/cuda/multi_tensor.cuh"

#include <cstdint>
#include <vector>

namespace zt::kernels::cuda {
namespace {

bool aligned_to(const void* p, uintptr_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

Device optim_device(std::span<const OptimChunk> chunks, const Stream& s) {
  if (s.device().is_cuda()) return s.device();
  for (const OptimChunk& c : chunks) {
    if (c.param == nullptr) continue;
    cudaPointerAttributes attr{};
    ZT_CUDA_CHECK(cudaPointerGetAttributes(&attr, c.param));
    ZT_ASSERT(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged,
              "optimizer step on CUDA: chunk parameters at {} are not device memory",
              static_cast<const void*>(c.param));
    return Device::cuda(attr.device);
  }
  int d = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&d));
  return Device::cuda(d);
}

MtChunk mt_chunk(const OptimChunk& c, int32_t index, unsigned required, const char* op) {
  ZT_ASSERT(c.n >= 0, "{}: chunk {} has n = {}", op, index, c.n);
  ZT_ASSERT(c.param != nullptr || c.n == 0, "{}: chunk {} has no param", op, index);
  ZT_ASSERT((required & kMtGrad) == 0 || c.grad != nullptr || c.n == 0, "{}: chunk {} has no grad",
            op, index);
  ZT_ASSERT((required & kMtState1) == 0 || c.state1 != nullptr || c.n == 0,
            "{}: chunk {} has no state1", op, index);
  ZT_ASSERT((required & kMtState2) == 0 || c.state2 != nullptr || c.n == 0,
            "{}: chunk {} has no state2", op, index);
  MtChunk m{};
  m.param = c.param;
  m.grad = c.grad;
  m.state1 = c.state1;
  m.state2 = c.state2;
  m.lowp = c.param_lowp;
  m.n = c.n;
  m.index = index;
  m.lowp_kind = LowpKind::kNone;
  if (c.param_lowp != nullptr) {
    ZT_ASSERT(c.lowp_dtype == DType::bf16 || c.lowp_dtype == DType::f16,
              "{}: chunk {} asks for a {} parameter copy; only bf16 and f16 are supported", op,
              index, dtype_name(c.lowp_dtype));
    m.lowp_kind = c.lowp_dtype == DType::bf16 ? LowpKind::kBf16 : LowpKind::kF16;
  }
  // Tiles start at multiples of 4 elements, so 16-byte aligned f32 bases (8-byte for the 16-bit
  // copy) keep every 4-element group aligned.
  const bool vec = aligned_to(c.param, 16) && aligned_to(c.grad, 16) && aligned_to(c.state1, 16) &&
                   aligned_to(c.state2, 16) && aligned_to(c.param_lowp, 8);
  m.vector = vec ? VectorLoads::kYes : VectorLoads::kNo;
  return m;
}

namespace {

struct ZeroOp {
  static constexpr unsigned kLoads = 0;
  static constexpr unsigned kStores = kMtParam;
  struct Partial {};
  __device__ void begin(const MtChunk&, Partial&) const {}
  __device__ void finish(const MtChunk&, Partial&) const {}
  __device__ void apply(MtPack& k, int j, Partial&) const { k.p[j] = 0.0f; }
};

}  // namespace

void zero_tensors(std::span<const Tensor> tensors, Device device, const Stream& s) {
  // Zero bits are zero in every dtype, so a tensor whose bytes are whole, 4-byte aligned floats
  // is cleared as f32; the rest (odd sizes) take a memset each.
  std::vector<MtChunk> mt;
  mt.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    ZT_ASSERT(t.device() == device, "zero_tensors: a tensor on {} in a call on {}",
              t.device().str(), device.str());
    if (t.nbytes() == 0) continue;
    if (t.nbytes() % 4 != 0 || !aligned_to(t.data(), 4)) {
      Tensor(t).zero(s);
      continue;
    }
    OptimChunk c;
    c.param = static_cast<float*>(const_cast<void*>(t.data()));
    c.n = static_cast<int64_t>(t.nbytes() / 4);
    mt.push_back(mt_chunk(c, static_cast<int32_t>(mt.size()), kMtParam, "zero_tensors"));
  }
  if (mt.empty()) return;
  DeviceGuard guard(device);
  multi_tensor_apply<ZeroOp>(mt, ZeroOp{}, stream_of(s));
}

}  // namespace zt::kernels::cuda
