// CUDA column-block ops (contracts in kernels/op_table.inc): cols_add adds a narrow matrix into a
// block of columns of a wide one (a LoRA delta into its part of a fused projection's output),
// cols_copy reads such a block out (that delta's gradient). One grid-stride loop over the block's
// elements, consecutive threads on consecutive columns. cols_add computes in f32 with explicit
// round-to-nearest multiply and add (no fused multiply-add), so it rounds exactly as the CPU
// reference does.
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

#include "zt/kernels/column_block.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void cols_add_kernel(T* out, const T* in, float alpha, int64_t rows, int64_t width,
                                int64_t block_width, int64_t col0) {
  const int64_t n = rows * block_width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / block_width;
    T* o = out + r * width + col0 + (i - r * block_width);
    *o = from_f32<T>(__fadd_rn(to_f32(*o), __fmul_rn(alpha, to_f32(in[i]))));
  }
}

template <typename T>
__global__ void cols_copy_kernel(T* out, const T* in, int64_t rows, int64_t width,
                                 int64_t block_width, int64_t col0) {
  const int64_t n = rows * block_width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / block_width;
    out[i] = in[r * width + col0 + (i - r * block_width)];
  }
}

void check_pair(const Tensor& out, const Tensor& in, const char* op) {
  check_cuda(out, op, "out");
  check_dtype(in, out.dtype(), op, "in");
  check_same_device(out, in, op);
}

}  // namespace

void cols_add(Tensor& out, const Tensor& in, int64_t col0, float alpha, const Stream& s) {
  const char* op = "cols_add";
  const ColumnBlock b = column_block(out, in, col0, op);
  check_pair(out, in, op);
  const int64_t n = b.rows * b.block_width;
  if (n == 0) return;
  DeviceGuard guard(out.device());
  dispatch_compute(out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cols_add_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<const T>(in), alpha, b.rows, b.width, b.block_width, b.col0);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void cols_copy(Tensor& out, const Tensor& in, int64_t col0, const Stream& s) {
  const char* op = "cols_copy";
  const ColumnBlock b = column_block(in, out, col0, op);
  check_pair(out, in, op);
  const int64_t n = b.rows * b.block_width;
  if (n == 0) return;
  DeviceGuard guard(in.device());
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cols_copy_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<const T>(in), b.rows, b.width, b.block_width, b.col0);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
