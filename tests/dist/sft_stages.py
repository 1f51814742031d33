#!/usr/bin/env python3
"""`zt train --task sft` under every ZeRO stage, through the real launcher (zt launch, CPU ranks,
Gloo): llama-tiny fine-tuned for 6 steps on prompt/response JSON Lines (byte tokenizer) at stages
0, 1, 2 and 3, on 2 ranks and on one process (global batch 16 rows either way).

Oracle: the single-process run of the same stage. The loss of a micro-batch is the mean over its
counted targets (the response and its eos), so ranks agree with one process when every row
counts the same number of targets: every response here is 4 letters (5 counted targets with the
eos) while the prompts vary in length (so the padding and the prompt masks differ from row to
row). SGD with momentum and weight decay; the loss at every step within 1e-5 relative, the final
parameters within 1e-5 relative in norm. The runs must also learn (the loss falls). The same
again with LoRA adapters on q_proj, v_proj and down_proj and every other weight frozen
(--only-optimize-lora): the frozen units have no gradient or optimizer state at any stage, the
adapters are sharded, gathered and reduced as units of their own.

Usage: sft_stages.py ZT_BINARY SOURCE_DIR
"""
import array
import json
import math
import os
import random
import subprocess
import sys
import tempfile

from _ports import next_port

ZT = sys.argv[1]
STEPS, BATCH, SEQ = 6, 16, 24
TMP = tempfile.mkdtemp(prefix="zt_sft_")
ENV = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "cache"), ZT_COMM_TIMEOUT_S="120",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
port = [0]
failures, passed = [], 0

rng = random.Random(3)
DATA = os.path.join(TMP, "train.jsonl")
with open(DATA, "w") as f:
    for _ in range(STEPS * BATCH):
        w = "".join(rng.choice("abcdefgh") for _ in range(4))
        pad = "x" * rng.randint(0, 6)
        f.write(json.dumps({"prompt": f"{pad}copy {w} =", "response": f"{w}"}) + "\n")


LORA = ["--lora-dim", "4", "--lora-alpha", "8", "--lora-modules", "q_proj,v_proj,down_proj",
        "--only-optimize-lora"]


def run(world, stage, lora=False):
    name = f"w{world}_s{stage}" + ("_lora" if lora else "")
    cfg = os.path.join(TMP, name + ".json")
    with open(cfg, "w") as f:
        json.dump({"train_batch_size": BATCH, "gradient_accumulation_steps": 1,
                   "zero_allow_untested_optimizer": True,
                   "optimizer": {"type": "SGD",
                                 "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}},
                   "zero_optimization": {"stage": stage, "reduce_bucket_size": 50000,
                                         "stage3_param_persistence_threshold": 5000}}, f)
    metrics, params = os.path.join(TMP, name + ".jsonl"), os.path.join(TMP, name + ".bin")
    train = [ZT, "train", "--task", "sft", "--config", cfg, "--model", "llama-tiny", "--data",
             DATA, "--device", "cpu", "--steps", str(STEPS), "--seq-len", str(SEQ),
             "--sample-tokens", "0", "--order", "sequential", "--metrics-out", metrics,
             "--dump-params", params] + (LORA if lora else [])
    cmd = train
    if world > 1:
        port[0] = next_port()
        cmd = [ZT, "launch", "--num_procs", str(world), "--master_port", str(port[0])] + train
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{name} exited {p.returncode}:\n{p.stderr[-2000:]}")
    recs = [json.loads(l) for l in open(metrics)]
    if (recs[0].get("world_size"), recs[0].get("zero_stage")) != (world, stage):
        raise RuntimeError(f"{name} ran as world {recs[0].get('world_size')} stage "
                           f"{recs[0].get('zero_stage')}")
    a = array.array("f")
    a.frombytes(open(params, "rb").read())
    return [r for r in recs[1:] if "loss" in r], a


def check(name, cond, detail):
    global passed
    if cond:
        passed += 1
        print(f"ok: {name}", flush=True)
    else:
        failures.append(name)
        print(f"FAIL: {name}: {detail}", flush=True)


for lora in (False, True):
    for stage in (0, 1, 2, 3):
        what = f"stage {stage}" + (" LoRA" if lora else "")
        try:
            ref, ref_p = run(1, stage, lora)
            got, got_p = run(2, stage, lora)
        except Exception as e:
            check(f"{what} runs", False, str(e))
            continue
        check(f"{what}: the single process learns",
              ref[-1]["loss"] < ref[0]["loss"] - (0.01 if lora else 0.05),
              f"loss {ref[0]['loss']:.4f} -> {ref[-1]['loss']:.4f}")
        worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(got, ref))
        check(f"{what}: 2 ranks' loss every step", len(got) == STEPS and worst <= 1e-5,
              f"worst relative difference {worst:.3g}")
        num = math.sqrt(sum((x - y) ** 2 for x, y in zip(got_p, ref_p)))
        den = math.sqrt(sum(y * y for y in ref_p))
        check(f"{what}: 2 ranks' final parameters",
              len(got_p) == len(ref_p) and num / den <= 1e-5,
              f"relative norm difference {num / den:.3g}")

print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
