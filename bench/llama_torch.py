"""PyTorch peer of bench/gpt2_bench.cc for the Llama shapes: transformers' LlamaForCausalLM
(SDPA attention) with the same shape as ZeroTrain's named size, batch, sequence length and
precision, random tokens, fused AdamW, clipping 1.0, each step timed with CUDA events after
warm-up. Prints one JSON line (tokens/s, MFU against the H100's dense bf16 peak, peak memory).
--compile runs the model under torch.compile.

Full fine-tuning (the default): fp32 weights (the master copy), bf16 autocast, fused AdamW over
every parameter; ZeroTrain's bf16 training keeps the same state (fp32 master + Adam, a bf16
compute copy).

--lora R: PEFT LoRA (LoraConfig(r=R, lora_alpha=--lora-alpha, default 2R, lora_dropout=0) on
q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and down_proj of every block, as ZeroTrain's
`--lora-dim R --lora-alpha A --only-optimize-lora` puts them), the base frozen. Precision, made
comparable to ZeroTrain's (which keeps a bf16 compute copy of each frozen unit and fp32 master
weights and AdamW state for the adapters alone): the model is built directly on the GPU in
bf16 (the frozen base weights are bf16 only: fp32 would be 32 GB at 8B), the adapters are fp32
(peft's autocast_adapter_dtype, checked here), the step runs under bf16 autocast, and fused AdamW
and clipping cover the trainable (adapter) parameters only. If peft is missing, an equivalent
plain-PyTorch LoRA layer (base(x) + B(A(x)) * alpha / R, A kaiming-uniform, B zero) stands in,
and the JSON line says "lora_impl": "manual" instead of "peft" (--lora-impl picks one).

--checkpointing: activation checkpointing, transformers' gradient_checkpointing_enable with
use_reentrant=False (and enable_input_require_grads() with LoRA, whose embedding output would
otherwise not require a gradient).

MFU counts model FLOPs as zt_bench_gpt2 does: 6 per trainable matmul parameter, 4 per frozen one
(forward and input gradient; no weight gradient), the head once, tied or not, the embedding
lookup not at all, plus 12 L T (heads x head size) for attention; recomputation is not counted."""
import argparse
import json
import math
import statistics

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from torch_timing import kernel_trace, time_steps

# name: (layers, heads, KV heads, hidden, intermediate, tied head), as src/zt/nn/models/registry.cc.
SHAPES = {"llama-tiny": (4, 4, 2, 128, 352, True), "llama-1b": (16, 32, 8, 2048, 8192, True),
          "llama-8b": (32, 32, 8, 4096, 14336, False),
          "llama-70b": (80, 64, 8, 8192, 28672, False)}
LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class ManualLora(torch.nn.Module):
    """PEFT's LoRA Linear without peft: base(x) + lora_B(lora_A(x)) * scale."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        dev = base.weight.device
        f32 = torch.float32
        self.lora_A = torch.nn.Linear(base.in_features, r, bias=False, device=dev, dtype=f32)
        self.lora_B = torch.nn.Linear(r, base.out_features, bias=False, device=dev, dtype=f32)
        torch.nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        torch.nn.init.zeros_(self.lora_B.weight)
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scale


def add_lora(model, r, alpha, impl):
    """Returns (the model to run, "peft" or "manual"); the base is frozen, the adapters fp32."""
    try:
        if impl == "manual":
            raise ImportError
        from peft import LoraConfig, get_peft_model
    except ImportError:
        if impl == "peft":
            raise
        for p in model.parameters():
            p.requires_grad_(False)
        for layer in model.model.layers:
            for parent in (layer.self_attn, layer.mlp):
                for name in LORA_MODULES:
                    if hasattr(parent, name):
                        setattr(parent, name, ManualLora(getattr(parent, name), r, alpha))
        return model, "manual"
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=LORA_MODULES,
                     bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, cfg), "peft"


def llama_config(name):
    """transformers' LlamaConfig of a named shape: Llama 3's vocabulary (llama-tiny: bytes),
    rope theta 500000, SDPA attention, no KV cache."""
    layers, heads, kv, hidden, inner, tied = SHAPES[name]
    return LlamaConfig(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                       hidden_size=hidden, intermediate_size=inner,
                       vocab_size=257 if name == "llama-tiny" else 128256,
                       max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                       tie_word_embeddings=tied, attn_implementation="sdpa", use_cache=False)


def build_model(cfg, dtype, device):
    """LlamaForCausalLM with random weights made directly on `device`, parameters in `dtype`
    (buffers such as RoPE's inv_freq stay fp32)."""
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    for prm in model.parameters():
        if prm.dtype != dtype:
            prm.data = prm.data.to(dtype)
    return model


def flops_per_token(model, seq):
    """Model FLOPs per token as zt_bench_gpt2 counts them: 6 per trainable matmul parameter, 4 per
    frozen one (the head once, tied or not; not the embedding lookup) + 12 L T (heads x head size).
    Call it before FSDP2 shards the model."""
    cfg = model.config
    emb = model.get_input_embeddings().weight
    params = sum(q.numel() for q in model.parameters())
    n_train = sum(q.numel() for q in model.parameters() if q.requires_grad)
    f_emb = 6 if emb.requires_grad else 4
    matmul_flops = 6 * n_train + 4 * (params - n_train) - f_emb * emb.numel()
    if cfg.tie_word_embeddings:
        matmul_flops += f_emb * emb.numel()
    return matmul_flops + 12 * cfg.num_hidden_layers * seq * cfg.hidden_size


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="llama-1b")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--lora", type=int, default=0, metavar="R",
                   help="rank-R LoRA adapters on every linear module of the blocks, base frozen")
    p.add_argument("--lora-alpha", type=float, default=None, help="default 2R")
    p.add_argument("--lora-impl", choices=("auto", "peft", "manual"), default="auto",
                   help="auto: peft if it imports, else the plain-PyTorch layer")
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    p.add_argument("--kernel-trace", type=int, default=0, metavar="N",
                   help="after the timed steps, profile N more and print each kernel's GPU time "
                        "per step (stderr), as zt_bench_gpt2 --kernel-trace does")
    a = p.parse_args()
    alpha = a.lora_alpha if a.lora_alpha is not None else 2.0 * a.lora
    cfg = llama_config(a.model)
    vocab = cfg.vocab_size
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    # Built on the GPU: bf16 with LoRA (the frozen base keeps no fp32 copy), else fp32 weights.
    base_dtype = torch.bfloat16 if a.lora else torch.float32
    model = build_model(cfg, base_dtype, "cuda")
    model.train()
    base = model
    if a.checkpointing:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora_impl = None
    if a.lora:
        if a.checkpointing:  # (hook on the embedding: its output requires a gradient)
            if hasattr(base, "enable_input_require_grads"):
                base.enable_input_require_grads()
            else:
                base.get_input_embeddings().register_forward_hook(
                    lambda mod, inp, out: out.requires_grad_(True))
        model, lora_impl = add_lora(base, a.lora, alpha, a.lora_impl)
        for prm in model.parameters():  # the adapters' master weights and Adam state: fp32
            if prm.requires_grad and prm.dtype != torch.float32:
                prm.data = prm.data.float()
    trainable = [q for q in model.parameters() if q.requires_grad]
    if a.lora:
        assert trainable and all(q.dtype == torch.float32 for q in trainable)
        assert all(q.dtype == torch.bfloat16 for q in model.parameters() if not q.requires_grad)
    opt = torch.optim.AdamW(trainable, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    fwd = torch.compile(model) if a.compile else model
    params = sum(q.numel() for q in model.parameters())
    n_train = sum(q.numel() for q in trainable)
    flops_tok = flops_per_token(base, a.seq)

    def train_step():
        x = torch.randint(0, vocab, (a.batch, a.seq), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times, losses = time_steps(train_step, a.warmup, a.steps)
    med = statistics.median(times)
    kernels = []
    if a.kernel_trace > 0:
        kernels = kernel_trace(train_step, a.kernel_trace, med)
    tps = a.batch * a.seq / (med / 1000)
    print(json.dumps({"impl": "torch.compile" if a.compile else "torch-eager", "model": a.model,
                      "params": params, "batch": a.batch, "seq": a.seq, "dtype": "bf16",
                      "steps": a.steps, "step_ms_median": med, "tokens_per_s": tps,
                      "mfu": flops_tok * tps / 989e12,
                      "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                      "first_loss": losses[0], "last_loss": losses[-1],
                      "checkpointing": a.checkpointing, "lora_dim": a.lora,
                      "lora_alpha": alpha if a.lora else 0.0, "lora_impl": lora_impl,
                      "only_optimize_lora": bool(a.lora), "trainable_params": n_train,
                      "base_weights_dtype": "bf16" if a.lora else "fp32",
                      **({"kernels": kernels} if kernels else {})}))


if __name__ == "__main__":
    main()
