// LayerNorm and RMSNorm forward and backward on one GPU, in bf16, at the shapes of the models'
// steps (tokens x width): GPT-2 124M (16 x 1024 tokens, 768), GPT 1.3B (8 x 1024, 2048),
// Llama 1B (4 x 2048, 2048), Llama 8B (1 x 2048 and 1 x 4096, 4096). Prints one JSON line per
// (op, shape): median milliseconds of the forward and of the backward (din with the parameter
// gradients, no residual gradient) over `steps` (first argument, default 50) timed with CUDA
// events after warm-up, and the bandwidth of the bytes each must move (forward: read the input,
// write the output; backward: read dout and the input, write din), for the row kernels
// ("zerotrain", the default) and the loop kernels ("zerotrain-loops", ZT_NORM_PATH=loops; see
// kernels/cuda/norm_rows.cuh). bench/norm_torch.py prints the same for PyTorch's layer_norm and
// rms_norm, eager and compiled.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zt/core/device.h"
#include "zt/core/tensor.h"
#include "zt/kernels/ops.h"

namespace {

using zt::DType;
using zt::Tensor;

Tensor filled(const zt::Shape& shape, int64_t salt, const zt::Device& dev, const zt::Stream& s) {
  Tensor host = Tensor::empty(shape, DType::f32);
  float* p = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i)
    p[i] = static_cast<float>(((i + salt) * 7919) % 97) / 97.0f - 0.5f;
  Tensor h16 = Tensor::empty(shape, DType::bf16);
  zt::kernels::cast(h16, host, {});
  Tensor d = Tensor::empty(shape, DType::bf16, dev, s);
  d.copy_from(h16);
  return d;
}

template <typename F>
double median_ms(F&& f, int steps, const zt::Device& dev, const zt::Stream& s) {
  zt::Event start(dev), stop(dev);
  std::vector<float> ms;
  for (int i = 0; i < steps + 5; ++i) {
    start.record(s);
    f();
    stop.record(s);
    stop.synchronize();
    if (i >= 5) ms.push_back(start.elapsed_ms(stop));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void run(bool rms, int64_t rows, int64_t C, int steps, bool loops) {
  setenv("ZT_NORM_PATH", loops ? "loops" : "rows", 1);
  const zt::Device dev = zt::Device::cuda(0);
  const zt::Stream s = zt::Stream::create(dev);
  Tensor x = filled({rows, C}, 1, dev, s);
  Tensor dout = filled({rows, C}, 2, dev, s);
  Tensor w = filled({C}, 3, dev, s);
  Tensor b = filled({C}, 4, dev, s);
  Tensor y = Tensor::empty({rows, C}, DType::bf16, dev, s);
  Tensor din = Tensor::empty({rows, C}, DType::bf16, dev, s);
  Tensor mean = Tensor::empty({rows}, DType::f32, dev, s);
  Tensor rstd = Tensor::empty({rows}, DType::f32, dev, s);
  Tensor dw = Tensor::zeros({C}, DType::f32, dev, s);
  Tensor db = Tensor::zeros({C}, DType::f32, dev, s);
  auto fwd = [&] {
    if (rms) {
      zt::kernels::rmsnorm_forward(y, rstd, x, w, 1e-5f, s);
    } else {
      zt::kernels::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f, s);
    }
  };
  auto bwd = [&] {
    if (rms) {
      zt::kernels::rmsnorm_backward(din, dw, dout, x, w, rstd, nullptr, s);
    } else {
      zt::kernels::layernorm_backward(din, dw, db, dout, x, w, mean, rstd, nullptr, s);
    }
  };
  const double fwd_ms = median_ms(fwd, steps, dev, s);
  const double bwd_ms = median_ms(bwd, steps, dev, s);
  const double elem = static_cast<double>(rows * C) * 2.0;  // bf16 bytes of one (rows, C)
  std::printf(
      "{\"impl\": \"%s\", \"op\": \"%s\", \"rows\": %lld, \"C\": %lld, "
      "\"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_gbs\": %.0f, \"bwd_gbs\": %.0f}\n",
      loops ? "zerotrain-loops" : "zerotrain", rms ? "rmsnorm" : "layernorm",
      static_cast<long long>(rows), static_cast<long long>(C), fwd_ms, bwd_ms,
      2 * elem / (fwd_ms * 1e6), 3 * elem / (bwd_ms * 1e6));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 50;
  for (const bool loops : {false, true}) {
    run(false, 16384, 768, steps, loops);
    run(false, 8192, 2048, steps, loops);
    run(true, 8192, 2048, steps, loops);
    run(true, 2048, 4096, steps, loops);
    run(true, 4096, 4096, steps, loops);
  }
  return 0;
}
