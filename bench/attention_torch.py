"""PyTorch's scaled_dot_product_attention forward + backward, causal and not, in bf16 for the shapes of
bench/attention_bench.cc, timed the same way (median of --steps, CUDA events, after warm-up), on
each of its Hopper backends (flash, cuDNN) and, as "torch-sdpa", the faster of the two: one JSON
line each per shape."""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
a = p.parse_args()


def time_backend(backend, B, NH, T, HS, causal):
    q, k, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
    ms = []
    with sdpa_kernel([backend]):
        for i in range(a.steps + 3):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            y.backward(dout)
            e.record()
            torch.cuda.synchronize()
            if i >= 3:
                ms.append(s.elapsed_time(e))
    ms.sort()
    return ms[len(ms) // 2]


def bench_shape(causal, HS, T):
    B, NH = 16384 // T, (12 if HS == 64 else 16)
    flops = (3.5 if causal else 7.0) * 2.0 * B * NH * T * T * HS
    best = None
    for name, backend in (("torch-flash", SDPBackend.FLASH_ATTENTION),
                          ("torch-cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            med = time_backend(backend, B, NH, T, HS, causal)
        except RuntimeError as err:  # a backend that declines the shape
            print(f"{name} {B, NH, T, HS} causal={causal}: {err}", file=sys.stderr)
            continue
        print(json.dumps({"impl": name, "causal": causal, "B": B, "NH": NH, "T": T, "HS": HS,
                          "ms_median": round(med, 4),
                          "tflops": round(flops / (med * 1e-3) / 1e12, 1)}), flush=True)
        best = med if best is None else min(best, med)
    if best is not None:
        print(json.dumps({"impl": "torch-sdpa", "causal": causal, "B": B, "NH": NH, "T": T,
                          "HS": HS, "ms_median": round(best, 4),
                          "tflops": round(flops / (best * 1e-3) / 1e12, 1)}), flush=True)


for causal in (True, False):
    for HS in (64, 128):
        for T in (1024, 2048, 4096, 8192, 16384):
            bench_shape(causal, HS, T)
