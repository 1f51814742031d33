// CUDA max pooling (contracts in kernels/op_table.inc) and the convolution's bias (beside cuDNN's
// convolution, kernels/cuda/cudnn_conv.cc). The pooling follows the CPU reference
// (kernels/cpu/pool.cc) element for element: each output scans its window in row-major order and
// keeps the first maximum (a NaN counts as one), so the indices agree exactly. The backward
// clears din and adds each output gradient at its index with an atomic add in f32 (windows that
// overlap may pick one element twice); 16-bit din is accumulated in an f32 scratch first.
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 20));
}

template <typename T>
__global__ void maxpool_forward_kernel(T* out, int32_t* indices, const T* in, int64_t total,
                                       int64_t H, int64_t W, int64_t P, int64_t Q,
                                       Pool2dArgs a) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t q = i % Q;
    const int64_t p = (i / Q) % P;
    const int64_t plane = i / (P * Q);
    const T* src = in + plane * H * W;
    const int64_t h_first = p * a.stride_h - a.pad_h;
    const int64_t w_first = q * a.stride_w - a.pad_w;
    const int64_t h0 = h_first > 0 ? h_first : 0;
    const int64_t w0 = w_first > 0 ? w_first : 0;
    const int64_t h1 = h_first + a.kernel_h < H ? h_first + a.kernel_h : H;
    const int64_t w1 = w_first + a.kernel_w < W ? w_first + a.kernel_w : W;
    float best = -INFINITY;
    int64_t best_index = h0 * W + w0;
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t w = w0; w < w1; ++w) {
        const float v = to_f32(src[h * W + w]);
        if (v > best || isnan(v)) {
          best = v;
          best_index = h * W + w;
        }
      }
    }
    out[i] = from_f32<T>(best);
    indices[i] = static_cast<int32_t>(best_index);
  }
}

template <typename T>
__global__ void maxpool_backward_kernel(float* din32, const T* dout, const int32_t* indices,
                                        int64_t total, int64_t HW, int64_t PQ) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = i / PQ;
    atomicAdd(din32 + plane * HW + indices[i], to_f32(dout[i]));
  }
}

template <typename T>
__global__ void bias_add_kernel(T* out, const T* bias, int64_t total, int64_t K, int64_t PQ) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = (i / PQ) % K;
    out[i] = from_f32<T>(to_f32(out[i]) + to_f32(bias[k]));
  }
}

// One block per channel: the sum over the batch and the plane, in a fixed order (deterministic).
template <typename T>
__global__ void bias_grad_kernel(float* dbias, const T* dout, int64_t N, int64_t K, int64_t PQ) {
  const int64_t k = blockIdx.x;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < N * PQ; j += blockDim.x) {
    const int64_t n = j / PQ, pq = j % PQ;
    sum += to_f32(dout[(n * K + k) * PQ + pq]);
  }
  __shared__ float part[kThreads];
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) dbias[k] += part[0];
}

}  // namespace

void maxpool2d_forward(Tensor& out, Tensor& indices, const Tensor& in, const Pool2dArgs& args,
                       const Stream& s) {
  const char* op = "maxpool2d_forward";
  check_cuda(out, op, "out");
  check_cuda(indices, op, "indices");
  check_cuda(in, op, "in");
  Result<Shape> expected = maxpool2d_out_shape(in.shape(), args);
  ZT_ASSERT(expected.is_ok(), "{}: {}", op, expected.status().message());
  ZT_ASSERT(out.shape() == *expected && indices.shape() == *expected,
            "{}: out {} and indices {} must be {} for input {}", op, out.shape().str(),
            indices.shape().str(), expected->str(), in.shape().str());
  ZT_ASSERT(out.dtype() == in.dtype() && indices.dtype() == DType::i32,
            "{}: out {} must be in's dtype {}, indices {} i32", op, dtype_name(out.dtype()),
            dtype_name(in.dtype()), dtype_name(indices.dtype()));
  const int64_t total = out.numel();
  if (total == 0) return;
  dispatch_compute(in.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    maxpool_forward_kernel<T><<<blocks_for(total), kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<int32_t>(indices), ptr<const T>(in), total, in.size(2), in.size(3),
        out.size(2), out.size(3), args);
  });
  ZT_CUDA_CHECK(cudaGetLastError());
}

void maxpool2d_backward(Tensor& din, const Tensor& dout, const Tensor& indices, const Stream& s) {
  const char* op = "maxpool2d_backward";
  check_cuda(din, op, "din");
  check_cuda(dout, op, "dout");
  check_cuda(indices, op, "indices");
  ZT_ASSERT(din.ndim() == 4 && dout.ndim() == 4 && indices.shape() == dout.shape() &&
                din.size(0) == dout.size(0) && din.size(1) == dout.size(1),
            "{}: din {} must be (N,C,H,W) and dout {} and indices {} (N,C,P,Q)", op,
            din.shape().str(), dout.shape().str(), indices.shape().str());
  ZT_ASSERT(din.dtype() == dout.dtype() && indices.dtype() == DType::i32,
            "{}: din {} and dout {} must share a dtype, indices {} i32", op,
            dtype_name(din.dtype()), dtype_name(dout.dtype()), dtype_name(indices.dtype()));
  const bool f32 = din.dtype() == DType::f32;
  Tensor din32 = f32 ? din : Tensor::empty(din.shape(), DType::f32, din.device(), s);
  ZT_CUDA_CHECK(cudaMemsetAsync(din32.data(), 0, din32.nbytes(), stream_of(s)));
  const int64_t total = dout.numel();
  if (total > 0) {
    dispatch_compute(dout.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      maxpool_backward_kernel<T><<<blocks_for(total), kThreads, 0, stream_of(s)>>>(
          ptr<float>(din32), ptr<const T>(dout), ptr<int32_t>(indices), total,
          din.size(2) * din.size(3), dout.size(2) * dout.size(3));
    });
    ZT_CUDA_CHECK(cudaGetLastError());
  }
  if (!f32) cast(din, din32, s);
}

void conv_bias_add(Tensor& out, const Tensor& bias, const Stream& s) {
  const char* op = "conv2d_forward (bias)";
  ZT_ASSERT(bias.ndim() == 1 && out.ndim() == 4 && bias.size(0) == out.size(1) &&
                bias.dtype() == out.dtype(),
            "{}: bias {} must be (K) of out {}, in its dtype", op, bias.shape().str(),
            out.shape().str());
  check_cuda(bias, op, "bias");
  const int64_t total = out.numel();
  if (total == 0) return;
  dispatch_compute(out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_add_kernel<T><<<blocks_for(total), kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<const T>(bias), total, out.size(1), out.size(2) * out.size(3));
  });
  ZT_CUDA_CHECK(cudaGetLastError());
}

void conv_bias_grad(Tensor& dbias, const Tensor& dout, const Stream& s) {
  const char* op = "conv2d_backward (bias)";
  check_cuda(dbias, op, "dbias");
  ZT_ASSERT(dbias.dtype() == DType::f32 && dout.ndim() == 4 && dbias.numel() == dout.size(1),
            "{}: dbias {} {} must be (K) f32 for dout {}", op, dbias.shape().str(),
            dtype_name(dbias.dtype()), dout.shape().str());
  if (dout.size(1) == 0) return;
  dispatch_compute(dout.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_grad_kernel<T><<<static_cast<int>(dout.size(1)), kThreads, 0, stream_of(s)>>>(
        ptr<float>(dbias), ptr<const T>(dout), dout.size(0), dout.size(1),
        dout.size(2) * dout.size(3));
  });
  ZT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace zt::kernels::cuda
