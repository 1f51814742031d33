// Attention forward + backward on one GPU, causal and bidirectional, in bf16: the fused op
// (flash_attention_*) on each of its backends (ZeroTrain's own kernels, "zerotrain-own"; cuDNN's
// fused attention with its deterministic backward, "zerotrain-cudnn", and its atomic one,
// "zerotrain-cudnn-atomic", when cuDNN is installed) and, at sequence 1024 and causal, the unfused
// path (attention_*: batched GEMMs and a materialised (T, T) probability matrix). Shapes: head
// sizes 64 (12 heads, GPT-2's) and 128 (16 heads), sequence 1K to 16K at 16K tokens per call.
// Prints one JSON line per (shape, implementation): median milliseconds of fwd+bwd over `steps`
// (first argument, default 20) timed with CUDA events after warm-up, TFLOP/s (4 B NH T^2 HS
// forward, half that when causal, 2.5x the forward's backward), and the bytes each keeps for
// backward. bench/attention_torch.py prints the same for PyTorch's SDPA backends.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "zt/core/device.h"
#include "zt/core/tensor.h"
#include "zt/kernels/ops.h"

namespace {

struct Shape4 {
  int64_t B, NH, T, HS;
  zt::kernels::AttnKind kind;
  bool causal() const { return kind == zt::kernels::AttnKind::kCausal; }
};

void run(const Shape4& sh, bool fused, int steps, const char* impl) {
  using zt::DType;
  using zt::Tensor;
  const zt::Device dev = zt::Device::cuda(0);
  const zt::Stream s = zt::Stream::create(dev);
  const int64_t C = sh.NH * sh.HS;
  const DType dt = DType::bf16;
  Tensor qkv = Tensor::zeros({sh.B, sh.T, 3 * C}, dt, dev, s);
  {
    Tensor host = Tensor::empty({sh.B, sh.T, 3 * C}, DType::f32);
    float* p = host.data<float>();
    for (int64_t i = 0; i < host.numel(); ++i)
      p[i] = static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f;
    Tensor h16 = Tensor::empty(host.shape(), dt);
    zt::kernels::cast(h16, host, {});
    qkv.copy_from(h16);
  }
  Tensor dout = Tensor::zeros({sh.B, sh.T, C}, dt, dev, s);
  Tensor out = Tensor::empty({sh.B, sh.T, C}, dt, dev, s);
  Tensor dqkv = Tensor::empty({sh.B, sh.T, 3 * C}, dt, dev, s);
  Tensor lse, qkvr, att;
  int64_t saved = 0;
  if (fused) {
    lse = Tensor::empty({sh.B, sh.NH, sh.T}, DType::f32, dev, s);
    saved = static_cast<int64_t>(lse.nbytes());
  } else {
    qkvr = Tensor::empty({3, sh.B, sh.NH, sh.T, sh.HS}, dt, dev, s);
    att = Tensor::empty({sh.B, sh.NH, sh.T, sh.T}, dt, dev, s);
    saved = static_cast<int64_t>(qkvr.nbytes() + att.nbytes()) - static_cast<int64_t>(qkv.nbytes());
  }
  zt::Event start(dev), stop(dev);
  std::vector<float> ms;
  for (int i = 0; i < steps + 3; ++i) {
    start.record(s);
    if (fused) {
      zt::kernels::flash_attention_forward(out, lse, qkv, static_cast<int>(sh.NH), sh.kind, s);
      zt::kernels::flash_attention_backward(dqkv, dout, qkv, out, lse, static_cast<int>(sh.NH),
                                            sh.kind, s);
    } else {
      zt::kernels::attention_forward(out, qkvr, att, qkv, static_cast<int>(sh.NH), sh.kind, nullptr,
                                     s);
      zt::kernels::attention_backward(dqkv, dout, qkvr, att, static_cast<int>(sh.NH), sh.kind, s);
    }
    stop.record(s);
    stop.synchronize();
    if (i >= 3) ms.push_back(start.elapsed_ms(stop));
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double flops =
      (sh.causal() ? 3.5 : 7.0) * 2.0 * static_cast<double>(sh.B * sh.NH) * sh.T * sh.T * sh.HS;
  std::printf(
      "{\"impl\": \"%s\", \"causal\": %s, \"B\": %lld, \"NH\": %lld, \"T\": %lld, \"HS\": %lld, "
      "\"ms_median\": "
      "%.4f, "
      "\"tflops\": %.1f, \"saved_extra_bytes\": %lld}\n",
      impl, sh.causal() ? "true" : "false", static_cast<long long>(sh.B),
      static_cast<long long>(sh.NH), static_cast<long long>(sh.T), static_cast<long long>(sh.HS),
      med, flops / (med * 1e-3) / 1e12, static_cast<long long>(saved));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  using zt::kernels::AttentionBackend;
  const int steps = argc > 1 ? std::stoi(argv[1]) : 20;
  const bool cudnn = zt::kernels::cudnn_available();
  if (!cudnn) std::fprintf(stderr, "cuDNN is not installed: only the own kernels run\n");
  for (const zt::kernels::AttnKind kind :
       {zt::kernels::AttnKind::kCausal, zt::kernels::AttnKind::kBidirectional}) {
    for (const int64_t hs : {int64_t{64}, int64_t{128}}) {
      for (const int64_t t :
           {int64_t{1024}, int64_t{2048}, int64_t{4096}, int64_t{8192}, int64_t{16384}}) {
        const Shape4 sh{16384 / t, hs == 64 ? 12 : 16, t, hs, kind};
        zt::kernels::set_attention_backend(AttentionBackend::kOwn);
        run(sh, true, steps, "zerotrain-own");
        if (cudnn) {
          zt::kernels::set_attention_backend(AttentionBackend::kCudnn);
          run(sh, true, steps, "zerotrain-cudnn");
          zt::kernels::set_attention_deterministic(false);
          run(sh, true, steps, "zerotrain-cudnn-atomic");
          zt::kernels::set_attention_deterministic(true);
        }
        zt::kernels::set_attention_backend(AttentionBackend::kAuto);
        if (t == 1024 && sh.causal()) run(sh, false, steps, "zerotrain-unfused");
      }
    }
  }
  return 0;
}
