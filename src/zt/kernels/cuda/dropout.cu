// CUDA dropout_apply (contract in kernels/op_table.inc): a grid-stride loop drawing each element's
// mask from kernels/dropout_hash.h, the function the CPU reference uses, so the GPU drops exactly
// the elements the CPU does and, in the same dtype, writes the same values (one f32 multiply by
// the host-computed 1 / (1 - p), one rounding). out may be in: each thread reads an element
// before it writes it.
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

#include "zt/kernels/dropout_hash.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void dropout_kernel(T* out, const T* in, float p, float scale, uint64_t seed,
                               int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool keep = dropout_uniform(seed, static_cast<uint64_t>(i)) >= p;
    out[i] = from_f32<T>(keep ? to_f32(in[i]) * scale : 0.0f);
  }
}

}  // namespace

void dropout_apply(Tensor& out, const Tensor& in, float p, uint64_t seed, const Stream& s) {
  const char* op = "dropout_apply";
  const float scale = static_cast<float>(dropout_scale(p));
  check_cuda(out, op, "out");
  check_dtype(in, out.dtype(), op, "in");
  check_numel(in, out.numel(), op, "in");
  check_same_device(out, in, op);
  const int64_t n = in.numel();
  if (n == 0) return;
  DeviceGuard guard(in.device());
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<const T>(in), p, scale, seed, n);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
