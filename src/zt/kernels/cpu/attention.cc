// CPU reference of multi-head self-attention (causal, or bidirectional with a key padding mask)
// (contract in kernels/ops.h), written as plain loops so the math reads directly: permute qkv
// (B,T,3C) to qkvr (3,B,NH,T,HS); per head, scores = q k^T / sqrt(HS) with u > t (causal) and
// padding keys masked; att = softmax(scores) (max-subtracted); out = att v, written back to
// (B,T,C). Assumes contiguous CPU tensors in the compute dtype, f32 or f64; each (batch, head) pair
// is independent, so threads split those.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "zt/kernels/cpu/cpu_ops.h"

namespace zt::kernels::cpu {
namespace {

// Loops with less work than this (element operations) run on one thread: waking the OpenMP
// team costs more than it saves, and tiny ops are common (finite-difference tests, small
// models).
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

struct AttentionDims {
  int64_t B, T, C, NH, HS;
  bool causal = true;
  const int32_t* key_mask = nullptr;  // (B,T): 0 marks a padding key
  // Keys query t may attend to end before this.
  int64_t key_end(int64_t t) const { return causal ? t + 1 : T; }
  bool masked(int64_t b, int64_t u) const {
    return key_mask != nullptr && key_mask[b * T + u] == 0;
  }
};

template <typename T>
void attention_forward_impl(T* out, T* qkvr, T* att, const T* qkv, const AttentionDims& d) {
  const int64_t BT = d.B * d.T;
  const int64_t head_block = d.T * d.HS;  // one (b, h) slice of q, k or v in qkvr
#pragma omp parallel for if (parallel : BT * 3 * d.C >= kParallelMinWork)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const int64_t b = bt / d.T;
    const int64_t t = bt % d.T;
    const T* src = qkv + bt * 3 * d.C;
    for (int64_t s = 0; s < 3; ++s) {
      for (int64_t h = 0; h < d.NH; ++h) {
        T* dst = qkvr + ((s * d.B + b) * d.NH + h) * head_block + t * d.HS;
        for (int64_t i = 0; i < d.HS; ++i) dst[i] = src[s * d.C + h * d.HS + i];
      }
    }
  }
  const T scale = T{1} / std::sqrt(static_cast<T>(d.HS));
  const int64_t BNH = d.B * d.NH;
#pragma omp parallel for if (parallel : BNH * d.T * d.T * d.HS >= kParallelMinWork)
  for (int64_t bh = 0; bh < BNH; ++bh) {
    const int64_t b = bh / d.NH;
    const int64_t h = bh % d.NH;
    const T* q = qkvr + bh * head_block;
    const T* k = qkvr + (BNH + bh) * head_block;
    const T* v = qkvr + (2 * BNH + bh) * head_block;
    for (int64_t t = 0; t < d.T; ++t) {
      T* row = att + (bh * d.T + t) * d.T;
      const T* qt = q + t * d.HS;
      const int64_t end = d.key_end(t);
      T maxv = -std::numeric_limits<T>::infinity();
      for (int64_t u = 0; u < end; ++u) {
        if (d.masked(b, u)) continue;
        T dot = 0;
        for (int64_t i = 0; i < d.HS; ++i) dot += qt[i] * k[u * d.HS + i];
        row[u] = dot * scale;
        if (row[u] > maxv) maxv = row[u];
      }
      T sum = 0;
      for (int64_t u = 0; u < end; ++u) {
        row[u] = d.masked(b, u) ? T{0} : std::exp(row[u] - maxv);
        sum += row[u];
      }
      // A query whose keys are all padding attends to nothing (output 0).
      const T inv = sum > 0 ? T{1} / sum : T{0};
      for (int64_t u = 0; u < end; ++u) row[u] *= inv;
      for (int64_t u = end; u < d.T; ++u) row[u] = 0;
      T* o = out + (b * d.T + t) * d.C + h * d.HS;
      for (int64_t i = 0; i < d.HS; ++i) o[i] = 0;
      for (int64_t u = 0; u < end; ++u) {
        const T a = row[u];
        const T* vu = v + u * d.HS;
        for (int64_t i = 0; i < d.HS; ++i) o[i] += a * vu[i];
      }
    }
  }
}

// Backward of out = softmax(q k^T scale, causal) v for one head at a time:
// dv[u] = sum_t att[t,u] dout[t]; datt[t,u] = dout[t] . v[u];
// dscore[t,u] = att[t,u] (datt[t,u] - sum_u' att[t,u'] datt[t,u']) scale;
// dq[t] = sum_u dscore[t,u] k[u]; dk[u] = sum_t dscore[t,u] q[t].
// Each (b, h) owns disjoint columns of dqkv, so the per-head loop has no write races.
template <typename T>
void attention_backward_impl(T* dqkv, const T* dout, const T* qkvr, const T* att,
                             const AttentionDims& d) {
  const int64_t head_block = d.T * d.HS;
  const int64_t BNH = d.B * d.NH;
  const int64_t row3 = 3 * d.C;
  const T scale = T{1} / std::sqrt(static_cast<T>(d.HS));
#pragma omp parallel for if (parallel : BNH * d.T * d.T * d.HS >= kParallelMinWork)
  for (int64_t bh = 0; bh < BNH; ++bh) {
    const int64_t b = bh / d.NH;
    const int64_t h = bh % d.NH;
    const T* q = qkvr + bh * head_block;
    const T* k = qkvr + (BNH + bh) * head_block;
    const T* v = qkvr + (2 * BNH + bh) * head_block;
    // This head's q, k, v gradient rows of position t, in the un-permuted (B,T,3C) layout.
    T* dq_base = dqkv + b * d.T * row3 + h * d.HS;
    T* dk_base = dq_base + d.C;
    T* dv_base = dq_base + 2 * d.C;
    for (int64_t t = 0; t < d.T; ++t) {
      for (int64_t i = 0; i < d.HS; ++i) {
        dq_base[t * row3 + i] = 0;
        dk_base[t * row3 + i] = 0;
        dv_base[t * row3 + i] = 0;
      }
    }
    std::vector<T> datt(static_cast<size_t>(d.T));
    for (int64_t t = 0; t < d.T; ++t) {
      const T* a = att + (bh * d.T + t) * d.T;
      const T* g = dout + (b * d.T + t) * d.C + h * d.HS;
      T weighted = 0;  // sum_u att[t,u] datt[t,u]
      for (int64_t u = 0; u < d.key_end(t); ++u) {
        const T* vu = v + u * d.HS;
        T* dvu = dv_base + u * row3;
        T dot = 0;
        for (int64_t i = 0; i < d.HS; ++i) {
          dot += g[i] * vu[i];
          dvu[i] += a[u] * g[i];
        }
        datt[u] = dot;
        weighted += a[u] * dot;
      }
      const T* qt = q + t * d.HS;
      T* dqt = dq_base + t * row3;
      for (int64_t u = 0; u < d.key_end(t); ++u) {
        const T ds = a[u] * (datt[u] - weighted) * scale;
        const T* ku = k + u * d.HS;
        T* dku = dk_base + u * row3;
        for (int64_t i = 0; i < d.HS; ++i) {
          dqt[i] += ds * ku[i];
          dku[i] += ds * qt[i];
        }
      }
    }
  }
}

// Checks qkvr (3,B,NH,T,HS) and att (B,NH,T,T) against the dims.
void attention_check_saved(const Tensor& qkvr, const Tensor& att, const AttentionDims& d,
                           const char* op) {
  ZT_ASSERT(qkvr.ndim() == 5 && qkvr.size(0) == 3 && qkvr.size(1) == d.B && qkvr.size(2) == d.NH &&
                qkvr.size(3) == d.T && qkvr.size(4) == d.HS,
            "{}: qkvr {} is not (3,B,NH,T,HS) = (3,{},{},{},{})", op, qkvr.shape().str(), d.B, d.NH,
            d.T, d.HS);
  ZT_ASSERT(att.ndim() == 4 && att.size(0) == d.B && att.size(1) == d.NH && att.size(2) == d.T &&
                att.size(3) == d.T,
            "{}: att {} is not (B,NH,T,T) = ({},{},{},{})", op, att.shape().str(), d.B, d.NH, d.T,
            d.T);
}

}  // namespace

void attention_forward(Tensor& out, Tensor& qkvr, Tensor& att, const Tensor& qkv, int num_heads,
                       AttnKind kind, const Tensor* key_mask, const Stream& s) {
  ZT_ASSERT(out.device().is_cpu() && qkvr.device().is_cpu() && att.device().is_cpu() &&
                qkv.device().is_cpu(),
            "attention_forward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(qkv.ndim() == 3 && qkv.size(2) % 3 == 0, "attention_forward: qkv {} is not (B,T,3C)",
            qkv.shape().str());
  const int64_t C = qkv.size(2) / 3;
  ZT_ASSERT(num_heads > 0 && C % num_heads == 0,
            "attention_forward: C = {} (qkv {}) is not divisible by num_heads = {}", C,
            qkv.shape().str(), num_heads);
  AttentionDims d{qkv.size(0), qkv.size(1), C, num_heads, C / num_heads};
  d.causal = kind == AttnKind::kCausal;
  if (key_mask != nullptr) {
    ZT_ASSERT(key_mask->device().is_cpu() && key_mask->dtype() == DType::i32 &&
                  key_mask->numel() == d.B * d.T,
              "attention_forward: key_mask {} {} is not (B,T) = ({},{}) i32 on the CPU",
              key_mask->shape().str(), dtype_name(key_mask->dtype()), d.B, d.T);
    d.key_mask = key_mask->data<int32_t>();
  }
  ZT_ASSERT(out.ndim() == 3 && out.size(0) == d.B && out.size(1) == d.T && out.size(2) == d.C,
            "attention_forward: out {} is not (B,T,C) = ({},{},{})", out.shape().str(), d.B, d.T,
            d.C);
  attention_check_saved(qkvr, att, d, "attention_forward");
  const DType dt = qkv.dtype();
  ZT_ASSERT(out.dtype() == dt && qkvr.dtype() == dt && att.dtype() == dt,
            "attention_forward: out {}, qkvr {}, att {} must be the compute dtype {}",
            dtype_name(out.dtype()), dtype_name(qkvr.dtype()), dtype_name(att.dtype()),
            dtype_name(dt));
  if (dt == DType::f32) {
    attention_forward_impl(out.data<float>(), qkvr.data<float>(), att.data<float>(),
                           qkv.data<float>(), d);
  } else {
    ZT_ASSERT(dt == DType::f64, "attention_forward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    attention_forward_impl(out.data<double>(), qkvr.data<double>(), att.data<double>(),
                           qkv.data<double>(), d);
  }
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkvr, const Tensor& att,
                        int num_heads, AttnKind kind, const Stream& s) {
  ZT_ASSERT(dqkv.device().is_cpu() && dout.device().is_cpu() && qkvr.device().is_cpu() &&
                att.device().is_cpu(),
            "attention_backward (cpu): all tensors must be on the CPU");
  ZT_ASSERT(dout.ndim() == 3, "attention_backward: dout {} is not (B,T,C)", dout.shape().str());
  const int64_t C = dout.size(2);
  ZT_ASSERT(num_heads > 0 && C % num_heads == 0,
            "attention_backward: C = {} (dout {}) is not divisible by num_heads = {}", C,
            dout.shape().str(), num_heads);
  AttentionDims d{dout.size(0), dout.size(1), C, num_heads, C / num_heads};
  d.causal = kind == AttnKind::kCausal;
  ZT_ASSERT(
      dqkv.ndim() == 3 && dqkv.size(0) == d.B && dqkv.size(1) == d.T && dqkv.size(2) == 3 * d.C,
      "attention_backward: dqkv {} is not (B,T,3C) = ({},{},{})", dqkv.shape().str(), d.B, d.T,
      3 * d.C);
  attention_check_saved(qkvr, att, d, "attention_backward");
  const DType dt = dout.dtype();
  ZT_ASSERT(dqkv.dtype() == dt && qkvr.dtype() == dt && att.dtype() == dt,
            "attention_backward: dqkv {}, qkvr {}, att {} must be the compute dtype {}",
            dtype_name(dqkv.dtype()), dtype_name(qkvr.dtype()), dtype_name(att.dtype()),
            dtype_name(dt));
  if (dt == DType::f32) {
    attention_backward_impl(dqkv.data<float>(), dout.data<float>(), qkvr.data<float>(),
                            att.data<float>(), d);
  } else {
    ZT_ASSERT(dt == DType::f64, "attention_backward: CPU compute dtype must be f32 or f64, got {}",
              dtype_name(dt));
    attention_backward_impl(dqkv.data<double>(), dout.data<double>(), qkvr.data<double>(),
                            att.data<double>(), d);
  }
}

}  // namespace zt::kernels::cpu
