"""PyTorch peer of bench/gpt2_bench.cc for the Llama shapes: transformers' LlamaForCausalLM
(SDPA attention) with the same shape as ZeroTrain's named size, batch, sequence length and
precision (bf16 autocast over fp32 weights, fused AdamW, clipping 1.0), random tokens, each
step timed with CUDA events after warm-up. Prints one JSON line (tokens/s, MFU against the
H100's dense bf16 peak, peak memory). --compile runs the model under torch.compile."""
import argparse
import json
import statistics

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {"llama-1b": (16, 32, 8, 2048, 8192, True), "llama-8b": (32, 32, 8, 4096, 14336, False)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama-1b")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    layers, heads, kv, hidden, inner, tied = SHAPES[a.model]
    cfg = LlamaConfig(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                      hidden_size=hidden, intermediate_size=inner, vocab_size=128256,
                      max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=tied, attn_implementation="sdpa")
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = LlamaForCausalLM(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=True)
    fwd = torch.compile(model) if a.compile else model
    # Model FLOPs per token as zt_bench_gpt2 counts them: 6 per matmul parameter (the head once,
    # tied or not; not the embedding lookup) + 12 L T (heads x head size).
    params = sum(p.numel() for p in model.parameters())
    matmul = params - model.model.embed_tokens.weight.numel()
    if tied:
        matmul += model.model.embed_tokens.weight.numel()
    flops_tok = 6 * matmul + 12 * layers * a.seq * hidden
    times, losses = [], []
    for s in range(a.warmup + a.steps):
        x = torch.randint(0, 128256, (a.batch, a.seq), device="cuda")
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if s == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        stop.record()
        stop.synchronize()
        losses.append(loss.item())
        if s >= a.warmup:
            times.append(start.elapsed_time(stop))
    med = statistics.median(times)
    tps = a.batch * a.seq / (med / 1000)
    print(json.dumps({"impl": "torch.compile" if a.compile else "torch-eager", "model": a.model,
                      "params": params, "batch": a.batch, "seq": a.seq, "dtype": "bf16",
                      "steps": a.steps, "step_ms_median": med, "tokens_per_s": tps,
                      "mfu": flops_tok * tps / 989e12,
                      "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                      "first_loss": losses[0], "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
