// CUDA argmax_rows (contract in kernels/op_table.inc): one block per row; each thread keeps its
// best (value, index) over a strided slice, then the block reduces by warp shuffles and shared
// memory, preferring the larger value and, on a tie, the lower index, so the result is the CPU
// reference's whatever the thread count.
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 512;

struct Best {
  float v;
  int32_t j;  // -1: nothing seen (only NaN)
};

__device__ __forceinline__ Best better(Best a, Best b) {
  if (a.j < 0) return b;
  if (b.j < 0) return a;
  if (b.v > a.v || (b.v == a.v && b.j < a.j)) return b;
  return a;
}

template <typename T>
__global__ void argmax_rows_kernel(int32_t* out, const T* logits, int64_t vp, int64_t vocab) {
  __shared__ float sv[kWarpSize];
  __shared__ int32_t sj[kWarpSize];
  const T* row = logits + blockIdx.x * vp;
  Best b{0.0f, -1};
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float x = to_f32(row[j]);
    if (x != x) continue;  // NaN
    if (b.j < 0 || x > b.v) b = {x, static_cast<int32_t>(j)};  // j rises: ties keep the first
  }
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) {
    const Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.j, o)};
    b = better(b, other);
  }
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    sv[warp] = b.v;
    sj[warp] = b.j;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / kWarpSize;
    b = lane < warps ? Best{sv[lane], sj[lane]} : Best{0.0f, -1};
#pragma unroll
    for (int o = kWarpSize / 2; o > 0; o >>= 1) {
      const Best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.j, o)};
      b = better(b, other);
    }
    if (lane == 0) out[blockIdx.x] = b.j < 0 ? 0 : b.j;
  }
}

}  // namespace

void argmax_rows(Tensor& out, const Tensor& logits, int64_t vocab, const Stream& s) {
  const char* op = "argmax_rows";
  check_cuda(logits, op, "logits");
  ZT_ASSERT(logits.ndim() >= 1 && vocab >= 1 && vocab <= logits.size(-1),
            "{}: vocab {} must be in [1, {}] (logits {})", op, vocab,
            logits.ndim() >= 1 ? logits.size(-1) : 0, logits.shape().str());
  const int64_t vp = logits.size(-1), rows = logits.numel() / vp;
  ZT_ASSERT(rows < (int64_t{1} << 31), "{}: {} rows exceed one grid", op, rows);
  check_dtype(out, DType::i32, op, "out");
  check_numel(out, rows, op, "out");
  check_same_device(logits, out, op);
  if (rows == 0) return;
  DeviceGuard guard(logits.device());
  dispatch_compute(logits.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    argmax_rows_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream_of(s)>>>(
        ptr<int32_t>(out), ptr<const T>(logits), vp, vocab);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
