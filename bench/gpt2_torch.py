"""PyTorch peer for bench/gpt2_bench.cc: the same GPT-2 (tied embeddings, pre-norm blocks,
tanh GELU, padded vocabulary), batch, sequence length and precision (bf16 autocast, fp32 master
weights, fused AdamW, clipping 1.0), each step timed with CUDA events after warm-up. Prints one
JSON line. --compile runs it under torch.compile; --kernel-trace N adds the kernel-by-kernel
table of N more steps (bench/torch_timing.py)."""
import argparse
import json
import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_timing import kernel_trace, time_steps

SIZES = {"gpt2": (12, 12, 768), "gpt2-medium": (24, 16, 1024), "gpt2-large": (36, 20, 1280),
         "gpt2-xl": (48, 25, 1600), "gpt-1.3b": (24, 16, 2048), "gpt-2.7b": (32, 32, 2560),
         "gpt-6.7b": (32, 32, 4096), "gpt-13b": (40, 40, 5120), "gpt-20b": (44, 48, 6144),
         "gpt-30b": (48, 56, 7168), "gpt-40b": (48, 64, 8192), "gpt-50b": (60, 64, 8192),
         "gpt-65b": (80, 64, 8192)}


class Block(nn.Module):
    def __init__(self, c, h, n_layer):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)
        for lin in (self.c_proj, self.mlp_proj):
            nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, c, vocab=50304, ctx=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(ctx, c)
        self.blocks = nn.ModuleList(Block(c, n_head, n_layer) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(c)
        # GPT-2's initialisation, as ZeroTrain's model draws it: weights and embeddings N(0, 0.02),
        # biases 0, the residual projections N(0, 0.02 / sqrt(2 n_layer)) (set in Block). PyTorch's
        # defaults (N(0, 1) embeddings, uniform linears) make no difference to the time of a step,
        # but start the loss in the thousands, which hides whether both models learn alike.
        for name, prm in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(prm)
            elif prm.dim() == 2 and not name.endswith(("c_proj.weight", "mlp_proj.weight")):
                nn.init.normal_(prm, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--kernel-trace", type=int, default=0, metavar="N",
                   help="after the timed steps, profile N more and print each kernel's GPU time "
                        "per step (stderr), as zt_bench_gpt2 --kernel-trace does")
    a = p.parse_args()
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    n_layer, n_head, c = SIZES[a.model]
    model = GPT(n_layer, n_head, c).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    step_fn = model
    if a.compile:
        step_fn = torch.compile(model)

    def train_step():
        x = torch.randint(0, 50257, (a.batch, a.seq + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x[:, :-1], x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times, losses = time_steps(train_step, a.warmup, a.steps)
    med = statistics.median(times)
    kernels = kernel_trace(train_step, a.kernel_trace, med) if a.kernel_trace > 0 else []
    print(json.dumps({"impl": "torch.compile" if a.compile else "torch-eager", "model": a.model,
                      "batch": a.batch, "seq": a.seq, "dtype": "bf16", "steps": a.steps,
                      "step_ms_median": med, "tokens_per_s": a.batch * a.seq / (med / 1000),
                      "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                      "first_loss": losses[0], "last_loss": losses[-1],
                      **({"kernels": kernels} if kernels else {})}))


if __name__ == "__main__":
    main()
