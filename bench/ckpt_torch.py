#!/usr/bin/env python3
"""PyTorch's checkpoint speed for the state ZeroTrain saves: torch.distributed.checkpoint (DCP)
save and load of a GPT-shaped model's fp32 weights with AdamW's exp_avg and exp_avg_sq (the
12 bytes per parameter ZeroTrain's shard holds), one process, the same named sizes as
zt_bench_ckpt. The weights live on the GPU and the optimizer state on the GPU (or, with
--offload, in host memory, as ZeRO-Offload keeps it). DCP is run without a process group (one
process). One JSON line, the fields of zt_bench_ckpt's. The page cache is dropped before the load
when the process may.

--fsdp2 (under torchrun, one GPU per rank): the peer of `zt launch --num_gpus N zt_bench_ckpt
--stage 3`. bench/gpt2_torch.py's GPT built on the meta device, fully_shard on each block and the
root (reshard_after_forward=True, MixedPrecisionPolicy(bf16 params, fp32 reduce), as
bench/zero_torch.py's fsdp2-reshard), materialised on the GPU, and a fused AdamW whose state one
step (on zero gradients) creates: each rank holds 1/N of the fp32 parameters, exp_avg and
exp_avg_sq (12 bytes per parameter, and AdamW's step counters). The save is get_state_dict(model,
optim) + dcp.save({"model", "optim"}) + os.sync(); the load is get_state_dict (the target),
dcp.load and set_state_dict. Every timed phase starts after a barrier; each rank times its own
part and rank 0 prints the slowest rank's seconds and the whole folder's bytes (all ranks' files
and DCP's .metadata), so GB/s is the aggregate, as zt_bench_ckpt's with several ranks.

Usage: ckpt_torch.py --dir PATH [--model gpt-1.3b] [--offload]
       torchrun --standalone --nproc_per_node 2 ckpt_torch.py --fsdp2 --dir PATH [--model M]
"""
import argparse
import json
import os
import shutil
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL is loaded

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

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


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def fsdp2_main(a):
    """DCP of an FSDP2 model and its AdamW over the ranks of torchrun (module docstring)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpt2_torch import GPT, SIZES as GPT_SIZES
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch before 2.6
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    try:
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:  # torch before 2.3 has no device_id
        dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    n_layer, n_head, c = GPT_SIZES[a.model]
    with torch.device("meta"):  # no full copy of the model on any rank
        model = GPT(n_layer, n_head, c)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for blk in model.blocks:
        fully_shard(blk, mp_policy=mp, reshard_after_forward=True)
    fully_shard(model, mp_policy=mp, reshard_after_forward=True)
    model.to_empty(device=dev)
    params = 0
    with torch.no_grad():
        for p in model.parameters():  # DTensors: each rank draws its shard (torchtitan's init)
            torch.nn.init.normal_(p, mean=0.0, std=0.02)
            params += p.numel()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # creates exp_avg, exp_avg_sq (fp32, sharded as the parameters) and the steps
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()

    def slowest(seconds):
        t = torch.tensor(seconds, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    if rank == 0:
        shutil.rmtree(a.dir, ignore_errors=True)
    dist.barrier()
    t0 = time.perf_counter()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=a.dir)
    os.sync()  # ZeroTrain fsyncs every file before a save returns
    save_local = time.perf_counter() - t0
    del msd, osd
    dist.barrier()
    nbytes = folder_bytes(a.dir) if rank == 0 else 0
    dropped = drop_caches() if rank == 0 else False
    dist.barrier()
    t0 = time.perf_counter()
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=a.dir)
    set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    torch.cuda.synchronize()
    load_local = time.perf_counter() - t0
    save_s, load_s = slowest([save_local, load_local])
    dist.barrier()
    if rank == 0:
        shutil.rmtree(a.dir, ignore_errors=True)
        print(json.dumps({"impl": "torch-dcp-fsdp2", "model": a.model, "parameters": params,
                          "world_size": world, "stage": 3, "dtype": "bf16", "offload": False,
                          "bytes": nbytes, "bytes_per_param": nbytes / params,
                          "save_s": save_s, "load_s": load_s,
                          "save_GBps": nbytes / save_s / 1e9, "load_GBps": nbytes / load_s / 1e9,
                          "save_s_rank0": save_local, "load_s_rank0": load_local,
                          "async_stall_s": -1, "async_total_s": -1, "drop_caches": dropped}),
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--model", default="gpt-1.3b")
    ap.add_argument("--offload", action="store_true")
    ap.add_argument("--fsdp2", action="store_true",
                    help="FSDP2 model + AdamW over torchrun's ranks (module docstring)")
    a = ap.parse_args()
    if a.fsdp2:
        if a.offload:
            ap.error("--fsdp2 does not take --offload")
        fsdp2_main(a)
        return
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
    nbytes = folder_bytes(a.dir)
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
