#!/usr/bin/env python3
"""Disk faults during checkpointing (issue: reliability, "Disk faults"):
1. A full disk: a 16 MiB tmpfs holds one checkpoint of gpt2-tiny (~10 MB) but not two; the
   second save fails with one error naming the file and "No space left", the job exits non-zero,
   `latest` still names the first checkpoint and `inspect --verify` passes on it, and the failed
   save's unfinished folder is gone (its space given back).
2. A read-only folder (the tmpfs remounted read-only): saving fails naming the folder; loading
   from it works.
3. A data read error: the memory-mapped token file truncated under a running job (SIGBUS on the
   next read) ends it with one line naming the file and exit code 1.
Without the privilege to mount (not root), the same full-disk check runs through RLIMIT_FSIZE
(a file larger than the limit fails with EFBIG, "File too large"), and 2. is skipped.

Usage: disk_faults.py ZT_BINARY SOURCE_DIR
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

ZT = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="zt_disk_")
ENV = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "cache"), OMP_NUM_THREADS="1")
CFG = os.path.join(TMP, "cfg.json")
json.dump({"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}},
          open(CFG, "w"))
failures, passed = [], 0


def check(name, cond, detail=""):
    global passed
    if cond:
        passed += 1
        print(f"ok: {name}")
    else:
        failures.append(name)
        print(f"FAIL: {name}: {detail}")


def train(d, steps, extra=(), preexec=None):
    return subprocess.run([ZT, "train", "--config", CFG, "--device", "cpu", "--steps", str(steps),
                           "--seq-len", "32", "--sample-tokens", "0", "--save", d,
                           "--save-interval", "1"] + list(extra),
                          env=ENV, capture_output=True, text=True, timeout=300,
                          preexec_fn=preexec)


mnt = os.path.join(TMP, "mnt")
os.makedirs(mnt)
mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt],
                         capture_output=True).returncode == 0
try:
    d = os.path.join(mnt, "ckpt")
    if mounted:
        p = train(d, 3)
        want = "No space left"
    else:
        train(d, 1)  # one checkpoint, no limit

        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, 4 << 20))
        p = train(d, 3, ["--load", d], preexec=limit)
        want = "File too large"
    lines = [l for l in p.stderr.splitlines() if l.startswith("zt: error")]
    check("full disk: the save fails, one error naming the shard and the cause",
          p.returncode != 0 and len(lines) == 1 and "optim_states" in lines[0] and want in lines[0],
          p.stderr[-600:])
    latest = open(os.path.join(d, "latest")).read().strip()
    check("full disk: `latest` still names the first checkpoint", latest == "global_step1", latest)
    v = subprocess.run([ZT, "ckpt", "inspect", d, "--verify"], env=ENV, capture_output=True,
                       text=True)
    check("full disk: the first checkpoint verifies", v.returncode == 0, v.stderr)
    check("full disk: the failed save's folder is removed",
          sorted(os.listdir(d)) == ["global_step1", "latest"], str(os.listdir(d)))
    if mounted:
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        p = train(d, 3, ["--load", d])
        check("read-only folder: the save fails naming it",
              p.returncode != 0 and "Read-only file system" in p.stderr and d in p.stderr,
              p.stderr[-600:])
        check("read-only folder: the checkpoint was loaded first",
              "loaded checkpoint" in p.stderr, p.stderr[-600:])
    else:
        print("skip: read-only folder (mounting needs root)")
    # 3. A data read error: the memory-mapped token file is truncated under the running job.
    text = os.path.join(TMP, "big.txt")
    open(text, "w").write("some text to train on. " * 40000)
    data = os.path.join(TMP, "big.bin")
    subprocess.run([ZT, "data", "prepare", text, "-o", data], env=ENV, check=True,
                   capture_output=True)
    job = subprocess.Popen([ZT, "train", "--config", CFG, "--device", "cpu", "--steps", "1000000",
                            "--seq-len", "32", "--sample-tokens", "0", "--data", data],
                           env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    import time
    time.sleep(3)
    os.truncate(data, 2000)
    try:
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        _, err = job.communicate()
    check("a token file truncated while training: one line naming it, exit 1",
          job.returncode == 1 and "reading token file" in err and data in err and
          "core dumped" not in err, f"rc {job.returncode}: {err[-400:]}")
finally:
    if mounted:
        subprocess.run(["umount", mnt])
    shutil.rmtree(TMP, ignore_errors=True)
print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
