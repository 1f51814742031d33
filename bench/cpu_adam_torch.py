"""PyTorch's CPU AdamW (fused=True, else foreach) on the same N fp32 parameters as
bench/cpu_adam_bench.cc, plus the bf16 copy ZeRO-Offload writes, timed the same way (median of
--steps after 2 warm-up). Prints one JSON line."""
import argparse
import json
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--elements", type=int, default=100_000_000)
ap.add_argument("--steps", type=int, default=10)
a = ap.parse_args()
p = torch.nn.Parameter(torch.arange(a.elements, dtype=torch.float32) % 1000 * 1e-3)
p.grad = (torch.arange(a.elements, dtype=torch.float32) * 7 % 1000) * 1e-4 - 0.05
lowp = torch.empty(a.elements, dtype=torch.bfloat16)
try:
    opt, kind = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, fused=True), "fused"
except (RuntimeError, TypeError):
    opt, kind = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, foreach=True), "foreach"
ms = []
for s in range(a.steps + 2):
    t0 = time.perf_counter()
    opt.step()
    lowp.copy_(p.detach())
    t1 = time.perf_counter()
    if s >= 2:
        ms.append((t1 - t0) * 1e3)
ms.sort()
med = ms[len(ms) // 2]
print(json.dumps({"impl": f"torch-cpu-adamw-{kind}", "elements": a.elements,
                  "threads": torch.get_num_threads(), "ms_median": round(med, 3),
                  "elements_per_s": a.elements / (med * 1e-3)}))
