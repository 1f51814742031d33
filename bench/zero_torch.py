"""PyTorch peers for ZeroTrain's ZeRO stages on several GPUs (bench/gpt2_bench.cc --stage N under
zt launch): the GPT of bench/gpt2_torch.py trained data-parallel as
  --impl ddp               DistributedDataParallel, bf16 autocast, fp32 weights and gradients
                           (~ZeRO stage 0);
  --impl fsdp2-reshard     FSDP2 (fully_shard on each block, then the root) with
                           reshard_after_forward=True: parameters gathered per block in forward
                           and again in backward (~ZeRO-3);
  --impl fsdp2-noreshard   the same with reshard_after_forward=False: gathered parameters kept
                           from forward to backward (~ZeRO-2);
  --impl fsdp2-offload     fsdp2-reshard with CPUOffloadPolicy(pin_memory=True): the sharded fp32
                           parameters, their gradients and the AdamW state live in pinned host
                           memory and the optimizer steps on the CPU (the peer of ZeroTrain's
                           stage 3 + offload_optimizer cpu; FSDP2 also keeps the parameter shards
                           on the host, as offload_param would, and copies them in per block);
FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32).
--compile adds torch.compile the way torchtitan does for FSDP2: each block compiled alone
(torch.compile(block, fullgraph=True)) before fully_shard wraps it, so FSDP2's hooks run eagerly
around the compiled blocks (the embeddings, final layernorm, head and loss stay eager); with ddp,
torch.compile of the DDP-wrapped model (DDPOptimizer splits the graph at the buckets). The
compilation happens in the warm-up steps, which are not timed (give --warmup >= 3); impl is then
reported as torch-IMPL-compile. Fused AdamW (lr 6e-4,
betas 0.9/0.95, weight decay 0.1; with offload the fused CPU kernel, torch.get_num_threads()
threads: set OMP_NUM_THREADS to the cores per rank, torchrun sets 1 for several ranks), gradient
clipping 1.0, random tokens (a different stream per
rank). Warm-up steps, then timed steps between CUDA events; the median (upper middle element,
as the C++ side takes it). Rank 0 prints one JSON line: tokens_per_s counts every rank's tokens
(micro-batch * seq * world / step time); peak_mem_bytes is rank 0's
torch.cuda.max_memory_allocated over the timed steps.

    torchrun --standalone --nproc_per_node 2 bench/zero_torch.py --impl fsdp2-reshard \
        --model gpt2 --batch 16 --seq 1024 [--compile]

Assumes torchrun's environment and one GPU per rank; FSDP2 needs torch >= 2.4 (public as
torch.distributed.fsdp.fully_shard from 2.6, under torch.distributed._composable.fsdp before)."""
import argparse
import json
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL is loaded

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import GPT, SIZES  # noqa: E402

IMPLS = ("ddp", "fsdp2-reshard", "fsdp2-noreshard", "fsdp2-offload")


def fsdp2_api():
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy,
                                                        fully_shard)
    return fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy


def init_distributed(dev, impl):
    # With CPU offload the gradients are CPU DTensors: clipping all-reduces their norm on the CPU,
    # which needs a Gloo group next to NCCL.
    backend = "cpu:gloo,cuda:nccl" if impl == "fsdp2-offload" else "nccl"
    try:
        dist.init_process_group(backend, device_id=dev)
    except TypeError:  # torch before 2.3 has no device_id
        dist.init_process_group(backend)


def wrap(model, impl, local_rank, compile_=False):
    """The model ready to train and whether its forward needs bf16 autocast."""
    if impl == "ddp":
        ddp = DDP(model, device_ids=[local_rank])
        return (torch.compile(ddp) if compile_ else ddp), True
    fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy = fsdp2_api()
    if compile_:
        # torchtitan's recipe: every block compiled alone, before FSDP2 wraps it. The blocks share
        # one compiled graph (nn modules inlined, parameters as inputs); the limit is raised so
        # that a recompilation per block could never fall back to eager unnoticed.
        cfg = torch._dynamo.config  # recompile_limit: cache_size_limit before torch 2.6
        limit = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        setattr(cfg, limit, max(getattr(cfg, limit), 2 * len(model.blocks)))
        for i, blk in enumerate(model.blocks):
            model.blocks[i] = torch.compile(blk, fullgraph=True)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = impl in ("fsdp2-reshard", "fsdp2-offload")
    extra = {}
    if impl == "fsdp2-offload":
        extra["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    for blk in model.blocks:
        fully_shard(blk, mp_policy=mp, reshard_after_forward=reshard, **extra)
    fully_shard(model, mp_policy=mp, reshard_after_forward=reshard, **extra)
    return model, False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=IMPLS, required=True)
    p.add_argument("--model", default="gpt2", choices=sorted(SIZES))
    p.add_argument("--batch", type=int, default=16, help="micro-batch per GPU")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true",
                   help="torch.compile each block (FSDP2) or the DDP model (module docstring)")
    a = p.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    init_distributed(dev, a.impl)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cuda.matmul.allow_tf32 = True

    torch.manual_seed(1)  # same initial weights on every rank (DDP broadcasts rank 0's anyway)
    n_layer, n_head, c = SIZES[a.model]
    with torch.device(dev):  # initialised on the GPU: a CPU init of 1.3B parameters takes long
        model = GPT(n_layer, n_head, c)
    n_params = sum(t.numel() for t in model.parameters())
    train, autocast = wrap(model, a.impl, local_rank, a.compile)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1000 + rank)

    times, losses = [], []
    torch.cuda.reset_peak_memory_stats()
    for s in range(a.warmup + a.steps):
        x = torch.randint(0, 50257, (a.batch, a.seq + 1), device=dev, generator=gen)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if s == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = train(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        stop.record()
        stop.synchronize()
        losses.append(loss.item())
        if s >= a.warmup:
            times.append(start.elapsed_time(stop))
    med = sorted(times)[len(times) // 2]
    if rank == 0:
        print(json.dumps({"impl": "torch-" + a.impl + ("-compile" if a.compile else ""),
                          "model": a.model, "params": n_params, "compile": a.compile,
                          "batch": a.batch, "seq": a.seq, "world_size": world, "dtype": "bf16",
                          "steps": a.steps, "step_ms_median": med,
                          "tokens_per_s": a.batch * a.seq * world / (med / 1000),
                          "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                          "first_loss": losses[0], "last_loss": losses[-1]}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
