#!/usr/bin/env python3
"""Checkpoints through the real CLI, launcher and Gloo (issue: checkpoints).

1. Resume is exact. For 1 process and 2 ranks at every ZeRO stage: an uninterrupted 12-step run
   (the oracle), which saves at step 6 on its way, against a run that loads that step-6
   checkpoint and trains to 12.
   AdamW, gradient accumulation 2, clipping on; in fp32, bf16 and fp16 whose loss scale moves
   (an initial 2^128 overflows f32 and halves, a scale window of 2 grows it again). The losses of steps
   7-12, the loss scales, and the final fp32 parameters must be bitwise equal: the resumed run
   does the same operations on the same values in the same order.
2. Resume elsewhere. Saved at 2 ranks stage 3 (step 6); resumed at 1 rank stage 0, 4 ranks
   stage 1, and 2 ranks stage 2 with offload_optimizer. Oracle: the uninterrupted run at the new
   world size and stage. SGD with momentum (linear in the gradients; zero_equivalence.py says
   why Adam is not used across world sizes): every world size reproduces the single-process run
   to 1e-5 relative (zero_equivalence.py's fp32 bound), so two of them agree within 2e-5.
3. to-fp32 of the 2-rank stage-3 checkpoint, read with this file's own safetensors reader,
   equals bitwise the parameters that run dumped from the engine (another code path), and the
   1-rank stage-0 checkpoint of the same training agrees within 2e-5 of max|p| (as 2.).
   --save-16bit-model at stage 3 holds the parameters rounded to bf16 (rounded here by hand) with
   stage3_gather_16bit_weights_on_model_save, and warns and writes nothing without it.
4. Damage is named: a flipped byte in a shard and a truncated shard each make the load fail
   with the file's name and nothing is written; `inspect --verify` names them too. A --load
   folder without `latest` warns and starts fresh.
5. --keep-last 2 keeps the two newest tags; --save-async saves every interval and resumes
   exactly; --save-on-signal: SIGUSR1 to the launcher makes every
   rank save and exit 0, and the run resumes from that step exactly.

Usage: checkpoint_resume.py ZT_BINARY SOURCE_DIR
"""
import array
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

from _ports import next_port

ZT, SRC = sys.argv[1], sys.argv[2]
TMP = tempfile.mkdtemp(prefix="zt_ckpt_")
ENV = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "cache"), ZT_COMM_TIMEOUT_S="120",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
port = [0]
failures, passed = [], 0


def check(name, cond, detail=""):
    global passed
    if cond:
        passed += 1
        print(f"ok: {name}")
    else:
        failures.append(name)
        print(f"FAIL: {name}: {detail}")


def write_config(path, stage, precision="fp32", optimizer="adamw", offload=False):
    cfg = {"train_batch_size": 16, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
           "zero_allow_untested_optimizer": True,
           "zero_optimization": {"stage": stage, "reduce_bucket_size": 50000,
                                 "stage3_param_persistence_threshold": 5000}}
    if optimizer == "adamw":
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}}
        cfg["scheduler"] = {"type": "WarmupLR", "params": {"warmup_num_steps": 5,
                                                           "warmup_max_lr": 3e-3}}
    else:
        cfg["optimizer"] = {"type": "SGD",
                            "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}}
    if precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif precision == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 128, "loss_scale_window": 2,
                       "hysteresis": 1}
    if offload:
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    with open(path, "w") as f:
        json.dump(cfg, f)


def train(name, world, cfg, steps, extra=(), check_rc=True):
    metrics, params = os.path.join(TMP, name + ".jsonl"), os.path.join(TMP, name + ".bin")
    cmd = [ZT, "train", "--config", cfg, "--device", "cpu", "--steps", str(steps), "--seq-len",
           "32", "--sample-tokens", "0", "--order", "sequential", "--metrics-out", metrics,
           "--dump-params", params] + list(extra)
    if world > 1:
        port[0] = next_port()
        cmd = [ZT, "launch", "--num_procs", str(world), "--master_port", str(port[0])] + cmd
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if check_rc and p.returncode != 0:
        raise RuntimeError(f"{name} exited {p.returncode}:\n{p.stderr[-2000:]}")
    if p.returncode != 0:
        return p, None, None
    recs = [json.loads(l) for l in open(metrics)][1:]
    a = array.array("f")
    a.frombytes(open(params, "rb").read())
    return p, recs, a


def safetensors_read(path):
    """An independent reader: the format's 8-byte length, JSON header, raw little-endian data."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", e
        lo, hi = e["data_offsets"]
        a = array.array("f")
        a.frombytes(b[8 + n + lo:8 + n + hi])
        out[name] = a
    return header, out


# 1. Exact resume.
for precision in ["fp32", "bf16", "fp16"]:
    for world in [1, 2]:
        for stage in range(4):
            name = f"exact_w{world}_s{stage}_{precision}"
            cfg = os.path.join(TMP, name + ".json")
            write_config(cfg, stage, precision)
            ck = os.path.join(TMP, name + "_ckpt")
            try:
                # The uninterrupted run saves at step 6 on its way (saving changes no state);
                # the resumed run loads that tag, not `latest` (step 12).
                _, full, full_p = train(name + "_full", world, cfg, 12,
                                        ["--save", ck, "--save-interval", "6"])
                _, res, res_p = train(name + "_resumed", world, cfg, 12,
                                      ["--load", ck, "--load-tag", "global_step6"])
            except Exception as e:
                check(name, False, str(e))
                continue
            same = [(a["step"], a["loss"], a["loss_scale"]) for a in full[6:]] == \
                   [(b["step"], b["loss"], b["loss_scale"]) for b in res]
            check(f"{name}: steps 7-12 bitwise", same,
                  f"{[(a['loss'], a['loss_scale']) for a in full[6:]]} vs "
                  f"{[(b['loss'], b['loss_scale']) for b in res]}")
            check(f"{name}: final parameters bitwise", full_p.tobytes() == res_p.tobytes())
            if precision == "fp16" and world == 2 and stage == 1:
                scales = sorted({r["loss_scale"] for r in full})
                check("fp16: the loss scale moved (overflow skips and growth)",
                      len(scales) >= 3 and any(r["skipped"] for r in full), str(scales))

# 2. Resume at another world size and stage.
sgd = {}
for stage in [3, 0, 1, 2]:
    sgd[stage] = os.path.join(TMP, f"sgd_s{stage}.json")
    write_config(sgd[stage], stage, optimizer="sgd", offload=(stage == 2))
src = os.path.join(TMP, "w2s3_ckpt")
_, w2s3_full, w2s3_params = train("w2s3_full", 2, sgd[3], 6)
train("w2s3_first", 2, sgd[3], 6, ["--save", src])
for world, stage in [(1, 0), (4, 1), (2, 2)]:
    name = f"elsewhere_w{world}_s{stage}"
    try:
        _, ref, _ = train(name + "_ref", world, sgd[stage], 12)
        p, res, _ = train(name + "_res", world, sgd[stage], 12, ["--load", src])
    except Exception as e:
        check(name, False, str(e))
        continue
    worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(ref[6:], res))
    check(f"{name}: steps 7-12 within 2e-5 of the uninterrupted run",
          len(res) == 6 and res[0]["step"] == 7 and worst <= 2e-5, f"worst {worst:.3g}")
    check(f"{name}: the load says where it came from",
          "saved on 2 rank(s) at ZeRO stage 3" in p.stderr, p.stderr[-500:])

# 3. to-fp32.
out = os.path.join(TMP, "fp32_w2s3")
p = subprocess.run([ZT, "ckpt", "to-fp32", src, out], env=ENV, capture_output=True, text=True)
check("to-fp32 exits 0", p.returncode == 0, p.stderr)
header, tensors = safetensors_read(os.path.join(out, "model.safetensors"))
meta = json.load(open(os.path.join(src, "global_step6", "mp_rank_00_model_states.json")))
flat = array.array("f")
for unit in meta["model"]["units"]:
    buf = array.array("f", bytes(4 * unit["numel"]))
    for prm in unit["params"]:
        t = tensors[prm["name"]]
        buf[prm["offset"]:prm["offset"] + len(t)] = t
    flat.extend(buf)
check("to-fp32 of 2 ranks stage 3 == that run's own parameters, bitwise",
      flat.tobytes() == w2s3_params.tobytes())
ck1 = os.path.join(TMP, "w1s0_ckpt")
train("w1s0_first", 1, sgd[0], 6, ["--save", ck1])
out1 = os.path.join(TMP, "fp32_w1s0")
subprocess.run([ZT, "ckpt", "to-fp32", ck1, out1, "--max-shard-size", "1MB"], env=ENV,
               check=True, capture_output=True)
index = json.load(open(os.path.join(out1, "model.safetensors.index.json")))
files = sorted(set(index["weight_map"].values()))
other = {}
for f in files:
    other.update(safetensors_read(os.path.join(out1, f))[1])
pmax = max(abs(x) for t in tensors.values() for x in t)
worst = max(abs(x - y) for k in tensors for x, y in zip(tensors[k], other[k]))
check("to-fp32 of 1 rank stage 0 (sharded at 1MB) agrees with 2 ranks stage 3",
      len(files) > 1 and set(other) == set(tensors) and worst <= 2e-5 * pmax,
      f"{len(files)} files, worst {worst:.3g} of max {pmax:.3g}")
check("to-fp32 writes the model's config", json.load(open(os.path.join(out, "config.json")))
      .get("model_type") == "gpt2")

# 3b. The 16-bit model save at the end of a stage-3 run: needs the gather flag (DeepSpeed), and then
# holds the run's fp32 parameters rounded to bf16 (round to nearest even, done here by hand).
b16 = os.path.join(TMP, "b16.json")
json.dump({"train_batch_size": 16, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}},
          open(b16, "w"))
m16 = os.path.join(TMP, "m16")
_, _, p16 = train("m16", 2, b16, 2, ["--save-16bit-model", m16])
raw = open(os.path.join(m16, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
got = {}
for name, e in hdr.items():
    if name != "__metadata__":
        lo, hi = e["data_offsets"]
        got[name] = array.array("H", raw[8 + n + lo:8 + n + hi])
def bf16(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
# The folder is what transformers' from_pretrained reads (GPT-2's layout, mapped here by hand):
# "transformer." names, Conv1D block weights stored (in, out), the token table without the
# vocabulary padding, the tied head not stored.
vocab = json.load(open(os.path.join(m16, "config.json")))["vocab_size"]
off, bad, seen = 0, 0, 0
for unit in meta["model"]["units"]:
    for prm in unit["params"]:
        hf = "transformer." + prm["name"]
        if hf not in got:
            bad += 1
            continue
        seen += 1
        vals, shape, base = got[hf], prm["shape"], off + prm["offset"]
        if len(shape) == 2 and prm["name"].startswith("h."):  # Conv1D: (cols, rows) in the file
            rows, cols = shape
            idx = [r * cols + c for c in range(cols) for r in range(rows)]
        elif prm["name"] == "wte.weight":
            idx = range(vocab * shape[1])
        else:
            idx = range(len(vals))
        bad += len(vals) != len(idx)
        for v, i in zip(vals, idx):
            bad += v != bf16(p16[base + i])
    off += unit["numel"]
check("--save-16bit-model at stage 3 holds the parameters rounded to bf16, as transformers names "
      "and lays them out",
      hdr[next(iter(got))]["dtype"] == "BF16" and bad == 0 and seen == len(got),
      f"{bad} elements differ, {seen} of {len(got)} tensors matched")
p, _, _ = train("m16_off", 2, sgd[3], 1, ["--save-16bit-model", m16 + "_off"])
check("--save-16bit-model at stage 3 without the gather flag: DeepSpeed's warning, nothing written",
      "Did not save the model" in p.stderr and not os.path.exists(m16 + "_off"), p.stderr[-400:])

# 4. Damage is named, nothing is written; no `latest` starts fresh.
for kind in ["flip", "truncate"]:
    bad = os.path.join(TMP, f"bad_{kind}")
    shutil.copytree(src, bad)
    shard = os.path.join(bad, "global_step6", "zero_pp_rank_1_mp_rank_00_optim_states.safetensors")
    data = bytearray(open(shard, "rb").read())
    if kind == "flip":
        data[len(data) // 2] ^= 0x10
    else:
        data = data[:len(data) - 1000]
    open(shard, "wb").write(bytes(data))
    p, _, _ = train(f"bad_{kind}", 2, sgd[3], 12, ["--load", bad, "--save", bad],
                    check_rc=False)
    check(f"a {kind}ped shard: the load fails naming the file",
          p.returncode != 0 and "zero_pp_rank_1_mp_rank_00_optim_states" in p.stderr,
          p.stderr[-800:])
    check(f"a {kind}ped shard: nothing new was saved",
          sorted(os.listdir(bad)) == ["global_step6", "latest"], str(os.listdir(bad)))
    v = subprocess.run([ZT, "ckpt", "inspect", bad, "--verify"], env=ENV, capture_output=True,
                       text=True)
    check(f"a {kind}ped shard: inspect --verify names it",
          v.returncode != 0 and "zero_pp_rank_1" in v.stderr, v.stderr)
empty = os.path.join(TMP, "empty_ckpt")
p, fresh, _ = train("fresh", 1, sgd[0], 2, ["--load", empty, "--save", empty])
check("--load without `latest` warns and starts at step 1",
      "Unable to find latest file" in p.stderr and fresh[0]["step"] == 1, p.stderr[-500:])

# 5. --keep-last and --save-on-signal.
kl = os.path.join(TMP, "keep_ckpt")
train("keep", 1, sgd[0], 7, ["--save", kl, "--save-interval", "2", "--keep-last", "2"])
tags = sorted(d for d in os.listdir(kl) if not d.startswith("."))
check("--keep-last 2 keeps the two newest", tags == ["global_step6", "global_step7", "latest"],
      str(tags))
asy = os.path.join(TMP, "async_ckpt")
train("async_first", 2, sgd[3], 6, ["--save", asy, "--save-interval", "2", "--save-async"])
_, asy_ref, _ = train("async_ref", 2, sgd[3], 9)
_, asy_res, _ = train("async_res", 2, sgd[3], 9, ["--load", asy])
tags = sorted(d for d in os.listdir(asy) if not d.startswith("."))
check("--save-async: every interval saved, the last resumes exactly",
      tags == ["global_step2", "global_step4", "global_step6", "latest"] and
      [r["loss"] for r in asy_ref[6:]] == [r["loss"] for r in asy_res], str(tags))
sig = os.path.join(TMP, "sig_ckpt")
port[0] = next_port()
metrics = os.path.join(TMP, "sig.jsonl")
proc = subprocess.Popen([ZT, "launch", "--num_procs", "2", "--master_port", str(port[0]), ZT,
                         "train", "--config", sgd[3], "--device", "cpu", "--steps", "100000",
                         "--seq-len", "32", "--sample-tokens", "0", "--order", "sequential",
                         "--save", sig, "--save-on-signal", "--metrics-out", metrics],
                        env=ENV, stderr=subprocess.PIPE, text=True)
deadline = time.time() + 120
while time.time() < deadline and (not os.path.exists(metrics) or
                                  sum(1 for _ in open(metrics)) < 4):
    time.sleep(0.1)
proc.send_signal(signal.SIGUSR1)
try:
    _, err = proc.communicate(timeout=120)
except subprocess.TimeoutExpired:
    proc.kill()
    _, err = proc.communicate()
latest = open(os.path.join(sig, "latest")).read().strip() if os.path.exists(
    os.path.join(sig, "latest")) else ""
check("SIGUSR1 to the launcher: every rank saves and the job exits 0",
      proc.returncode == 0 and latest.startswith("global_step"), f"rc {proc.returncode} {err[-800:]}")
if latest:
    at = int(latest[len("global_step"):])
    _, ref, _ = train("sig_ref", 2, sgd[3], at + 2)
    _, res, _ = train("sig_res", 2, sgd[3], at + 2, ["--load", sig])
    check("the signalled checkpoint resumes exactly",
          [r["loss"] for r in ref[at:]] == [r["loss"] for r in res], f"at {at}")

shutil.rmtree(TMP, ignore_errors=True)
print(f"{passed} passed, {len(failures)} failed")
if failures:
    print("failed:", *failures, sep="\n  ")
    sys.exit(1)
