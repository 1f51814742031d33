// CPU reference of the fused attention (contract in kernels/op_table.inc): the same math as
// attention_forward/backward, but with the state the fused kernels keep, lse per row, instead of
// the probabilities. Forward per row t: s_u = q_t . k_u / sqrt(HS) (u <= t when causal, every
// u < T when bidirectional), lse_t = log sum exp s,
// out_t = sum_u exp(s_u - lse_t) v_u. Backward recomputes p_u = exp(s_u - lse_t) and, with
// D_t = dout_t . out_t (= sum_u p_u dout_t . v_u), ds_u = p_u (dout_t . v_u - D_t):
// dq_t = scale sum_u ds_u k_u, dk_u += scale ds_u q_t, dv_u += p_u dout_t. Accumulates in double so
// it serves as the specification of the CUDA kernels; each (b, h) is independent (OpenMP).
// gqa_attention_* (grouped-query heads read in place on the GPU) are the expansion and these.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "zt/kernels/cpu/cpu_ops.h"
#include "zt/kernels/qkv_layout.h"

namespace zt::kernels::cpu {
namespace {

struct FlashDims {
  int64_t B, T, C, NH, HS;
  bool causal;
  // One past the last key row t attends to.
  int64_t keys(int64_t t) const { return causal ? t + 1 : T; }
};

FlashDims flash_dims(const Tensor& qkv, int num_heads, AttnKind kind, const char* op) {
  ZT_ASSERT(qkv.device().is_cpu(), "{} (cpu): qkv must be on the CPU", op);
  ZT_ASSERT(qkv.ndim() == 3 && qkv.size(2) % 3 == 0, "{}: qkv {} is not (B,T,3C)", op,
            qkv.shape().str());
  const int64_t C = qkv.size(2) / 3;
  ZT_ASSERT(num_heads > 0 && C % num_heads == 0, "{}: C = {} is not divisible by {} heads", op, C,
            num_heads);
  return {qkv.size(0), qkv.size(1), C, num_heads, C / num_heads, kind == AttnKind::kCausal};
}

void check_like(const Tensor& t, DType dt, int64_t numel, const char* op, const char* name) {
  ZT_ASSERT(t.device().is_cpu() && t.dtype() == dt && t.numel() == numel,
            "{}: {} must be a CPU {} tensor of {} elements, got {} {} {}", op, name, dtype_name(dt),
            numel, t.device().str(), dtype_name(t.dtype()), t.shape().str());
}

template <typename T>
void forward_impl(T* out, float* lse, const T* qkv, const FlashDims& d) {
  const int64_t row3 = 3 * d.C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.HS));
#pragma omp parallel for if (d.B * d.NH * d.T * d.T * d.HS >= (int64_t{1} << 15))
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const T* q = qkv + b * d.T * row3 + h * d.HS;
    const T* k = q + d.C;
    const T* v = q + 2 * d.C;
    std::vector<double> s(static_cast<size_t>(d.T)), o(static_cast<size_t>(d.HS));
    for (int64_t t = 0; t < d.T; ++t) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t u = 0; u < d.keys(t); ++u) {
        double dot = 0;
        for (int64_t i = 0; i < d.HS; ++i) dot += double(q[t * row3 + i]) * double(k[u * row3 + i]);
        s[u] = dot * scale;
        m = std::max(m, s[u]);
      }
      double sum = 0;
      for (int64_t u = 0; u < d.keys(t); ++u) sum += std::exp(s[u] - m);
      const double l = m + std::log(sum);
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t u = 0; u < d.keys(t); ++u) {
        const double p = std::exp(s[u] - l);
        for (int64_t i = 0; i < d.HS; ++i) o[i] += p * double(v[u * row3 + i]);
      }
      T* dst = out + (b * d.T + t) * d.C + h * d.HS;
      for (int64_t i = 0; i < d.HS; ++i) dst[i] = static_cast<T>(o[i]);
      lse[bh * d.T + t] = static_cast<float>(l);
    }
  }
}

template <typename T>
void backward_impl(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                   const FlashDims& d) {
  const int64_t row3 = 3 * d.C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.HS));
#pragma omp parallel for if (d.B * d.NH * d.T * d.T * d.HS >= (int64_t{1} << 15))
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const T* q = qkv + b * d.T * row3 + h * d.HS;
    const T* k = q + d.C;
    const T* v = q + 2 * d.C;
    const size_t n = static_cast<size_t>(d.T * d.HS);
    std::vector<double> dq(n, 0.0), dk(n, 0.0), dv(n, 0.0);
    for (int64_t t = 0; t < d.T; ++t) {
      const T* g = dout + (b * d.T + t) * d.C + h * d.HS;
      const T* o = out + (b * d.T + t) * d.C + h * d.HS;
      double D = 0;
      for (int64_t i = 0; i < d.HS; ++i) D += double(g[i]) * double(o[i]);
      const double l = lse[bh * d.T + t];
      for (int64_t u = 0; u < d.keys(t); ++u) {
        double s = 0, dp = 0;
        for (int64_t i = 0; i < d.HS; ++i) {
          s += double(q[t * row3 + i]) * double(k[u * row3 + i]);
          dp += double(g[i]) * double(v[u * row3 + i]);
        }
        const double p = std::exp(s * scale - l);
        const double ds = p * (dp - D) * scale;
        for (int64_t i = 0; i < d.HS; ++i) {
          dq[t * d.HS + i] += ds * double(k[u * row3 + i]);
          dk[u * d.HS + i] += ds * double(q[t * row3 + i]);
          dv[u * d.HS + i] += p * double(g[i]);
        }
      }
    }
    T* dst = dqkv + b * d.T * row3 + h * d.HS;
    for (int64_t t = 0; t < d.T; ++t) {
      for (int64_t i = 0; i < d.HS; ++i) {
        dst[t * row3 + i] = static_cast<T>(dq[t * d.HS + i]);
        dst[t * row3 + d.C + i] = static_cast<T>(dk[t * d.HS + i]);
        dst[t * row3 + 2 * d.C + i] = static_cast<T>(dv[t * d.HS + i]);
      }
    }
  }
}

}  // namespace

void flash_attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads,
                             AttnKind kind, const Stream& /*s*/) {
  const char* op = "flash_attention_forward";
  const FlashDims d = flash_dims(qkv, num_heads, kind, op);
  const DType dt = qkv.dtype();
  check_like(out, dt, d.B * d.T * d.C, op, "out");
  check_like(lse, DType::f32, d.B * d.NH * d.T, op, "lse");
  if (dt == DType::f32) {
    forward_impl(out.data<float>(), lse.data<float>(), qkv.data<float>(), d);
  } else {
    ZT_ASSERT(dt == DType::f64, "{}: CPU compute dtype must be f32 or f64, got {}", op,
              dtype_name(dt));
    forward_impl(out.data<double>(), lse.data<float>(), qkv.data<double>(), d);
  }
}

void flash_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int num_heads, AttnKind kind,
                              const Stream& /*s*/) {
  const char* op = "flash_attention_backward";
  const FlashDims d = flash_dims(qkv, num_heads, kind, op);
  const DType dt = qkv.dtype();
  check_like(dqkv, dt, d.B * d.T * 3 * d.C, op, "dqkv");
  check_like(dout, dt, d.B * d.T * d.C, op, "dout");
  check_like(out, dt, d.B * d.T * d.C, op, "out");
  check_like(lse, DType::f32, d.B * d.NH * d.T, op, "lse");
  if (dt == DType::f32) {
    backward_impl(dqkv.data<float>(), dout.data<float>(), qkv.data<float>(), out.data<float>(),
                  lse.data<float>(), d);
  } else {
    ZT_ASSERT(dt == DType::f64, "{}: CPU compute dtype must be f32 or f64, got {}", op,
              dtype_name(dt));
    backward_impl(dqkv.data<double>(), dout.data<double>(), qkv.data<double>(), out.data<double>(),
                  lse.data<float>(), d);
  }
}

// Grouped-query attention as its contract states it: the expansion (no rotary), the fused
// attention, and for the backward the expansion's transpose, which sums each kv head's group.
void gqa_attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads,
                           int num_kv_heads, AttnKind kind, const Stream& s) {
  const QkvDims d =
      qkv_dims(qkv, num_heads, num_kv_heads, nullptr, nullptr, 0, "gqa_attention_forward");
  Tensor full = Tensor::empty({d.B, d.T, 3 * d.NH * d.HS}, qkv.dtype());
  cpu::qkv_expand_forward(full, qkv, num_heads, num_kv_heads, nullptr, nullptr, 0, s);
  cpu::flash_attention_forward(out, lse, full, num_heads, kind, s);
}

void gqa_attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                            const Tensor& lse, int num_heads, int num_kv_heads, AttnKind kind,
                            const Stream& s) {
  const QkvDims d =
      qkv_dims(qkv, num_heads, num_kv_heads, nullptr, nullptr, 0, "gqa_attention_backward");
  ZT_ASSERT(dqkv.shape() == qkv.shape(), "gqa_attention_backward: dqkv {} is not qkv's shape {}",
            dqkv.shape().str(), qkv.shape().str());
  Tensor full = Tensor::empty({d.B, d.T, 3 * d.NH * d.HS}, qkv.dtype());
  cpu::qkv_expand_forward(full, qkv, num_heads, num_kv_heads, nullptr, nullptr, 0, s);
  Tensor dfull = Tensor::empty(full.shape(), qkv.dtype());
  cpu::flash_attention_backward(dfull, dout, full, out, lse, num_heads, kind, s);
  cpu::qkv_expand_backward(dqkv, dfull, num_heads, num_kv_heads, nullptr, nullptr, 0, s);
}

}  // namespace zt::kernels::cpu
