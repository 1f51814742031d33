"""PyTorch's layer_norm and rms_norm forward and backward in bf16 at the shapes of
bench/norm_bench.cc, timed the same way (median of --steps between CUDA events after warm-up),
eager ("torch-eager") and under torch.compile ("torch-compile"): one JSON line each per shape.
The backward is the gradient of the input and the parameters (torch.autograd.grad)."""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=50)
a = p.parse_args()


def median_ms(f):
    ms = []
    for i in range(a.steps + 5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        f()
        e.record()
        e.synchronize()
        if i >= 5:
            ms.append(s.elapsed_time(e))
    ms.sort()
    return ms[len(ms) // 2]


def run(op, rows, C, impl):
    x = torch.randn(rows, C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(rows, C, device="cuda", dtype=torch.bfloat16)
    if op == "layernorm":
        def f(x, w, b):
            return F.layer_norm(x, (C,), w, b, 1e-5)
        params = (x, w, b)
    else:
        def f(x, w):
            return F.rms_norm(x, (C,), w, 1e-5)
        params = (x, w)
    if impl == "torch-compile":
        f = torch.compile(f)
    with torch.no_grad():
        fwd_ms = median_ms(lambda: f(*params))
    y = f(*params)
    bwd_ms = median_ms(lambda: torch.autograd.grad(y, params, dout, retain_graph=True))
    elem = rows * C * 2.0
    print(json.dumps({"impl": impl, "op": op, "rows": rows, "C": C, "fwd_ms": round(fwd_ms, 4),
                      "bwd_ms": round(bwd_ms, 4), "fwd_gbs": round(2 * elem / (fwd_ms * 1e6)),
                      "bwd_gbs": round(3 * elem / (bwd_ms * 1e6))}), flush=True)


for op, rows, C in (("layernorm", 16384, 768), ("layernorm", 8192, 2048), ("rmsnorm", 8192, 2048),
                    ("rmsnorm", 2048, 4096), ("rmsnorm", 4096, 4096)):
    for impl in ("torch-eager", "torch-compile"):
        try:
            run(op, rows, C, impl)
        except Exception as err:  # noqa: BLE001 - report and go on with the other shapes
            print(f"{impl} {op} {rows}x{C}: {err}", file=sys.stderr)
