// CUDA multi-head attention forward/backward, causal or bidirectional with a key padding mask
// (contract in kernels/ops.h), as llm.c: a permute kernel from (B,T,3C) to per-head q,k,v
// (3,B,NH,T,HS), batched cuBLASLt GEMMs over the B*NH heads for q k^T and att v, and a fused causal
// softmax (scale 1/sqrt(HS)). The scores and their gradient are kept in f32 scratch (for f32 the
// `att` buffer itself, in place) so that 16-bit compute rounds them once, at the probabilities.
// Scratch comes from the caching allocator on the op's stream. Backward: dv = att^T dy, datt = dy
// v^T, softmax backward (causal), dq = dpre k scale, dk = dpre^T q scale, permuted back into dqkv.
#include <cmath>

#include "zt/kernels/cuda/cuda_common.cuh"
#include "zt/kernels/cuda/cuda_ops.h"
#include "zt/kernels/cuda/gemm.cuh"

namespace zt::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / kWarpSize;  // one warp per attention row

// Between the token layout (B, T, parts*C), C = NH*HS, and the head layout (parts, B, NH, T, HS).
enum class PermuteDir : unsigned char { kToHeads, kFromHeads };

template <typename T, PermuteDir kDir>
__global__ void permute_heads_kernel(T* dst, const T* src, int64_t parts, int64_t B, int64_t T_len,
                                     int64_t NH, int64_t HS) {
  const int64_t n = parts * B * NH * T_len * HS;
  const int64_t C = NH * HS;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i;
    const int64_t d = r % HS;
    r /= HS;
    const int64_t t = r % T_len;
    r /= T_len;
    const int64_t h = r % NH;
    r /= NH;
    const int64_t b = r % B;
    const int64_t w = r / B;
    const int64_t tok = ((b * T_len + t) * parts + w) * C + h * HS + d;
    if constexpr (kDir == PermuteDir::kToHeads) {
      dst[i] = src[tok];
    } else {
      dst[tok] = src[i];
    }
  }
}

// att[row, u] = softmax_u(scores[row, u]) for u <= t (row = (b, h, t)), 0 for u > t. The scores
// already carry the 1/sqrt(HS) scale (GEMM alpha). att may alias scores (f32): each lane reads an
// element before writing it.
// Bidirectional attention (causal == 0) takes every key; key_mask (B, T), when not null, drops
// the keys it marks 0 (padding); a row left with no key attends to nothing (all zeros).
template <typename T>
__global__ void causal_softmax_kernel(T* att, const float* scores, int64_t rows, int64_t T_len,
                                      int64_t NH, int causal, const int32_t* key_mask) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int64_t t = row % T_len;
  const int64_t end = causal ? t + 1 : T_len;
  const int32_t* mask = key_mask == nullptr ? nullptr : key_mask + row / (NH * T_len) * T_len;
  const float* s = scores + row * T_len;
  T* a = att + row * T_len;
  auto keep = [&](int64_t u) { return u < end && (mask == nullptr || mask[u] != 0); };
  float m = -INFINITY;
  for (int64_t u = lane; u < end; u += kWarpSize) {
    if (keep(u)) m = fmaxf(m, s[u]);
  }
  m = warp_max(m);
  float sum = 0.0f;
  for (int64_t u = lane; u < end; u += kWarpSize) {
    if (keep(u)) sum += expf(s[u] - m);
  }
  sum = warp_sum(sum);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t u = lane; u < T_len; u += kWarpSize) {
    a[u] = from_f32<T>(keep(u) ? expf(s[u] - m) * inv : 0.0f);
  }
}

// dpre[row, u] = att[u] (datt[u] - sum_{u' <= t} att[u'] datt[u']) for u <= t, 0 above the
// diagonal (without the scale, applied by the dq/dk GEMMs). dpre may alias datt (f32).
template <typename T>
__global__ void causal_softmax_backward_kernel(T* dpre, const float* datt, const T* att,
                                               int64_t rows, int64_t T_len, int causal) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  // Masked keys have att = 0, so they drop out of the sums below by themselves; only the causal
  // bound saves work.
  const int64_t t = causal ? row % T_len : T_len - 1;
  const float* g = datt + row * T_len;
  const T* a = att + row * T_len;
  T* d = dpre + row * T_len;
  float dot = 0.0f;
  for (int64_t u = lane; u <= t; u += kWarpSize) dot += to_f32(a[u]) * g[u];
  dot = warp_sum(dot);
  for (int64_t u = lane; u < T_len; u += kWarpSize) {
    d[u] = from_f32<T>(u <= t ? to_f32(a[u]) * (g[u] - dot) : 0.0f);
  }
}

struct AttnShape {
  int64_t B, T, C, NH, HS;
};

AttnShape attention_shape(const Tensor& qkv_like, int num_heads, const char* op) {
  check_cuda(qkv_like, op, "qkv");
  ZT_ASSERT(qkv_like.ndim() == 3 && qkv_like.size(2) % 3 == 0, "{}: qkv must be (B, T, 3C), got {}",
            op, qkv_like.shape().str());
  AttnShape a{};
  a.B = qkv_like.size(0);
  a.T = qkv_like.size(1);
  a.C = qkv_like.size(2) / 3;
  a.NH = num_heads;
  ZT_ASSERT(num_heads > 0 && a.C % num_heads == 0, "{}: C = {} is not divisible by {} heads", op,
            a.C, num_heads);
  a.HS = a.C / num_heads;
  return a;
}

template <typename T, PermuteDir kDir>
void permute_heads(void* dst, const void* src, int64_t parts, const AttnShape& a,
                   cudaStream_t stream) {
  const int64_t n = parts * a.B * a.T * a.C;
  permute_heads_kernel<T, kDir><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
      static_cast<T*>(dst), static_cast<const T*>(src), parts, a.B, a.T, a.NH, a.HS);
  ZT_CUDA_CHECK_LAUNCH();
}

// The batched GEMM over the B*NH heads: rows x cols = op(A) (rows x inner) op(B) (inner x cols);
// every matrix of a head is contiguous, so the batch stride is the matrix size.
GemmArgs head_gemm(const AttnShape& a, int64_t rows, int64_t cols, int64_t inner, const void* A,
                   Transpose ta, const void* Bm, Transpose tb, void* Cm, DType ab, DType c) {
  GemmArgs g;
  g.rows = rows;
  g.cols = cols;
  g.inner = inner;
  g.a = A;
  g.trans_a = ta;
  g.stride_a = rows * inner;
  g.b = Bm;
  g.trans_b = tb;
  g.stride_b = inner * cols;
  g.c = Cm;
  g.stride_c = rows * cols;
  g.batch = a.B * a.NH;
  g.ab_dtype = ab;
  g.c_dtype = c;
  return g;
}

}  // namespace

void attention_forward(Tensor& out, Tensor& qkvr, Tensor& att, const Tensor& qkv, int num_heads,
                       AttnKind kind, const Tensor* key_mask, const Stream& s) {
  const char* op = "attention_forward";
  const AttnShape a = attention_shape(qkv, num_heads, op);
  const DType dt = qkv.dtype();
  check_dtype(out, dt, op, "out");
  check_numel(out, a.B * a.T * a.C, op, "out");
  check_dtype(qkvr, dt, op, "qkvr");
  check_numel(qkvr, 3 * a.B * a.T * a.C, op, "qkvr");
  check_dtype(att, dt, op, "att");
  check_numel(att, a.B * a.NH * a.T * a.T, op, "att");
  check_same_device(qkv, out, op);
  if (key_mask != nullptr) {
    check_dtype(*key_mask, DType::i32, op, "key_mask");
    check_numel(*key_mask, a.B * a.T, op, "key_mask");
    check_same_device(qkv, *key_mask, op);
  }
  if (a.B * a.T == 0) return;
  DeviceGuard guard(qkv.device());
  const cudaStream_t stream = stream_of(s);
  const int64_t head_elems = a.B * a.T * a.C;  // one of q, k, v in qkvr
  const size_t esz = dtype_size(dt);
  char* q = static_cast<char*>(qkvr.data());
  char* k = q + head_elems * esz;
  char* v = k + head_elems * esz;
  const int64_t rows = a.B * a.NH * a.T;  // attention rows

  Tensor scores_tmp;
  if (dt != DType::f32)
    scores_tmp = Tensor::empty({a.B, a.NH, a.T, a.T}, DType::f32, qkv.device(), s);
  void* scores = dt == DType::f32 ? att.data() : scores_tmp.data();
  Tensor yr = Tensor::empty({a.B, a.NH, a.T, a.HS}, dt, qkv.device(), s);

  dispatch_compute(dt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    permute_heads<T, PermuteDir::kToHeads>(qkvr.data(), qkv.data(), 3, a, stream);
    // scores = q k^T / sqrt(HS)
    GemmArgs g =
        head_gemm(a, a.T, a.T, a.HS, q, Transpose::kNo, k, Transpose::kYes, scores, dt, DType::f32);
    g.alpha = 1.0f / std::sqrt(static_cast<float>(a.HS));
    gemm(g, stream);
    causal_softmax_kernel<T>
        <<<static_cast<unsigned>(ceil_div(rows, kRowsPerBlock)), kThreads, 0, stream>>>(
            ptr<T>(att), static_cast<const float*>(scores), rows, a.T, a.NH,
            kind == AttnKind::kCausal ? 1 : 0,
            key_mask == nullptr ? nullptr : ptr<const int32_t>(*key_mask));
    ZT_CUDA_CHECK_LAUNCH();
    // y = att v, then back to (B, T, C)
    gemm(head_gemm(a, a.T, a.HS, a.T, att.data(), Transpose::kNo, v, Transpose::kNo, yr.data(), dt,
                   dt),
         stream);
    permute_heads<T, PermuteDir::kFromHeads>(out.data(), yr.data(), 1, a, stream);
  });
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkvr, const Tensor& att,
                        int num_heads, AttnKind kind, const Stream& s) {
  const char* op = "attention_backward";
  const AttnShape a = attention_shape(dqkv, num_heads, op);
  const DType dt = dqkv.dtype();
  check_dtype(dout, dt, op, "dout");
  check_numel(dout, a.B * a.T * a.C, op, "dout");
  check_dtype(qkvr, dt, op, "qkvr");
  check_numel(qkvr, 3 * a.B * a.T * a.C, op, "qkvr");
  check_dtype(att, dt, op, "att");
  check_numel(att, a.B * a.NH * a.T * a.T, op, "att");
  check_same_device(dqkv, dout, op);
  if (a.B * a.T == 0) return;
  DeviceGuard guard(dqkv.device());
  const cudaStream_t stream = stream_of(s);
  const Device dev = dqkv.device();
  const int64_t head_elems = a.B * a.T * a.C;
  const size_t esz = dtype_size(dt);
  const char* q = static_cast<const char*>(qkvr.data());
  const char* k = q + head_elems * esz;
  const char* v = k + head_elems * esz;
  const int64_t rows = a.B * a.NH * a.T;

  Tensor dyr = Tensor::empty({a.B, a.NH, a.T, a.HS}, dt, dev, s);
  Tensor dqkvr = Tensor::empty({3, a.B, a.NH, a.T, a.HS}, dt, dev, s);
  char* dq = static_cast<char*>(dqkvr.data());
  char* dk = dq + head_elems * esz;
  char* dv = dk + head_elems * esz;
  Tensor datt = Tensor::empty({a.B, a.NH, a.T, a.T}, DType::f32, dev, s);
  Tensor dpre_tmp;
  if (dt != DType::f32) dpre_tmp = Tensor::empty({a.B, a.NH, a.T, a.T}, dt, dev, s);
  void* dpre = dt == DType::f32 ? datt.data() : dpre_tmp.data();

  dispatch_compute(dt, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    permute_heads<T, PermuteDir::kToHeads>(dyr.data(), dout.data(), 1, a, stream);
    // datt = dy v^T (f32); dv = att^T dy
    gemm(head_gemm(a, a.T, a.T, a.HS, dyr.data(), Transpose::kNo, v, Transpose::kYes, datt.data(),
                   dt, DType::f32),
         stream);
    gemm(head_gemm(a, a.T, a.HS, a.T, att.data(), Transpose::kYes, dyr.data(), Transpose::kNo, dv,
                   dt, dt),
         stream);
    causal_softmax_backward_kernel<T>
        <<<static_cast<unsigned>(ceil_div(rows, kRowsPerBlock)), kThreads, 0, stream>>>(
            static_cast<T*>(dpre), ptr<const float>(datt), ptr<const T>(att), rows, a.T,
            kind == AttnKind::kCausal ? 1 : 0);
    ZT_CUDA_CHECK_LAUNCH();
    // dq = dpre k / sqrt(HS); dk = dpre^T q / sqrt(HS)
    const float scale = 1.0f / std::sqrt(static_cast<float>(a.HS));
    GemmArgs gq = head_gemm(a, a.T, a.HS, a.T, dpre, Transpose::kNo, k, Transpose::kNo, dq, dt, dt);
    gq.alpha = scale;
    gemm(gq, stream);
    GemmArgs gk =
        head_gemm(a, a.T, a.HS, a.T, dpre, Transpose::kYes, q, Transpose::kNo, dk, dt, dt);
    gk.alpha = scale;
    gemm(gk, stream);
    permute_heads<T, PermuteDir::kFromHeads>(dqkv.data(), dqkvr.data(), 3, a, stream);
  });
}

}  // namespace zt::kernels::cuda
