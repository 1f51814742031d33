#!/usr/bin/env python3
"""Crash safety of checkpoints: a job saving every step is killed at a random moment (SIGKILL to
the trainer, or to the launcher of 2 ranks, whose ranks then die mid-write), N times. After each
kill, `zt ckpt inspect --verify` must pass on the folder (so `latest` names a complete,
uncorrupted checkpoint) and a resume from `latest` must load it and train one more step. The kill
moments are spread over the first second after a checkpoint exists, so they land in every phase
of a save (shard writes, metadata, the folder rename, `latest`) and between saves.

Usage: checkpoint_crash.py ZT_BINARY SOURCE_DIR [--trials N]   (default 100)
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from _ports import next_port

ZT = sys.argv[1]
TRIALS = int(sys.argv[sys.argv.index("--trials") + 1]) if "--trials" in sys.argv else 100
TMP = tempfile.mkdtemp(prefix="zt_crash_")
ENV = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "cache"), ZT_COMM_TIMEOUT_S="60",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
CFG = os.path.join(TMP, "cfg.json")
json.dump({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           "zero_optimization": {"stage": 2}}, open(CFG, "w"))
rng = random.Random(1234)
port = 0
failures = []
for trial in range(TRIALS):
    d = os.path.join(TMP, f"t{trial}")
    world = 2 if trial % 4 == 3 else 1
    train = [ZT, "train", "--config", CFG, "--device", "cpu", "--steps", "100000", "--seq-len",
             "32", "--sample-tokens", "0", "--save", d, "--save-interval", "1"]
    if world == 2:
        port = next_port()
        train = [ZT, "launch", "--num_procs", "2", "--master_port", str(port)] + train
    p = subprocess.Popen(train, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(os.path.join(d, "latest")):
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 1.0))
    p.send_signal(signal.SIGKILL)
    p.wait()
    time.sleep(0.05 if world == 1 else 0.5)  # the ranks die of their launcher's death
    v = subprocess.run([ZT, "ckpt", "inspect", d, "--verify"], env=ENV, capture_output=True,
                       text=True)
    if v.returncode != 0:
        failures.append(f"trial {trial}: inspect --verify: {v.stderr.strip()}")
        continue
    latest = open(os.path.join(d, "latest")).read().strip()
    step = int(latest[len("global_step"):])
    r = subprocess.run([ZT, "train", "--config", CFG, "--device", "cpu", "--steps", str(step + 1),
                        "--seq-len", "32", "--sample-tokens", "0", "--load", d, "--save", d],
                       env=ENV, capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or f"loaded checkpoint {d}/{latest}" not in r.stderr:
        failures.append(f"trial {trial}: resume from {latest}: rc {r.returncode}: {r.stderr[-600:]}")
        continue
    leftovers = [n for n in os.listdir(d) if n.startswith(".")]
    if leftovers:
        failures.append(f"trial {trial}: the next save left {leftovers}")
    shutil.rmtree(d, ignore_errors=True)
shutil.rmtree(TMP, ignore_errors=True)
print(f"{TRIALS} kill -9 trials, {len(failures)} failed")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
