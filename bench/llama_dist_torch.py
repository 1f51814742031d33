"""PyTorch peer of ZeroTrain's ZeRO-3 on Llama shapes over several GPUs (zt_bench_gpt2 --model
llama-8b --stage 3 under zt launch): transformers' LlamaForCausalLM (SDPA attention) of the same
named shape (bench/llama_torch.py's SHAPES and config), sharded by FSDP2, under torchrun.

  fully_shard on every decoder layer, then on the root, reshard_after_forward=True (~ZeRO-3),
  MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): bf16 compute, fp32 gradient
  reduction. Fused AdamW (lr 6e-4, betas 0.9/0.95, weight decay 0.1) over the trainable
  parameters, gradient clipping 1.0, random tokens (another stream per rank), the loss of
  transformers' model (labels = inputs, shifted inside).

Full training (the default): fp32 parameters, sharded (the master copy), their gradients and the
AdamW state sharded with them: 16 bytes a parameter over the ranks, as ZeroTrain's stage 3 keeps.

--lora R: peft LoRA (bench/llama_torch.py's add_lora: r R, alpha --lora-alpha (default 2R), no
dropout, on q, k, v, o, gate, up and down of every block, as ZeroTrain's `--lora-dim R
--lora-alpha A --only-optimize-lora`), applied before FSDP2: the frozen base is bf16 (no fp32
copy), the adapters fp32, both sharded; only the adapters get gradients and AdamW state.

--checkpointing: activation checkpointing per decoder layer (torch's checkpoint_wrapper,
non-reentrant; torchtitan's "full" AC), applied before compilation and sharding as torchtitan
orders them.

--compile: each decoder layer compiled alone (torch.compile) before fully_shard wraps it, the
recipe of bench/zero_torch.py --compile and torchtitan; the embedding, final norm, head and loss
stay eager. fullgraph is off: transformers' layer dispatches attention through keyword arguments,
and a graph break there should cost speed, not the run. The compilation happens in the warm-up
steps, which are not timed (give --warmup >= 3); impl is then torch-fsdp2-compile.

--tp: Megatron-style tensor parallelism over all the ranks instead of FSDP2 (torch's DTensor
parallelize_module on every decoder layer: q, k, v, gate and up ColwiseParallel, o and down
RowwiseParallel; the embedding, norms and head whole on every rank), the peer of ZeroTrain's
`--tensor-parallel-size`. fp32 parameters (the master copy) under autocast to bf16, fused AdamW
over the local shards, the gradient norm summed over the shards (each whole parameter counted
once) and clipped to 1.0; impl is then torch-tp.

Rank 0 prints one JSON line: tokens_per_s counts every rank's tokens (batch * seq * world / the
median step), tokens_per_s_per_gpu divides by the ranks, mfu = model FLOPs per token
(bench/llama_torch.py's flops_per_token, zt_bench_gpt2's count: 6 per trained and 4 per frozen
matmul parameter + 12 L T d; recomputation not counted) x tokens/s per GPU / 989e12 (H100 and
H200 SXM dense bf16 peak), peak_mem_bytes rank 0's torch.cuda.max_memory_allocated over the timed
steps.

    torchrun --standalone --nproc_per_node 2 bench/llama_dist_torch.py --model llama-8b \
        --batch 1 --seq 8192 --checkpointing [--compile] [--lora 16]

Assumes torchrun's environment, one GPU per rank, no network (the model is built from its
config with random weights, never downloaded) and torch >= 2.6 (torch.distributed.fsdp's
fully_shard)."""
import argparse
import json
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL is loaded

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_torch import SHAPES, add_lora, build_model, flops_per_token, llama_config  # noqa: E402


def fsdp2_api():
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


def tensor_parallel(layers, world):
    """Megatron's split of every decoder layer over a 1-D mesh of all the ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    mesh = init_device_mesh("cuda", (world,))
    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel()}
    for layer in layers:
        parallelize_module(layer, mesh, plan)


def clip_tensor_parallel(params, max_norm):
    """clip_grad_norm_ over a mix of sharded DTensors and whole parameters: the shards' squares
    summed over the ranks, the whole parameters' counted once."""
    from torch.distributed.tensor import DTensor
    sharded = torch.zeros((), device=params[0].grad.device, dtype=torch.float32)
    whole = torch.zeros_like(sharded)
    for q in params:
        if q.grad is None:
            continue
        if isinstance(q.grad, DTensor):
            sharded += q.grad.to_local().float().pow(2).sum()
        else:
            whole += q.grad.float().pow(2).sum()
    dist.all_reduce(sharded)
    total = (sharded + whole).sqrt()
    factor = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for q in params:
        if q.grad is not None:
            g = q.grad.to_local() if isinstance(q.grad, DTensor) else q.grad
            g.mul_(factor)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama-8b", choices=sorted(SHAPES))
    p.add_argument("--batch", type=int, default=1, help="micro-batch per GPU")
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder layer")
    p.add_argument("--checkpointing", action="store_true",
                   help="activation checkpointing of every decoder layer")
    p.add_argument("--lora", type=int, default=0, metavar="R",
                   help="rank-R peft LoRA on every linear module of the blocks, base frozen")
    p.add_argument("--lora-alpha", type=float, default=None, help="default 2R")
    p.add_argument("--lora-impl", choices=("auto", "peft", "manual"), default="peft")
    p.add_argument("--tp", action="store_true",
                   help="tensor parallelism (DTensor parallelize_module) instead of FSDP2")
    a = p.parse_args()
    if a.tp and (a.lora or a.compile):
        p.error("--tp runs full training, eager")
    alpha = a.lora_alpha if a.lora_alpha is not None else 2.0 * a.lora
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cuda.matmul.allow_tf32 = True

    # The same initial weights on every rank (one seed); each rank builds the whole model on its
    # GPU (32 GB at 8B in fp32) and fully_shard keeps its shard of each parameter.
    torch.manual_seed(1)
    cfg = llama_config(a.model)
    lm = build_model(cfg, torch.bfloat16 if a.lora else torch.float32, dev)
    lm.train()
    lora_impl = None
    if a.lora:
        # add_lora returns peft's wrapper; its LoRA layers sit inside `lm`, which is what runs:
        # peft's LoraModel calls the model's forward() directly, which would skip the hooks by
        # which FSDP2's root gathers its own parameters.
        _, lora_impl = add_lora(lm, a.lora, alpha, a.lora_impl)
        for prm in lm.parameters():  # the adapters' master weights and Adam state: fp32
            if prm.requires_grad and prm.dtype != torch.float32:
                prm.data = prm.data.float()
    n_params = sum(q.numel() for q in lm.parameters())
    n_train = sum(q.numel() for q in lm.parameters() if q.requires_grad)
    flops_tok = flops_per_token(lm, a.seq)  # before sharding: whole parameters

    layers = lm.model.layers
    if a.checkpointing:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl, checkpoint_wrapper)
        for i in range(len(layers)):
            layers[i] = checkpoint_wrapper(layers[i], checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    if a.compile:
        # The layers share one compiled graph (parameters as inputs); the limit is raised so that
        # a recompilation per layer could never fall back to eager unnoticed.
        dcfg = torch._dynamo.config  # recompile_limit: cache_size_limit before torch 2.6
        limit = "recompile_limit" if hasattr(dcfg, "recompile_limit") else "cache_size_limit"
        setattr(dcfg, limit, max(getattr(dcfg, limit), 2 * len(layers)))
        for i in range(len(layers)):
            layers[i] = torch.compile(layers[i])
    if a.tp:
        tensor_parallel(layers, world)
    else:
        fully_shard, MixedPrecisionPolicy = fsdp2_api()
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in layers:
            fully_shard(layer, mp_policy=mp, reshard_after_forward=True)
        fully_shard(lm, mp_policy=mp, reshard_after_forward=True)
    torch.cuda.empty_cache()  # the unsharded copies built above are free now
    # The sharded parameters (DTensors) that fully_shard put in place of the originals.
    trainable = [q for q in lm.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1000 + rank)

    times, losses = [], []
    for s in range(a.warmup + a.steps):
        x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device=dev, generator=gen)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if s == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        start.record()
        if a.tp:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = lm(input_ids=x, labels=x).loss
            loss.backward()
            clip_tensor_parallel(trainable, 1.0)
        else:
            loss = lm(input_ids=x, labels=x).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        stop.record()
        stop.synchronize()
        losses.append(loss.item())
        if s >= a.warmup:
            times.append(start.elapsed_time(stop))
    med = sorted(times)[len(times) // 2]  # the upper middle element, as zt_bench_gpt2 takes it
    tps = a.batch * a.seq * world / (med / 1000)
    if rank == 0:
        impl = "torch-tp" if a.tp else "torch-fsdp2" + ("-compile" if a.compile else "")
        print(json.dumps({"impl": impl, "tensor_parallel_size": world if a.tp else 1,
                          "model": a.model, "params": n_params, "compile": a.compile,
                          "batch": a.batch, "seq": a.seq, "world_size": world, "dtype": "bf16",
                          "stage": 0 if a.tp else 3, "steps": a.steps, "step_ms_median": med,
                          "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / world,
                          "mfu": flops_tok * tps / world / 989e12,
                          "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                          "first_loss": losses[0], "last_loss": losses[-1],
                          "checkpointing": a.checkpointing, "lora_dim": a.lora,
                          "lora_alpha": alpha if a.lora else 0.0, "lora_impl": lora_impl,
                          "only_optimize_lora": bool(a.lora), "trainable_params": n_train,
                          "base_weights_dtype": "bf16" if a.lora else "fp32"}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
