#!/usr/bin/env python3
"""AlexNet on CIFAR-10's binary format through the real launcher (zt launch, CPU ranks, Gloo):
the job of DeepSpeed's pipeline tutorial, `zt train --model alexnet --pipeline-parallel-size 2`,
each layout against the single-process run of the same global batch (16 images a step, 4
micro-batches, sequential order), as tests/dist/pipeline_stages.py does for transformers.

Data: two data_batch_N.bin files written here (200 records each) whose images are learnable -
each class a bright square at its own place over noise - so the loss must fall.

Layouts: PP=2 (the six units - five convolution blocks and the classifier - split by parameter
count), PP=3, PP=2 x DP=2 at ZeRO 1, PP=2 with activation checkpointing (every unit alone, and
--activation-checkpoint-interval 2: segments of two units), and without a pipeline
DP=2 at ZeRO 3 (the data-parallel ranks read DistributedSampler's interleaved shares, whose
union per step is the single process's batch). Oracle: the single process. Every layout computes
each image with the same kernels and only the order of a few sums differs (the data-parallel
average, the gradient norm's per-stage parts), so each step's loss and gradient norm must agree
within 1e-5 relative in fp32 (AdamW: from PyTorch's default initialisation the deep ReLU stack
learns too slowly under SGD for 8 steps to show it; Adam's per-weight scaling does not).

Also: a PP=2 checkpoint saved at step 4 resumes on one process and continues as the
uninterrupted run; --eval-data reports accuracy over the test file; flags that belong to
language models, and a missing --data, are refused by name.

Usage: alexnet_pipeline.py ZT_BINARY SOURCE_DIR
"""
import json
import os
import random
import subprocess
import sys
import tempfile

from _ports import next_port

ZT, SRC = sys.argv[1], sys.argv[2]
STEPS, BATCH = 8, 16
TMP = tempfile.mkdtemp(prefix="zt_alexnet_")
ENV = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "cache"), ZT_COMM_TIMEOUT_S="120",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
failures, passed = [], 0


def write_cifar(path, n, seed):
    """n records: label k draws a bright 8x8 square at column 3k (rows by k % 3) over noise."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(n):
            k = rng.randrange(10)
            img = bytearray(rng.randrange(0, 96) for _ in range(3072))
            r0, c0 = 8 * (k % 3), min(3 * k, 24)
            for ch in range(3):
                for r in range(r0, r0 + 8):
                    for c in range(c0, c0 + 8):
                        img[ch * 1024 + r * 32 + c] = 200 + ch * 20
            f.write(bytes([k]) + bytes(img))


DATA = os.path.join(TMP, "cifar-10-batches-bin")
os.makedirs(DATA)
write_cifar(os.path.join(DATA, "data_batch_1.bin"), 200, 1)
write_cifar(os.path.join(DATA, "data_batch_2.bin"), 200, 2)
write_cifar(os.path.join(DATA, "test_batch.bin"), 64, 3)


def config(name, stage, gas):
    cfg = {"train_batch_size": BATCH, "gradient_accumulation_steps": gas,
           "gradient_clipping": 1.0, "zero_allow_untested_optimizer": True,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
           "zero_optimization": {"stage": stage}}
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def run(name, world, cfg, extra=(), expect_fail=False, steps=STEPS, data=DATA):
    metrics = os.path.join(TMP, name + ".jsonl")
    train = [ZT, "train", "--config", cfg, "--model", "alexnet", "--device", "cpu", "--steps",
             str(steps), "--order", "sequential", "--metrics-out", metrics] + list(extra)
    if data:
        train += ["--data", data]
    cmd = train
    if world > 1:
        cmd = [ZT, "launch", "--num_procs", str(world), "--master_port", str(next_port())] + train
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if expect_fail:
        return p
    if p.returncode != 0:
        raise RuntimeError(f"{name} exited {p.returncode}:\n{p.stderr[-3000:]}")
    recs = [json.loads(line) for line in open(metrics)]
    return recs[0], [r for r in recs[1:] if "loss" in r], [r for r in recs[1:] if "eval_accuracy" in r], p.stderr


def check(name, ok, detail):
    global passed
    if ok:
        passed += 1
        print(f"ok   {name}: {detail}")
    else:
        failures.append(name)
        print(f"FAIL {name}: {detail}")


def compare(name, ref, got, tol=1e-5, steps=STEPS):
    worst_loss = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(ref, got))
    worst_norm = max(abs(a["grad_norm"] - b["grad_norm"]) / abs(a["grad_norm"])
                     for a, b in zip(ref, got))
    check(name, len(got) == steps and worst_loss <= tol and worst_norm <= tol,
          f"worst loss rel diff {worst_loss:.2e}, grad-norm rel diff {worst_norm:.2e} (tol {tol:g}); "
          f"loss {got[0]['loss']:.4f} -> {got[-1]['loss']:.4f}")


_, ref, _, _ = run("single", 1, config("single", 0, 4))
check("single_trains", ref[-1]["loss"] < ref[0]["loss"] - 0.1,
      f"loss {ref[0]['loss']:.4f} -> {ref[-1]['loss']:.4f} over {STEPS} steps")

LAYOUTS = [
    # name, world, pipeline, ZeRO stage, extra
    ("pp2", 2, 2, 0, []),
    ("pp3", 3, 3, 0, []),
    ("pp2_dp2_s1", 4, 2, 1, []),
    ("pp2_checkpointing", 2, 2, 0, ["--gradient-checkpointing"]),
    # DeepSpeed's activation_checkpoint_interval: each stage's 3 units as segments of 2 and 1.
    ("pp2_checkpoint_interval2", 2, 2, 0, ["--activation-checkpoint-interval", "2"]),
    ("dp2_s3", 2, 1, 3, []),
]
for name, world, pp, stage, extra in LAYOUTS:
    flags = (["--pipeline-parallel-size", str(pp)] if pp > 1 else []) + extra
    rr, got, _, err = run(name, world, config(name, stage, 4), flags)
    check(f"{name}_record", rr.get("pipeline_parallel_size") == pp and
          rr.get("world_size") == world // pp, f"record says pipe {rr.get('pipeline_parallel_size')}, "
          f"data {rr.get('world_size')}")
    compare(name, ref, got)

# A pipeline checkpoint resumed on one process continues as the uninterrupted run.
ckpt = os.path.join(TMP, "ckpt_pp2")
run("pp2_save", 2, config("pp2_save", 0, 4), ["--pipeline-parallel-size", "2", "--save", ckpt],
    steps=4)
_, resumed, _, _ = run("resume_single", 1, config("resume_single", 0, 4), ["--load", ckpt])
compare("pp2_save_resumed_on_one_process", ref[4:], resumed, steps=STEPS - 4)

# Evaluation: accuracy over the test file, with its loss.
_, _, evals, _ = run("eval", 1, config("eval", 0, 4),
                     ["--eval-data", os.path.join(DATA, "test_batch.bin"), "--eval-interval", "4"])
check("eval_accuracy", len(evals) == 2 and all(e["eval_images"] == 64 and
                                              0.0 <= e["eval_accuracy"] <= 1.0 for e in evals),
      f"evaluations {[(e['step'], round(e['eval_accuracy'], 4), round(e['eval_loss'], 4)) for e in evals]}")

# Refusals.
for name, extra, data, want in [
    ("refuses_tensor_parallel", ["--tensor-parallel-size", "2"], DATA,
     "--tensor-parallel-size does not apply to --model alexnet"),
    ("refuses_seq_len", ["--seq-len", "64"], DATA, "--seq-len does not apply to --model alexnet"),
    ("refuses_interval_0_with_checkpointing",
     ["--activation-checkpoint-interval", "0", "--gradient-checkpointing"], DATA,
     "--activation-checkpoint-interval 0 turns checkpointing off"),
    ("refuses_missing_data", [], None, "CIFAR-10's binary files"),
    ("refuses_token_file", [], os.path.join(TMP, "single.json"), "3073-byte records"),
]:
    p = run(name, 1, config(name, 0, 4), extra, expect_fail=True, data=data)
    check(name, p.returncode != 0 and want in p.stderr, p.stderr.strip().splitlines()[-1]
          if p.stderr.strip() else f"exit {p.returncode}, no message")

print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
