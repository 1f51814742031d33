#!/usr/bin/env python3
"""PyTorch's checkpoint speed for the state ZeroTrain saves: torch.distributed.checkpoint (DCP)
save and load of a GPT-shaped model's fp32 weights with AdamW's exp_avg and exp_avg_sq (the
12 bytes per parameter ZeroTrain's shard holds), one process, the same named sizes as
zt_bench_ckpt. The weights live on the GPU and the optimizer state on the GPU (or, with
--offload, in host memory, as ZeRO-Offload keeps it). DCP is run without a process group (one
process). One JSON line, the fields of zt_bench_ckpt's. The page cache is dropped before the load
when the process may.

Usage: ckpt_torch.py --dir PATH [--model gpt-1.3b] [--offload]
"""
import argparse
import json
import os
import shutil
import time

import torch
import torch.distributed.checkpoint as dcp

SIZES = {  # (layers, width, vocabulary padded, context): zt's named sizes
    "gpt2": (12, 768, 50304, 1024),
    "gpt2-medium": (24, 1024, 50304, 1024),
    "gpt-1.3b": (24, 2048, 50304, 1024),
    "gpt-2.7b": (32, 2560, 50304, 1024),
    "gpt-6.7b": (32, 4096, 50304, 1024),
}


def state(model, device, opt_device):
    layers, d, vocab, ctx = SIZES[model]
    shapes = {"wte": (vocab, d), "wpe": (ctx, d)}
    for i in range(layers):
        p = f"h.{i}."
        shapes.update({p + "ln_1.weight": (d,), p + "ln_1.bias": (d,),
                       p + "attn.c_attn.weight": (d, 3 * d), p + "attn.c_attn.bias": (3 * d,),
                       p + "attn.c_proj.weight": (d, d), p + "attn.c_proj.bias": (d,),
                       p + "ln_2.weight": (d,), p + "ln_2.bias": (d,),
                       p + "mlp.c_fc.weight": (d, 4 * d), p + "mlp.c_fc.bias": (4 * d,),
                       p + "mlp.c_proj.weight": (4 * d, d), p + "mlp.c_proj.bias": (d,)})
    shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    g = torch.Generator(device="cpu").manual_seed(0)
    model_sd, optim_sd = {}, {}
    for k, s in shapes.items():
        model_sd[k] = torch.randn(s, generator=g).to(device)
        optim_sd[k + ".exp_avg"] = torch.randn(s, generator=g).to(opt_device)
        optim_sd[k + ".exp_avg_sq"] = torch.rand(s, generator=g).to(opt_device)
    return {"model": model_sd, "optim": optim_sd}


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--model", default="gpt-1.3b")
    ap.add_argument("--offload", action="store_true")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sd = state(a.model, dev, "cpu" if a.offload else dev)
    params = sum(t.numel() for t in sd["model"].values())
    shutil.rmtree(a.dir, ignore_errors=True)
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    dcp.save(sd, checkpoint_id=a.dir)
    os.sync()  # ZeroTrain fsyncs every file before a save returns
    save_s = time.perf_counter() - t0
    nbytes = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(a.dir) for f in fs)
    dropped = drop_caches()
    t0 = time.perf_counter()
    dcp.load(sd, checkpoint_id=a.dir)
    if dev == "cuda":
        torch.cuda.synchronize()
    load_s = time.perf_counter() - t0
    shutil.rmtree(a.dir, ignore_errors=True)
    print(json.dumps({"impl": "torch-dcp", "model": a.model, "parameters": params,
                      "offload": a.offload, "bytes": nbytes, "save_s": save_s, "load_s": load_s,
                      "save_GBps": nbytes / save_s / 1e9, "load_GBps": nbytes / load_s / 1e9,
                      "async_stall_s": -1, "async_total_s": -1, "drop_caches": dropped}))


if __name__ == "__main__":
    main()
