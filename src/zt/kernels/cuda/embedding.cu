// CUDA token + position embedding forward/backward (contract in kernels/ops.h). Forward writes
// out = wte[token] + wpe[t] (sum in f32, one rounding); backward accumulates into the f32
// gradients with atomics, since several positions can share a token (dwte) and every batch row
// shares a position (dwpe). A token id outside [0, V) traps the kernel (the next CUDA call then
// fails) instead of reading or writing out of bounds.
#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int64_t bt_count, int64_t T_len, int64_t C, int64_t V) {
  const int64_t n = bt_count * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C;
    const int64_t c = i - bt * C;
    const int64_t t = bt % T_len;
    const int32_t tok = tokens[bt];
    if (tok < 0 || tok >= V) __trap();
    out[i] = from_f32<T>(to_f32(wte[tok * C + c]) + to_f32(wpe[t * C + c]));
  }
}

template <typename T>
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const T* dout,
                                          const int32_t* tokens, int64_t bt_count, int64_t T_len,
                                          int64_t C, int64_t V) {
  const int64_t n = bt_count * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / C;
    const int64_t c = i - bt * C;
    const int64_t t = bt % T_len;
    const int32_t tok = tokens[bt];
    if (tok < 0 || tok >= V) __trap();
    const float g = to_f32(dout[i]);
    atomicAdd(dwte + tok * C + c, g);
    atomicAdd(dwpe + t * C + c, g);
  }
}

struct EmbShape {
  int64_t bt;  // B * T
  int64_t T;
  int64_t C;
  int64_t V;
};

EmbShape embedding_shape(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         const char* op) {
  check_dtype(tokens, DType::i32, op, "tokens");
  ZT_ASSERT(tokens.ndim() == 2, "{}: tokens must be (B, T), got {}", op, tokens.shape().str());
  ZT_ASSERT(wte.ndim() == 2 && wpe.ndim() == 2 && wte.size(1) == wpe.size(1),
            "{}: wte {} and wpe {} must be (V, C) and (maxT, C)", op, wte.shape().str(),
            wpe.shape().str());
  const int64_t T = tokens.size(1);
  ZT_ASSERT(wpe.size(0) >= T, "{}: wpe has {} positions, tokens have T = {}", op, wpe.size(0), T);
  check_same_device(tokens, wte, op);
  check_same_device(tokens, wpe, op);
  return {tokens.numel(), T, wte.size(1), wte.size(0)};
}

}  // namespace

void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       const Stream& s) {
  const char* op = "embedding_forward";
  const EmbShape sh = embedding_shape(tokens, wte, wpe, op);
  check_cuda(wte, op, "wte");
  check_dtype(wpe, wte.dtype(), op, "wpe");
  check_dtype(out, wte.dtype(), op, "out");
  check_numel(out, sh.bt * sh.C, op, "out");
  const int64_t n = sh.bt * sh.C;
  if (n == 0) return;
  DeviceGuard guard(out.device());
  dispatch_compute(wte.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<const int32_t>(tokens), ptr<const T>(wte), ptr<const T>(wpe), sh.bt, sh.T,
        sh.C, sh.V);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        const Stream& s) {
  const char* op = "embedding_backward";
  const EmbShape sh = embedding_shape(tokens, dwte, dwpe, op);
  check_dtype(dwte, DType::f32, op, "dwte");
  check_dtype(dwpe, DType::f32, op, "dwpe");
  check_cuda(dout, op, "dout");
  check_numel(dout, sh.bt * sh.C, op, "dout");
  const int64_t n = sh.bt * sh.C;
  if (n == 0) return;
  DeviceGuard guard(dout.device());
  dispatch_compute(dout.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<float>(dwte), ptr<float>(dwpe), ptr<const T>(dout), ptr<const int32_t>(tokens), sh.bt,
        sh.T, sh.C, sh.V);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

namespace {

template <typename T>
__global__ void lookup_forward_kernel(T* out, const int32_t* ids, const T* table, int64_t n,
                                      int64_t C, int64_t rows, int accumulate) {
  const int64_t total = n * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i / C;
    const int64_t c = i - k * C;
    const int32_t id = ids[k];
    if (id < 0 || id >= rows) __trap();
    const float v = to_f32(table[id * C + c]);
    out[i] = from_f32<T>(accumulate ? to_f32(out[i]) + v : v);
  }
}

template <typename T>
__global__ void lookup_backward_kernel(float* dtable, const T* dout, const int32_t* ids, int64_t n,
                                       int64_t C, int64_t rows) {
  const int64_t total = n * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i / C;
    const int64_t c = i - k * C;
    const int32_t id = ids[k];
    if (id < 0 || id >= rows) __trap();
    atomicAdd(dtable + id * C + c, to_f32(dout[i]));
  }
}

void lookup_check(const Tensor& ids, const Tensor& table, const Tensor& act, const char* op) {
  check_dtype(ids, DType::i32, op, "ids");
  check_cuda(act, op, "activations");
  ZT_ASSERT(table.ndim() == 2, "{}: table {} must be (rows, C)", op, table.shape().str());
  check_numel(act, ids.numel() * table.size(1), op, "activations");
  check_same_device(ids, table, op);
  check_same_device(ids, act, op);
}

}  // namespace

void embedding_lookup_forward(Tensor& out, const Tensor& ids, const Tensor& table, Accumulate mode,
                              const Stream& s) {
  const char* op = "embedding_lookup_forward";
  lookup_check(ids, table, out, op);
  check_dtype(out, table.dtype(), op, "out");
  const int64_t n = ids.numel() * table.size(1);
  if (n == 0) return;
  DeviceGuard guard(out.device());
  dispatch_compute(table.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    lookup_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<const int32_t>(ids), ptr<const T>(table), ids.numel(), table.size(1),
        table.size(0), mode == Accumulate::kAdd ? 1 : 0);
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void embedding_lookup_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids,
                               const Stream& s) {
  const char* op = "embedding_lookup_backward";
  lookup_check(ids, dtable, dout, op);
  check_dtype(dtable, DType::f32, op, "dtable");
  const int64_t n = ids.numel() * dtable.size(1);
  if (n == 0) return;
  DeviceGuard guard(dout.device());
  dispatch_compute(dout.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    lookup_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<float>(dtable), ptr<const T>(dout), ptr<const int32_t>(ids), ids.numel(),
        dtable.size(1), dtable.size(0));
    ZT_CUDA_CHECK_LAUNCH();
  });
}

namespace {

// Vocabulary-parallel lookups: ids outside [row0, row0 + rows) read (and receive) nothing.
template <typename T>
__global__ void range_forward_kernel(T* out, const int32_t* ids, const T* table, int64_t n,
                                     int64_t C, int64_t row0, int64_t rows) {
  const int64_t total = n * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i / C;
    const int64_t r = static_cast<int64_t>(ids[k]) - row0;
    out[i] = r >= 0 && r < rows ? table[r * C + (i - k * C)] : from_f32<T>(0.0f);
  }
}

template <typename T>
__global__ void range_backward_kernel(float* dtable, const T* dout, const int32_t* ids, int64_t n,
                                      int64_t C, int64_t row0, int64_t rows) {
  const int64_t total = n * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i / C;
    const int64_t r = static_cast<int64_t>(ids[k]) - row0;
    if (r >= 0 && r < rows) atomicAdd(dtable + r * C + (i - k * C), to_f32(dout[i]));
  }
}

}  // namespace

void embedding_range_forward(Tensor& out, const Tensor& ids, const Tensor& table, int64_t row0,
                             const Stream& s) {
  const char* op = "embedding_range_forward";
  lookup_check(ids, table, out, op);
  check_dtype(out, table.dtype(), op, "out");
  const int64_t n = ids.numel() * table.size(1);
  if (n == 0) return;
  DeviceGuard guard(out.device());
  dispatch_compute(table.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    range_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<T>(out), ptr<const int32_t>(ids), ptr<const T>(table), ids.numel(), table.size(1),
        row0, table.size(0));
    ZT_CUDA_CHECK_LAUNCH();
  });
}

void embedding_range_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids, int64_t row0,
                              const Stream& s) {
  const char* op = "embedding_range_backward";
  lookup_check(ids, dtable, dout, op);
  check_dtype(dtable, DType::f32, op, "dtable");
  const int64_t n = ids.numel() * dtable.size(1);
  if (n == 0) return;
  DeviceGuard guard(dout.device());
  dispatch_compute(dout.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    range_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(s)>>>(
        ptr<float>(dtable), ptr<const T>(dout), ptr<const int32_t>(ids), ids.numel(),
        dtable.size(1), row0, dtable.size(0));
    ZT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace zt::kernels::cuda
