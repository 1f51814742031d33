"""PyTorch peer of `zt train --task ppo` (scripts/gpu_check.sh section rlhf_bench): DeepSpeed-Chat's
step-3 round written out in PyTorch + transformers, the loop a user would write without
DeepSpeed: a Llama actor (LlamaForCausalLM) and critic (LlamaModel + a linear value head) trained
with fused AdamW under bf16 autocast (fp32 weights), a frozen bf16 reference and reward model,
greedy generation with transformers' generate (KV cache), then the PPO losses of
dschat/rlhf/ppo_trainer.py and one actor and one critic step. The shape is ZeroTrain's named
size (bench/llama_torch.py's SHAPES), the prompts random token ids of one length, every answer
--answer tokens long (min_new_tokens: no early end), as zt's named sizes generate without an
end-of-sequence id. Prints one JSON line: the median round's generation and training time,
tokens/s of each, and the peak memory. Under torchrun (WORLD_SIZE > 1) the actor and critic are
wrapped in DistributedDataParallel (NCCL) and every rank answers --batch prompts a round, as a
DDP user would write it; rank 0's figures are printed (per GPU)."""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel

SHAPES = {"llama-tiny": (4, 4, 2, 128, 352, True, 257, 256),
          "llama-1b": (16, 32, 8, 2048, 8192, True, 128256, 8192)}


def config(name):
    L, H, KV, C, I, tied, V, P = SHAPES[name]
    return LlamaConfig(num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
                       hidden_size=C, intermediate_size=I, vocab_size=V, max_position_embeddings=P,
                       tie_word_embeddings=tied, rope_theta=500000.0, rms_norm_eps=1e-5,
                       attn_implementation="sdpa")


class Critic(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.model = LlamaModel(cfg)
        self.score = torch.nn.Linear(cfg.hidden_size, 1, bias=False)

    def forward(self, ids):
        return self.score(self.model(input_ids=ids).last_hidden_state).squeeze(-1)


def gather_log_probs(logits, ids):
    return torch.gather(F.log_softmax(logits.float(), dim=-1), 2, ids.unsqueeze(-1)).squeeze(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-1b")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--answer", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    if world > 1:
        torch.distributed.init_process_group("nccl", device_id=dev)
    torch.manual_seed(0)
    cfg = config(args.model)
    actor = LlamaForCausalLM(cfg).to(dev)
    critic = Critic(cfg).to(dev)
    actor_gen = actor  # generate() runs on the module itself (no DDP hooks)
    ref = LlamaForCausalLM(cfg).to(dev, torch.bfloat16).eval()
    ref.load_state_dict(actor.state_dict())
    reward = Critic(cfg).to(dev, torch.bfloat16).eval()
    reward.load_state_dict(critic.state_dict())
    if world > 1:
        actor = torch.nn.parallel.DistributedDataParallel(actor, device_ids=[dev.index])
        critic = torch.nn.parallel.DistributedDataParallel(critic, device_ids=[dev.index])
    a_opt = torch.optim.AdamW(actor.parameters(), lr=1e-5, fused=True)
    c_opt = torch.optim.AdamW(critic.parameters(), lr=5e-6, fused=True)
    kl_ctl, clip_reward, cliprange, cliprange_value, gamma, lam = 0.1, 5.0, 0.2, 0.2, 1.0, 0.95
    gen_times, train_times = [], []
    B, P, A = args.batch, args.prompt, args.answer
    for r in range(args.warmup + args.rounds):
        prompts = torch.randint(0, cfg.vocab_size, (B, P), device=dev)  # (the same seed: any rows)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            actor.eval()
            seq = actor_gen.generate(prompts, max_new_tokens=A, min_new_tokens=A, do_sample=False,
                                 pad_token_id=0, eos_token_id=None, use_cache=True)
            actor.train()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            logp = gather_log_probs(actor(seq).logits[:, :-1], seq[:, 1:])
            ref_logp = gather_log_probs(ref(seq).logits[:, :-1], seq[:, 1:])
            values = critic(seq)[:, :-1].float()
            score = reward(seq)[:, -1].float()
        start = P - 1
        mask = torch.ones_like(logp)
        rewards = -kl_ctl * (logp - ref_logp)
        rewards[:, -1] += score.clamp(-clip_reward, clip_reward)
        adv, last = [], 0
        for t in reversed(range(start, logp.shape[1])):
            nv = values[:, t + 1] if t < logp.shape[1] - 1 else 0.0
            delta = rewards[:, t] + gamma * nv - values[:, t]
            last = delta + gamma * lam * last
            adv.append(last)
        adv = torch.stack(adv[::-1], dim=1)
        ret = adv + values[:, start:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            new_logp = gather_log_probs(actor(seq).logits[:, :-1], seq[:, 1:])[:, start:]
            ratio = torch.exp(new_logp - logp[:, start:])
            pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cliprange, 1 + cliprange))
            a_loss = (pg * mask[:, start:]).sum() / mask[:, start:].sum()
        a_loss.backward()
        torch.nn.utils.clip_grad_norm_(actor.parameters(), 1.0)
        a_opt.step()
        a_opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            v = critic(seq)[:, :-1].float()[:, start:]
            old = values[:, start:]
            vc = torch.max(torch.min(v, old + cliprange_value), old - cliprange_value)
            c_loss = 0.5 * (torch.max((v - ret) ** 2, (vc - ret) ** 2) * mask[:, start:]).sum() / mask[:, start:].sum()
        c_loss.backward()
        torch.nn.utils.clip_grad_norm_(critic.parameters(), 1.0)
        c_opt.step()
        c_opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if r >= args.warmup:
            gen_times.append(t1 - t0)
            train_times.append(t2 - t1)
    g, t = statistics.median(gen_times), statistics.median(train_times)
    T = P + A
    if world > 1:
        torch.distributed.destroy_process_group()
    if rank != 0:
        return
    print(json.dumps({"impl": "torch-transformers" + ("-ddp" if world > 1 else ""),
                      "gpus": world, "model": args.model, "batch": B, "prompt": P,
                      "answer": A, "generate_s": g, "train_s": t, "round_s": g + t,
                      "generate_tokens_per_s": B * A / g,
                      "train_tokens_per_s": 2 * B * T / t,
                      "peak_mem_bytes": torch.cuda.max_memory_allocated()}))


if __name__ == "__main__":
    main()
