"""Peer of bench/generate_bench.cc: transformers' generate with its static KV cache on the same
Llama-shaped model (random weights, bf16), batch, random prompt length and new-token count,
greedy, no stop token. Prints one JSON line: tokens/s over prefill + decode, and the decode step
time measured as (time for N new tokens - time for 1 new token) / (N - 1)."""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

# The same shapes as ZeroTrain's named sizes (src/zt/nn/models/registry.cc).
SHAPES = {"llama-1b": (16, 32, 8, 2048, 8192, True), "llama-8b": (32, 32, 8, 4096, 14336, False)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama-1b")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=256)
    p.add_argument("--cache", default="static", help="static or dynamic (transformers' default)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the forward (mode reduce-overhead: CUDA graphs), as "
                        "transformers documents for the static cache")
    a = p.parse_args()
    layers, heads, kv, hidden, inner, tied = SHAPES[a.model]
    cfg = LlamaConfig(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                      hidden_size=hidden, intermediate_size=inner, vocab_size=128256,
                      max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=tied)
    torch.manual_seed(1)
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    if a.compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    ids = torch.randint(0, 128256, (1, a.prompt), device="cuda").repeat(a.batch, 1)
    mask = torch.ones_like(ids)

    def gen(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n,
                                 min_new_tokens=n, eos_token_id=None, pad_token_id=0,
                                 cache_implementation=a.cache)
        torch.cuda.synchronize()
        return time.perf_counter() - t0, out.shape[1] - a.prompt

    gen(4)  # warm-up (and compilation)
    if a.compile:
        gen(a.new)  # the compiled graphs for every cache length of the measured run
    torch.cuda.reset_peak_memory_stats()
    t1, _ = gen(1)
    tn, n = gen(a.new)
    step = (tn - t1) / max(1, n - 1)
    params = sum(p.numel() for p in model.parameters())
    impl = f"transformers-{a.cache}" + ("-compiled" if a.compile else "")
    print(json.dumps({"impl": impl, "model": a.model, "params": params,
                      "batch": a.batch, "prompt": a.prompt, "new_tokens": n, "dtype": "bf16",
                      "prefill_ms": t1 * 1e3, "decode_step_ms": step * 1e3,
                      "tokens_per_s": n * a.batch / tn, "decode_tokens_per_s": a.batch / step,
                      "weight_GBps": params * 2 / step / 1e9,
                      "peak_mem_bytes": torch.cuda.max_memory_allocated()}))


if __name__ == "__main__":
    main()
