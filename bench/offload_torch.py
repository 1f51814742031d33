"""PyTorch peer of ZeroTrain's ZeRO-Infinity on one GPU (zt_bench_gpt2 --stage 3 with
offload_optimizer and offload_param, run by scripts/gpu_check.sh section `infinity`): FSDP2 on a
single GPU with CPUOffloadPolicy(pin_memory=True), the model too large for the GPU's memory with
its optimizer state.

What FSDP2 keeps where with CPU offload: the sharded fp32 parameters (the master copy), their
fp32 gradients and the AdamW state in host memory (16 bytes a parameter; the parameters and
gradients page-locked), stepped by PyTorch's fused CPU AdamW; each block's parameters are copied
to the GPU and cast to bf16 for its forward and again for its backward
(MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)). That is the place of ZeroTrain's
offload_optimizer cpu + offload_param cpu (12 bytes a parameter of master and state on the host,
the bf16 chunk 2 more), the row its goal compares with.

Models: a GPT of bench/gpt2_torch.py (the named sizes of its SIZES, context as ZeroTrain's named
size: 2048 from gpt-2.7b up), a Llama of bench/llama_torch.py (SHAPES, transformers'
LlamaForCausalLM), or a folder with a config.json (model_type gpt2: n_layer, n_head, n_embd,
n_positions, vocab_size padded to a multiple of 128 as ZeroTrain pads it; model_type llama:
transformers' LlamaConfig), the form in which gpu_check.sh writes the shapes between the named
sizes. Random weights, built on the GPU in fp32 (27 GB at 6.7B) and moved to pinned host memory
by fully_shard, so no host-side initialisation of billions of values is timed or waited for.

Activation checkpointing (--checkpointing) wraps every block in torch's checkpoint_wrapper
(non-reentrant) before fully_shard, as bench/llama_dist_torch.py does. Fused AdamW (lr 6e-4,
betas 0.9/0.95, weight decay 0.1) on the CPU with torch.get_num_threads() threads, gradient
clipping 1.0, random tokens.

One process: without torchrun's environment it makes its own group of one rank (NCCL for the
GPU collectives, Gloo for the CPU gradients' norm, as bench/zero_torch.py's offload does). Under
torchrun each rank takes the GPU of its LOCAL_RANK, draws its own random tokens, and rank 0
prints; tokens_per_s counts every rank's tokens, host_peak_rss_bytes is rank 0's process. Each
step is timed on the wall clock between CUDA synchronizations (the host's AdamW is most of the
step, outside any CUDA stream), split into forward + backward and the rest (clipping, AdamW,
zero_grad); warm-up steps first, then the upper middle of the timed steps (as zt_bench_gpt2 takes
the median). Prints one JSON line: tokens_per_s, step_ms_median, fwd_bwd_ms_median,
opt_ms_median, mfu (model FLOPs as zt_bench_gpt2 counts them, against the H100's dense bf16
peak), peak_mem_bytes (torch.cuda.max_memory_allocated over the timed steps) and
host_peak_rss_bytes (the process's peak resident memory, pinned pages included).

    python3 bench/offload_torch.py --model gpt-6.7b --batch 4 --seq 1024 --checkpointing

Assumes torch >= 2.6 (torch.distributed.fsdp.fully_shard; the older private path is tried too)
and, for Llama shapes, transformers. No network: nothing is downloaded."""
import argparse
import json
import os
import resource
import socket
import sys
import time
from typing import NamedTuple

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL is loaded

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import GPT, SIZES  # noqa: E402

# ZeroTrain's named GPT sizes keep GPT-2's 1024 positions up to gpt-1.3b, 2048 from gpt-2.7b up
# (src/zt/nn/models/gpt2.cc): the position table is part of the parameter count compared.
CTX_1024 = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt-1.3b")


def fsdp2_api():
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy,
                                                        fully_shard)
    return fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy


def init_group(dev):
    """A process group of this one rank unless torchrun made the environment; Gloo beside NCCL
    because the offloaded gradients are CPU tensors whose norm clipping reduces on the CPU."""
    backend = "cpu:gloo,cuda:nccl"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend, device_id=dev)
        return
    with socket.socket() as s:  # a free local port for the store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1, device_id=dev)


def padded_vocab(v):
    m = 64 if v < 4096 else 128
    return (v + m - 1) // m * m


class Built(NamedTuple):
    model: torch.nn.Module
    blocks: torch.nn.ModuleList  # what checkpoint_wrapper and fully_shard wrap one by one
    llama: bool                  # transformers' forward (input_ids, labels) or the GPT's
    vocab: int                   # the random tokens' range
    matmul_flops: int            # model FLOPs per token without the attention term
    n_layer: int
    attn_width: int              # heads x head size


def build(name, dev):
    cfg_file = os.path.join(name, "config.json")
    if os.path.isfile(cfg_file):
        with open(cfg_file) as f:
            j = json.load(f)
        kind = j.get("model_type")
        if kind == "gpt2":
            shape = (j["n_layer"], j["n_head"], j["n_embd"])
            vocab, ctx = j.get("vocab_size", 50257), j.get("n_positions", 1024)
            return build_gpt(shape, vocab, ctx, dev)
        if kind == "llama":
            from transformers import LlamaConfig
            j = {k: v for k, v in j.items()
                 if k not in ("architectures", "model_type", "use_cache", "attn_implementation")}
            cfg = LlamaConfig(**j, attn_implementation="sdpa", use_cache=False)
            return build_llama(cfg, dev)
        sys.exit(f"offload_torch.py: {cfg_file}: model_type {kind!r} is not gpt2 or llama")
    if name in SIZES:
        return build_gpt(SIZES[name], 50257, 1024 if name in CTX_1024 else 2048, dev)
    if name.startswith("llama"):
        from llama_torch import llama_config
        return build_llama(llama_config(name), dev)
    sys.exit(f"offload_torch.py: unknown model {name}; a GPT size ({', '.join(SIZES)}), a Llama "
             "shape of bench/llama_torch.py, or a folder with a config.json")


def build_gpt(shape, vocab, ctx, dev):
    n_layer, n_head, c = shape
    with torch.device(dev):
        model = GPT(n_layer, n_head, c, vocab=padded_vocab(vocab), ctx=ctx)
    # zt_bench_gpt2's count: 6 per parameter outside the embedding tables, the tied head once.
    params = sum(q.numel() for q in model.parameters())
    emb = model.wte.weight.numel() + model.wpe.weight.numel()
    matmul = 6 * (params - emb) + 6 * model.wte.weight.numel()
    return Built(model, model.blocks, False, vocab, matmul, n_layer, c)


def build_llama(cfg, dev):
    from llama_torch import build_model, flops_per_token
    model = build_model(cfg, torch.float32, dev)
    model.train()
    attn = cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads)
    matmul = flops_per_token(model, 0)  # the seq term is added by the caller
    return Built(model, model.model.layers, True, cfg.vocab_size, matmul,
                 cfg.num_hidden_layers, attn)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt-6.7b",
                   help="GPT size, Llama shape, or a folder with a config.json")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--checkpointing", action="store_true",
                   help="activation checkpointing of every block")
    p.add_argument("--no-pin-memory", action="store_true",
                   help="CPUOffloadPolicy(pin_memory=False)")
    a = p.parse_args()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    init_group(dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(1)
    t_build = time.perf_counter()
    b = build(a.model, dev)
    model, blocks = b.model, b.blocks
    n_params = sum(q.numel() for q in model.parameters())
    flops_tok = b.matmul_flops + 12 * b.n_layer * a.seq * b.attn_width
    if a.checkpointing:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl, checkpoint_wrapper)
        for i in range(len(blocks)):
            blocks[i] = checkpoint_wrapper(blocks[i], checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy = fsdp2_api()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    off = CPUOffloadPolicy(pin_memory=not a.no_pin_memory)
    for blk in blocks:
        fully_shard(blk, mp_policy=mp, reshard_after_forward=True, offload_policy=off)
    fully_shard(model, mp_policy=mp, reshard_after_forward=True, offload_policy=off)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the fp32 model built on the GPU now lives on the host
    params = list(model.parameters())  # the sharded DTensors fully_shard put in place
    on_host = all(q.device.type == "cpu" for q in params)
    opt = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    build_s = time.perf_counter() - t_build
    if rank == 0:
        print(f"{a.model}: {n_params / 1e9:.2f}B parameters sharded to host memory over {world} "
              f"rank(s) in {build_s:.0f} s", file=sys.stderr, flush=True)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1000 + rank)

    steps, fb, rest, losses = [], [], [], []
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if b.llama:
            x = torch.randint(0, b.vocab, (a.batch, a.seq), device=dev, generator=gen)
            loss = model(input_ids=x, labels=x).loss
        else:
            x = torch.randint(0, b.vocab, (a.batch, a.seq + 1), device=dev, generator=gen)
            loss = model(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        losses.append(loss.item())
        if rank == 0:
            print(f"step {s}: loss {losses[-1]:.4f}, {1000 * (t2 - t0):.0f} ms "
                  f"(forward + backward {1000 * (t1 - t0):.0f} ms)", file=sys.stderr, flush=True)
        if s >= a.warmup:
            steps.append(1000 * (t2 - t0))
            fb.append(1000 * (t1 - t0))
            rest.append(1000 * (t2 - t1))
    mid = lambda v: sorted(v)[len(v) // 2]  # noqa: E731 (upper middle, as zt_bench_gpt2)
    med = mid(steps)
    tps = a.batch * a.seq * world / (med / 1000)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # (Linux: KiB)
    if rank != 0:
        dist.destroy_process_group()
        return
    print(json.dumps({"impl": "torch-fsdp2-cpuoffload", "model": a.model, "params": n_params,
                      "batch": a.batch, "seq": a.seq, "dtype": "bf16", "world_size": world,
                      "stage": 3, "checkpointing": a.checkpointing,
                      "pin_memory": not a.no_pin_memory, "sharded_params_on_host": on_host,
                      "warmup": a.warmup, "steps": a.steps, "step_ms_median": med,
                      "fwd_bwd_ms_median": mid(fb), "opt_ms_median": mid(rest),
                      "tokens_per_s": tps, "mfu": flops_tok * tps / (989e12 * world),
                      "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                      "host_peak_rss_bytes": rss,
                      "build_s": build_s, "cpu_threads": torch.get_num_threads(),
                      "torch": torch.__version__,
                      "first_loss": losses[0], "last_loss": losses[-1]}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
