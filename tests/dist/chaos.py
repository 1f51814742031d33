#!/usr/bin/env python3
"""Chaos during training with checkpoints on: N trials (default 12; the docs record a 100-trial
run), each a job of 2-4 CPU ranks at a random ZeRO stage saving every step, hit at a random
moment by one fault:
  kill  SIGKILL to a random rank   -> the launcher exits 137 naming that rank, within 15 s
  stop  SIGSTOP to a random rank   -> the heartbeat (ZT_HEARTBEAT_TIMEOUT_S=3) stops the job:
                                      exit 124 naming that rank, within 15 s
  head  SIGKILL to the launcher    -> every rank dies with it (PR_SET_PDEATHSIG), within 15 s
After each: no process of the job is left, `zt ckpt inspect --verify` passes, and a resume from
`latest` trains two more steps whose losses equal, bit for bit, the uninterrupted run's at those
steps (a reference per world size and stage, run once; sequential data order).

Usage: chaos.py ZT_BINARY SOURCE_DIR [--trials N]
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from _ports import next_port

ZT = os.path.abspath(sys.argv[1])
TRIALS = int(sys.argv[sys.argv.index("--trials") + 1]) if "--trials" in sys.argv else 12
TMP = tempfile.mkdtemp(prefix="zt_chaos_")
MARK = f"zt_chaos_{os.getpid()}"
ENV = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "cache"), ZT_COMM_TIMEOUT_S="30",
           ZT_LAUNCH_GRACE_S="2", ZT_HEARTBEAT_TIMEOUT_S="3", OMP_NUM_THREADS="1",
           OPENBLAS_NUM_THREADS="1", ZT_CHAOS_MARK=MARK)
REF_STEPS = 80
rng = random.Random(20261125)
port = [0]
failures = []


def cfg_path(stage):
    p = os.path.join(TMP, f"s{stage}.json")
    if not os.path.exists(p):
        json.dump({"train_batch_size": 12, "gradient_clipping": 1.0,
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                   "zero_optimization": {"stage": stage, "reduce_bucket_size": 50000,
                                         "stage3_param_persistence_threshold": 5000}},
                  open(p, "w"))
    return p


def cmd(world, stage, steps, extra=()):
    port[0] = next_port()
    return [ZT, "launch", "--num_procs", str(world), "--master_port", str(port[0]), ZT, "train",
            "--config", cfg_path(stage), "--device", "cpu", "--steps", str(steps), "--seq-len",
            "32", "--sample-tokens", "0", "--order", "sequential"] + list(extra)


def marked():
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if MARK.encode() in open(f"/proc/{pid}/environ", "rb").read():
                out.append(int(pid))
        except OSError:
            pass
    return out


def rank_pids(launcher_pid):
    kids = {}
    for pid in marked():
        try:
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            if int(stat[1]) == launcher_pid:
                args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                m = [a for a in args if a.startswith(b"--local_rank=")]
                if m:
                    kids[int(m[0].split(b"=")[1])] = pid
        except (OSError, IndexError, ValueError):
            pass
    return kids


references = {}


def reference(world, stage):
    key = (world, stage)
    if key not in references:
        metrics = os.path.join(TMP, f"ref_w{world}_s{stage}.jsonl")
        subprocess.run(cmd(world, stage, REF_STEPS, ["--metrics-out", metrics]), env=ENV,
                       check=True, capture_output=True, timeout=900)
        references[key] = {r["step"]: r["loss"] for r in map(json.loads, open(metrics))
                           if "step" in r}
    return references[key]


for trial in range(TRIALS):
    world, stage = rng.choice([2, 2, 3, 4]), rng.randrange(4)
    fault = ["kill", "stop", "head"][trial % 3]
    d = os.path.join(TMP, f"t{trial}")
    name = f"trial {trial} ({fault}, {world} ranks, stage {stage})"
    job = subprocess.Popen(cmd(world, stage, 100000, ["--save", d, "--save-interval", "1"]),
                           env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(os.path.join(d, "latest")):
        time.sleep(0.01)
    time.sleep(rng.uniform(1.2, 3.0))  # past the first heartbeat that carries a step
    ranks = rank_pids(job.pid)
    victim = rng.randrange(world)
    if job.poll() is not None:  # it ended before the fault: that is a failure of its own
        failures.append(f"{name}: the job ended by itself with {job.returncode}: "
                        f"{job.stderr.read()[-400:]}")
        continue
    t0 = time.time()
    if fault == "head":
        job.send_signal(signal.SIGKILL)
    elif victim in ranks:
        os.kill(ranks[victim], signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    else:
        failures.append(f"{name}: rank {victim} not found ({ranks})")
        job.kill()
    try:
        _, err = job.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        job.kill()
        _, err = job.communicate()
    while marked() and time.time() - t0 < 15:
        time.sleep(0.1)
    took = time.time() - t0
    left = marked()
    if left:
        failures.append(f"{name}: processes left after {took:.0f} s: {left}")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        continue
    line = next((l for l in err.splitlines() if l.startswith("zt launch:")), "")
    if fault == "kill" and not (job.returncode == 137 and f"rank {victim} " in line):
        failures.append(f"{name}: exit {job.returncode}, line {line!r}")
    if fault == "stop" and not (job.returncode == 124 and f"rank {victim} " in line and
                                "heartbeat" in line):
        failures.append(f"{name}: exit {job.returncode}, line {line!r}")
    v = subprocess.run([ZT, "ckpt", "inspect", d, "--verify"], env=ENV, capture_output=True,
                       text=True)
    if v.returncode != 0:
        failures.append(f"{name}: inspect --verify: {v.stderr.strip()}")
        continue
    at = int(open(os.path.join(d, "latest")).read().strip()[len("global_step"):])
    if at + 2 <= REF_STEPS:
        metrics = os.path.join(TMP, f"res{trial}.jsonl")
        r = subprocess.run(cmd(world, stage, at + 2, ["--load", d, "--metrics-out", metrics]),
                           env=ENV, capture_output=True, text=True, timeout=300)
        got = {x["step"]: x["loss"] for x in map(json.loads, open(metrics)) if "step" in x} \
            if r.returncode == 0 else {}
        ref = reference(world, stage)
        if r.returncode != 0 or [got.get(s) for s in (at + 1, at + 2)] != \
                [ref[s] for s in (at + 1, at + 2)]:
            failures.append(f"{name}: resume from step {at}: rc {r.returncode}, {got} vs "
                            f"{[ref[s] for s in (at + 1, at + 2)]} {r.stderr[-300:]}")
            continue
    print(f"ok: {name}: stopped in {took:.1f} s, resumed exactly from step {at}", flush=True)
    shutil.rmtree(d, ignore_errors=True)

shutil.rmtree(TMP, ignore_errors=True)
print(f"{TRIALS} chaos trials, {len(failures)} failed")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
