"""PyTorch peer for bench/comm_bench.cc: all_reduce, reduce_scatter and all_gather of bf16 buffers
from 1 MiB to 1 GiB (powers of 4) with torch.distributed over NCCL, timed the same way (warm-up
calls, then timed calls on the current stream, each between two CUDA events; the median, taken
as the upper middle element like the C++ side) and reported with nccl-tests' bus-bandwidth
formulas (all_reduce 2(n-1)/n * S/t; reduce_scatter and all_gather (n-1)/n * S/t, S the full
buffer). Rank 0 prints one JSON line per (op, size) with "impl": "torch".

    torchrun --standalone --nproc_per_node 2 bench/comm_torch.py [--min-bytes N] [--max-bytes N]

Assumes torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*), one GPU per rank.
NVLink SHARP (NVLS) stays off, as on the ZeroTrain side (see scripts/gpu_dist_check.sh)."""
import argparse
import json
import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL is loaded

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def busbw_factor(op, n):
    f = (n - 1) / n
    return 2 * f if op == "all_reduce" else f


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    try:
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:  # torch before 2.3 has no device_id
        dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    elem = 2  # bf16
    max_numel = a.max_bytes // elem // n * n
    full = torch.zeros(max_numel, dtype=torch.bfloat16, device=dev)
    part = torch.zeros(max_numel // n, dtype=torch.bfloat16, device=dev)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(a.iters)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(a.iters)]
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        size = a.min_bytes
        while size <= a.max_bytes:
            numel = size // elem // n * n
            buf, shard = full[:numel], part[:numel // n]
            if op == "all_reduce":
                def issue():
                    dist.all_reduce(buf)
            elif op == "reduce_scatter":
                def issue():
                    dist.reduce_scatter_tensor(shard, buf)
            else:
                def issue():
                    dist.all_gather_into_tensor(buf, shard)
            for _ in range(a.warmup):
                issue()
            torch.cuda.synchronize()
            # Synchronous-mode collectives make the current stream wait for NCCL's stream, so
            # events on the current stream bracket each collective.
            for i in range(a.iters):
                starts[i].record()
                issue()
                stops[i].record()
            torch.cuda.synchronize()
            us = sorted(1000.0 * s.elapsed_time(e) for s, e in zip(starts, stops))
            med = us[len(us) // 2]
            nbytes = numel * elem
            if rank == 0:
                print(json.dumps({"impl": "torch", "op": op, "bytes": nbytes, "time_us": med,
                                  "busbw_gbps": busbw_factor(op, n) * nbytes / (med * 1e-6) / 1e9,
                                  "world_size": n, "dtype": "bf16", "iters": a.iters}),
                      flush=True)
            size *= 4
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
