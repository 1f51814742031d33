// CUDA multi-tensor Adam/AdamW, SGD and Lamb against the CPU reference over several steps. The
// chunks are views into flat buffers with gaps between them (the gaps must stay untouched), of
// sizes not multiple of 4, some misaligned (the scalar path), one of more than 320 tiles, and more
// of them than one launch's fixed-capacity chunk table holds (so several launches). The 16-bit
// parameter copy must equal the rounding of the updated f32 parameters (round to nearest even,
// written here on the host).
// From step 2 on, the GPU reads the gradient factor from device memory (grad_scale_at, as the
// engine's step passes grad_clip_scale's output) with a wrong grad_scale beside it, and on step 3
// the CPU reads it through a host pointer likewise: the same updates as the plain value.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "zt/core/half.h"
#include "zt/kernels/ops.h"

namespace zt::testing {
namespace {

using kernels::AdamMode;
using kernels::BiasCorrection;
using kernels::OptimChunk;

enum class ZeroFirstChunk : unsigned char { kNo, kYes };

// The gradient factor 0.5 in device memory, for grad_scale_at.
const float* device_half() {
  static const Tensor t = Tensor::from_floats({0.5f}, {1}, DType::f32).to(Device::cuda(0));
  return t.data<float>();
}
const float kHostHalf = 0.5f;

// Args for the CPU and the GPU call of `step`: grad_scale 0.5, or from step 2 (GPU) / 3 (CPU) a
// pointer to 0.5 with a grad_scale that would be wrong.
template <typename Args>
std::pair<Args, Args> with_factor(Args a, int64_t step) {
  a.grad_scale = 0.5f;
  Args cpu = a, gpu = a;
  if (step >= 2) {
    gpu.grad_scale = 7.0f;
    gpu.grad_scale_at = device_half();
  }
  if (step >= 3) {
    cpu.grad_scale = 7.0f;
    cpu.grad_scale_at = &kHostHalf;
  }
  return {cpu, gpu};
}

struct OptimBuffers {
  std::vector<int64_t> offset;
  std::vector<int64_t> size;
  int64_t total = 0;
  Tensor p, g, m, v;           // CPU f32
  Tensor pd, gd, md, vd;       // the same on cuda:0
  Tensor lowp_bf16, lowp_f16;  // cuda:0, one element per flat element, zero-initialised

  explicit OptimBuffers(ZeroFirstChunk zero_first) {
    std::vector<int64_t> sizes = {1, 3, 4, 5, 4097, 20000, 2700001};  // > 320 tiles of 8192
    for (int i = 0; i < 200; ++i) sizes.push_back(5 + i % 40);  // > kMtMaxChunks (192) chunks
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      // Even chunks start 16-byte aligned (vector path), odd ones one float past (scalar path).
      at = (at + 3) / 4 * 4 + (i % 2 == 1 ? 1 : 0);
      offset.push_back(at);
      size.push_back(sizes[i]);
      at += sizes[i] + 1;  // a gap element after each chunk
    }
    total = at;
    p = random_tensor({total}, DType::f32, 2001);
    if (zero_first == ZeroFirstChunk::kYes) {
      std::vector<float> pv = p.to_floats();
      for (int64_t i = 0; i < size[4]; ++i) pv[offset[4] + i] = 0.0f;
      p = Tensor::from_floats(pv, {total}, DType::f32);
    }
    m = Tensor::zeros({total}, DType::f32);
    v = Tensor::zeros({total}, DType::f32);
    g = Tensor::zeros({total}, DType::f32);
    pd = p.to(Device::cuda(0));
    md = m.to(Device::cuda(0));
    vd = v.to(Device::cuda(0));
    gd = g.to(Device::cuda(0));
    lowp_bf16 = Tensor::zeros({total}, DType::bf16, Device::cuda(0));
    lowp_f16 = Tensor::zeros({total}, DType::f16, Device::cuda(0));
  }

  // Gradients of magnitude in [0.25, 1) with random signs: scaled by 0.5 they stay above the
  // largest L2 term wd * |p| (0.1 * 1.15 after three steps), so g + wd p never cancels to a value
  // whose rounding would decide the sign of Adam's m / sqrt(v) (that is not a kernel property).
  void new_gradients(uint64_t seed) {
    std::vector<float> gv = random_tensor({total}, DType::f32, seed).to_floats();
    for (float& x : gv) x = (x < 0 ? -1.0f : 1.0f) * (0.25f + 0.75f * std::fabs(x));
    g = Tensor::from_floats(gv, {total}, DType::f32);
    gd.copy_from(g);
  }

  // Chunk i of the flat buffers; on the GPU, chunk i writes a bf16 copy when i % 3 == 0 and an
  // f16 copy when i % 3 == 1.
  std::vector<OptimChunk> chunks(Device dev, int state_count) const {
    std::vector<OptimChunk> out;
    const bool gpu = dev.is_cuda();
    auto* pp = static_cast<float*>((gpu ? pd : p).data());
    auto* gp = static_cast<const float*>((gpu ? gd : g).data());
    auto* mp = static_cast<float*>((gpu ? md : m).data());
    auto* vp = static_cast<float*>((gpu ? vd : v).data());
    for (size_t i = 0; i < offset.size(); ++i) {
      OptimChunk c;
      c.param = pp + offset[i];
      c.grad = gp + offset[i];
      c.state1 = state_count >= 1 ? mp + offset[i] : nullptr;
      c.state2 = state_count >= 2 ? vp + offset[i] : nullptr;
      c.n = size[i];
      if (gpu && i % 3 == 0) {
        c.param_lowp = static_cast<bf16_t*>(lowp_bf16.data()) + offset[i];
        c.lowp_dtype = DType::bf16;
      } else if (gpu && i % 3 == 1) {
        c.param_lowp = static_cast<f16_t*>(lowp_f16.data()) + offset[i];
        c.lowp_dtype = DType::f16;
      }
      out.push_back(c);
    }
    return out;
  }

  void expect_match(const char* what) const {
    SCOPED_TRACE(what);
    // Whole buffers: the gaps between chunks must be untouched on both sides.
    expect_close(values(pd), values(p), 1e-6, 1e-5, "param");
    expect_close(values(md), values(m), 1e-7, 1e-5, "state1");
    expect_close(values(vd), values(v), 1e-9, 1e-5, "state2");
    const std::vector<float> pg = pd.to_floats();
    const std::vector<double> b = lowp_bf16.to_doubles();
    const std::vector<double> h = lowp_f16.to_doubles();
    std::vector<double> want_b(total, 0.0), want_h(total, 0.0);
    for (size_t i = 0; i < offset.size(); ++i) {
      for (int64_t j = offset[i]; j < offset[i] + size[i]; ++j) {
        if (i % 3 == 0) want_b[j] = round_to_bf16(pg[j]);
        if (i % 3 == 1) want_h[j] = round_to_f16(pg[j]);
      }
    }
    expect_close(b, want_b, 1e-30, 0, "bf16 copy");
    expect_close(h, want_h, 1e-30, 0, "f16 copy");
  }
};

TEST(OptimCuda, AdamModesMatchCpuOverSteps) {
  ZT_SKIP_WITHOUT_CUDA();
  struct Case {
    AdamMode mode;
    BiasCorrection bc;
  };
  for (Case c :
       {Case{AdamMode::kAdamW, BiasCorrection::kOn}, Case{AdamMode::kL2, BiasCorrection::kOn},
        Case{AdamMode::kAdamW, BiasCorrection::kOff}}) {
    SCOPED_TRACE(static_cast<int>(c.mode) * 10 + static_cast<int>(c.bc));
    OptimBuffers buf(ZeroFirstChunk::kNo);
    for (int64_t step = 1; step <= 3; ++step) {
      buf.new_gradients(2100 + step);
      kernels::AdamArgs a;
      a.lr = 0.05f;
      a.weight_decay = 0.1f;
      a.step = step;
      a.mode = c.mode;
      a.bias_correction = c.bc;
      const auto [ac, ag] = with_factor(a, step);
      const std::vector<OptimChunk> cpu = buf.chunks(Device::cpu(), 2);
      const std::vector<OptimChunk> gpu = buf.chunks(Device::cuda(0), 2);
      kernels::adam_step(ac, cpu, Device::cpu());
      kernels::adam_step(ag, gpu, Device::cuda(0));
    }
    buf.expect_match("adam");
  }
}

TEST(OptimCuda, SgdVariantsMatchCpuOverSteps) {
  ZT_SKIP_WITHOUT_CUDA();
  struct Case {
    float momentum;
    float dampening;
    bool nesterov;
  };
  for (Case c : {Case{0.9f, 0.1f, false}, Case{0.9f, 0.0f, true}, Case{0.0f, 0.0f, false}}) {
    SCOPED_TRACE(c.momentum * 100 + (c.nesterov ? 1 : 0));
    OptimBuffers buf(ZeroFirstChunk::kNo);
    const int states = c.momentum != 0.0f ? 1 : 0;
    for (int64_t step = 1; step <= 3; ++step) {
      buf.new_gradients(2200 + step);
      kernels::SgdArgs a;
      a.lr = 0.1f;
      a.momentum = c.momentum;
      a.dampening = c.dampening;
      a.nesterov = c.nesterov;
      a.weight_decay = 0.01f;
      a.first_step = step == 1;
      const auto [ac, ag] = with_factor(a, step);
      kernels::sgd_step(ac, buf.chunks(Device::cpu(), states), Device::cpu());
      kernels::sgd_step(ag, buf.chunks(Device::cuda(0), states), Device::cuda(0));
    }
    buf.expect_match("sgd");
  }
}

TEST(OptimCuda, LambMatchesCpuOverSteps) {
  ZT_SKIP_WITHOUT_CUDA();
  // Chunk 4 starts at zero: its trust ratio is 1 (||p|| = 0) on the first step.
  OptimBuffers buf(ZeroFirstChunk::kYes);
  for (int64_t step = 1; step <= 3; ++step) {
    buf.new_gradients(2300 + step);
    kernels::LambArgs a;
    a.lr = 0.02f;
    a.weight_decay = 0.01f;
    a.step = step;
    // A narrow clamp so that some chunks' trust ratios are clamped and others are not.
    a.max_coeff = 2.0f;
    a.min_coeff = 0.5f;
    const auto [ac, ag] = with_factor(a, step);
    kernels::lamb_step(ac, buf.chunks(Device::cpu(), 2), Device::cpu());
    kernels::lamb_step(ag, buf.chunks(Device::cuda(0), 2), Device::cuda(0));
  }
  buf.expect_match("lamb");
}

}  // namespace
}  // namespace zt::testing
