"""PyTorch's causal scaled_dot_product_attention forward + backward in bf16 for the shapes of
bench/attention_bench.cc, timed the same way (median of --steps, CUDA events, after warm-up).
Prints one JSON line per shape, with the backend PyTorch picked (flash on Hopper)."""
import argparse
import json

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
a = p.parse_args()
for B, NH, T, HS in [(16, 12, 1024, 64), (4, 16, 1024, 128), (1, 16, 4096, 128)]:
    q, k, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
    ms = []
    for i in range(a.steps + 3):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.backward(dout)
        e.record()
        torch.cuda.synchronize()
        if i >= 3:
            ms.append(s.elapsed_time(e))
    ms.sort()
    med = ms[len(ms) // 2]
    flops = 3.5 * 2.0 * B * NH * T * T * HS
    print(json.dumps({"impl": "torch-sdpa", "B": B, "NH": NH, "T": T, "HS": HS, "ms_median": round(med, 4),
                      "tflops": round(flops / (med * 1e-3) / 1e12, 1)}), flush=True)
