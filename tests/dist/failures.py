#!/usr/bin/env python3
"""What a user sees when a distributed run goes wrong, through the real binary as users run it
(`zt launch --num_procs N zt train --device cpu ...`, Gloo over loopback):

a) a rank is SIGKILLed mid-training: `zt launch` exits within 15 s with 137 (128 + SIGKILL),
   names rank 1, and no process of the job survives;
b) a rank never arrives (one `zt train` started by hand as rank 0 of 2, and one as rank 1 of 2):
   it exits non-zero within 30 s with exactly one error line naming the missing peer, and no
   crash (stack trace, "terminate called", "Aborted");
c) a rank is frozen (SIGSTOP) mid-training: the other rank fails within ZT_COMM_TIMEOUT_S + 20 s
   with an error naming the collective and the timeout; the launcher then stops the frozen rank
   and exits non-zero;
d) an impossible batch triad for the world size (10 != 3 * 1 * 2): every rank prints DeepSpeed's
   "Check batch related parameters" message, the launcher exits non-zero within 20 s;
e) a rank is frozen (SIGSTOP) with ZT_HEARTBEAT_TIMEOUT_S=3: the launcher stops the job with 124
   before the collective timeout, naming the rank, its host and its last step.

Oracle: the documented behaviour (docs/launcher.md "When something fails", docs/comm.md "When a
peer dies or hangs", DeepSpeed's batch assertion in docs/config.md). Every process a case starts
carries a unique marker variable in its environment (ranks inherit the launcher's), so "nothing
left alive" is checked, and cleanup done, by scanning /proc for that marker.

Usage: failures.py ZT_BINARY SOURCE_DIR
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

ZT, SRC = os.path.abspath(sys.argv[1]), sys.argv[2]
TMP = tempfile.mkdtemp(prefix="zt_fail_")
COMM_TIMEOUT_S = 10
BASE_ENV = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "cache"), ZT_LAUNCH_GRACE_S="2",
                ZT_COMM_TIMEOUT_S=str(COMM_TIMEOUT_S), OMP_NUM_THREADS="1",
                OPENBLAS_NUM_THREADS="1", ZT_LOG_LEVEL="info")
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "ZT_JOB_TOKEN", "DEEPSPEED_TIMEOUT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
          "SLURM_PROCID", "SLURM_NTASKS"):
    BASE_ENV.pop(k, None)  # this script's own environment must not make a rank of it
CRASH = re.compile(r"terminate called|Aborted|Segmentation fault|core dumped|ZT_ASSERT|"
                   r"assertion failed|stack trace|Traceback", re.IGNORECASE)
failures, passed = [], 0


def check(name, cond, detail):
    global passed
    if cond:
        passed += 1
        print(f"ok: {name}", flush=True)
    else:
        failures.append(name)
        print(f"FAIL: {name}: {detail}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(name, cfg):
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def train_args(cfg, metrics):
    # Far more steps than any case waits for: every rank is still training when it is hit.
    return [ZT, "train", "--config", cfg, "--device", "cpu", "--model", "gpt2-tiny", "--steps",
            "1000000", "--seq-len", "32", "--sample-tokens", "0", "--metrics-out", metrics]


def proc_state(pid):
    """The /proc state letter of pid ('R', 'S', 'T', 'Z', ...), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def proc_environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def marked_pids(marker):
    """Live (non-zombie) processes whose environment carries this case's marker."""
    tag = f"ZT_FAILTEST_MARKER={marker}".encode()
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid() and tag in proc_environ(d):
            if proc_state(d) not in (None, "Z"):
                out.append(int(d))
    return out


def children_by_rank(parent):
    """{rank: pid} of parent's child processes, read from RANK= in their environment."""
    ranks = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid != parent:
            continue
        for kv in proc_environ(d):
            if kv.startswith(b"RANK="):
                ranks[int(kv[5:])] = int(d)
    return ranks


class Job:
    """One started command with its output in a file (a pipe left undrained would stall the
    ranks' progress output) and a marker that finds every process it spawned."""

    def __init__(self, name, cmd, extra_env=None):
        self.name, self.marker = name, uuid.uuid4().hex
        env = dict(BASE_ENV, ZT_FAILTEST_MARKER=self.marker, **(extra_env or {}))
        self.out_path = os.path.join(TMP, name + ".out")
        self.out = open(self.out_path, "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def output(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def wait(self, seconds):
        """The exit code, or None if it is still running after `seconds`."""
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def cleanup(self):
        """SIGCONT then SIGKILL every process of the job still alive (frozen ranks included)."""
        for sig in (signal.SIGCONT, signal.SIGKILL):
            for pid in [self.proc.pid] + marked_pids(self.marker):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.out.close()

    def survivors_after(self, seconds):
        """Marked processes still alive after waiting up to `seconds` for them to go."""
        deadline = time.monotonic() + seconds
        while True:
            alive = marked_pids(self.marker)
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.1)


def step_records(metrics):
    try:
        with open(metrics) as f:
            return sum(1 for line in f if '"step"' in line)
    except OSError:
        return 0


def wait_training(job, metrics, steps=2, seconds=60):
    """Waits until rank 0 wrote `steps` step records; False if the job ended or time ran out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if step_records(metrics) >= steps:
            return True
        if job.proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def launch(name, world, cfg, extra_env=None, launcher_flags=()):
    metrics = os.path.join(TMP, name + ".jsonl")
    cmd = [ZT, "launch", "--num_procs", str(world), "--master_port", str(free_port()),
           *launcher_flags] + train_args(cfg, metrics)
    return Job(name, cmd, extra_env), metrics


def rank_pids(job, world, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ranks = children_by_rank(job.proc.pid)
        if len(ranks) == world:
            return ranks
        time.sleep(0.1)
    return children_by_rank(job.proc.pid)


GOOD = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 2}}


def case_rank_killed():
    """a) SIGKILL rank 1 of 3 mid-training."""
    cfg = write_config("killed", GOOD)
    job, metrics = launch("killed", 3, cfg)
    try:
        trained = wait_training(job, metrics)
        check("a: 3 ranks start training", trained, job.output()[-2000:])
        if not trained:
            return
        pids = rank_pids(job, 3)
        check("a: the launcher's children are ranks 0, 1, 2", sorted(pids) == [0, 1, 2],
              f"found {pids}")
        if 1 not in pids:
            return
        os.kill(pids[1], signal.SIGKILL)
        t0 = time.monotonic()
        rc = job.wait(15)
        took = time.monotonic() - t0
        out = job.output()
        check("a: zt launch exits within 15 s of the kill", rc is not None,
              "still running 15 s after the kill")
        check("a: exit code 137 (128 + SIGKILL)", rc == 137, f"exit code {rc}")
        line = next((l for l in out.splitlines() if l.startswith("zt launch:")), "")
        check("a: the launcher's failure line names rank 1 and the signal",
              re.search(rf"rank 1 \(pid {pids[1]}\) was killed by signal 9", line) is not None,
              f"line {line!r}; output tail:\n{out[-1500:]}")
        alive = job.survivors_after(5)
        check("a: no process of the job is left alive", not alive,
              f"still alive: {alive} (launcher exited after {took:.1f} s)")
        check("a: no crash output", CRASH.search(out) is None, out[-2000:])
    finally:
        job.cleanup()


def case_rank_never_arrives(own_rank):
    """b) One rank of 2 started by hand; the other never comes. Rank 0 waits for rank 1's
    address in its own store; rank 1 waits for rank 0's store to accept connections."""
    cfg = write_config(f"alone{own_rank}", dict(GOOD, train_batch_size=4))
    env = {"RANK": str(own_rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(own_rank),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "ZT_COMM_TIMEOUT_S": "3"}
    job = Job(f"alone{own_rank}", train_args(cfg, os.path.join(TMP, "alone.jsonl")), env)
    try:
        t0 = time.monotonic()
        rc = job.wait(30)
        took = time.monotonic() - t0
        out = job.output()
        other = 1 - own_rank
        tag = f"b (rank {own_rank} alone, rank {other} never starts)"
        check(f"{tag}: exits non-zero within 30 s", rc is not None and rc > 0,
              f"exit code {rc} after {took:.1f} s")
        check(f"{tag}: waits for the timeout (3 s) before giving up", took >= 2.5,
              f"gave up after {took:.1f} s")
        errors = [l for l in out.splitlines() if "error" in l.lower()]
        if own_rank == 0:
            pattern = r"^zt: error: creating the Gloo communicator of rank 0 of 2: rank 1 never"
        else:
            pattern = (r"^zt: error: rendezvous of rank 1 of 2: .*cannot reach the rendezvous "
                       r"store at 127\.0\.0\.1:\d+ within 3 s.*check that rank 0 is running")
        check(f"{tag}: exactly one error line naming the missing peer",
              len(errors) == 1 and re.search(pattern, errors[0]) is not None,
              f"error lines {errors}")
        check(f"{tag}: no crash output", CRASH.search(out) is None, out[-2000:])
    finally:
        job.cleanup()


def case_rank_frozen():
    """c) SIGSTOP rank 1 of 2 mid-training: rank 0's next collective times out."""
    cfg = write_config("frozen", dict(GOOD, train_batch_size=4))
    job, metrics = launch("frozen", 2, cfg)
    try:
        trained = wait_training(job, metrics)
        check("c: 2 ranks start training", trained, job.output()[-2000:])
        if not trained:
            return
        pids = rank_pids(job, 2)
        if 1 not in pids:
            check("c: rank 1 found", False, f"found {pids}")
            return
        os.kill(pids[1], signal.SIGSTOP)
        t0 = time.monotonic()
        limit = COMM_TIMEOUT_S + 20
        rc = job.wait(limit)
        took = time.monotonic() - t0
        out = job.output()
        check(f"c: zt launch exits non-zero within ZT_COMM_TIMEOUT_S + 20 = {limit} s",
              rc is not None and rc != 0, f"exit code {rc} after {took:.1f} s")
        check("c: rank 0 waited for the timeout", took >= COMM_TIMEOUT_S - 1,
              f"failed after {took:.1f} s, before the {COMM_TIMEOUT_S} s timeout")
        op = (rf"(all_reduce|reduce_scatter|all_gather|broadcast|barrier|send|recv)(_coalesced)? "
              rf"on rank 0 of 2 failed: no progress for {COMM_TIMEOUT_S} s.*ZT_COMM_TIMEOUT_S")
        check("c: rank 0's error names the operation and the timeout",
              re.search(op, out) is not None, out[-2000:])
        line = next((l for l in out.splitlines() if l.startswith("zt launch:")), "")
        check("c: the launcher names the failed rank 0 and stops the other",
              re.search(r"rank 0 \(pid \d+\) exited with code [1-9]\d*.*stopped the other 1 "
                        r"running rank", line) is not None and f"exiting with {rc}" in line,
              f"line {line!r}")
        alive = job.survivors_after(5)
        check("c: the frozen rank is stopped, nothing left alive", not alive,
              f"still alive: {alive}")
        check("c: no crash output", CRASH.search(out) is None, out[-2000:])
    finally:
        job.cleanup()


def case_rank_silent():
    """e) SIGSTOP rank 1 of 2 with ZT_HEARTBEAT_TIMEOUT_S=3 (the collective timeout is 10 s): the
    launcher sees the silent rank first and stops the job with 124, naming it and its step."""
    cfg = write_config("silent", dict(GOOD, train_batch_size=4))
    job, metrics = launch("silent", 2, cfg, extra_env={"ZT_HEARTBEAT_TIMEOUT_S": "3"})
    try:
        trained = wait_training(job, metrics)
        check("e: 2 ranks start training", trained, job.output()[-2000:])
        if not trained:
            return
        pids = rank_pids(job, 2)
        if 1 not in pids:
            check("e: rank 1 found", False, f"found {pids}")
            return
        time.sleep(2)  # a heartbeat (one a second) that carries a step
        os.kill(pids[1], signal.SIGSTOP)
        t0 = time.monotonic()
        rc = job.wait(COMM_TIMEOUT_S + 20)
        took = time.monotonic() - t0
        out = job.output()
        check("e: zt launch exits 124 before the collective timeout", rc == 124 and
              took < COMM_TIMEOUT_S, f"exit code {rc} after {took:.1f} s")
        line = next((l for l in out.splitlines() if l.startswith("zt launch:")), "")
        check("e: the launcher names the silent rank, its host and last step",
              re.search(rf"rank 1 \(pid {pids[1]}\) on \S+ sent no heartbeat for \d+ s, its last "
                        r"step \d+", line) is not None, f"line {line!r}")
        check("e: nothing left alive", not job.survivors_after(5), "ranks still alive")
    finally:
        job.cleanup()


def case_bad_batch():
    """d) train_batch_size 10, micro batch 3, world 2: 10 != 3 * 1 * 2."""
    cfg = write_config("badbatch", {"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3,
                                    "zero_optimization": {"stage": 1}})
    logs = tempfile.mkdtemp(prefix="badbatch_logs_", dir=TMP)
    job, _ = launch("badbatch", 2, cfg, launcher_flags=("--enable_each_rank_log", logs))
    try:
        t0 = time.monotonic()
        rc = job.wait(20)
        took = time.monotonic() - t0
        out = job.output()
        check("d: zt launch exits non-zero within 20 s", rc is not None and rc != 0,
              f"exit code {rc} after {took:.1f} s")
        msg = ("Check batch related parameters. train_batch_size is not equal to "
               "micro_batch_per_gpu * gradient_acc_step * world_size 10 != 3 * 1 * 2")
        per_rank = {}
        for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            m = re.search(r"_rank(\d+)\.log$", name)
            if m:
                with open(os.path.join(logs, name), errors="replace") as f:
                    per_rank[int(m.group(1))] = f.read()
        # The first rank to fail makes the launcher SIGTERM the other, which may not have read
        # its config yet: its log is then empty. Any rank that got that far says the same thing.
        said = [r for r, t in per_rank.items() if msg in t]
        other = {r: t for r, t in per_rank.items() if t.strip() and msg not in t}
        check("d: every rank that reached the config says DeepSpeed's batch message",
              sorted(per_rank) == [0, 1] and said and not other,
              f"logs {per_rank}")
        line = next((l for l in out.splitlines() if l.startswith("zt launch:")), "")
        check("d: the launcher names the failing rank, its code and its log",
              re.search(rf"rank [01] \(pid \d+\) exited with code {rc}; log: "
                        rf"{re.escape(logs)}/\d+_rank[01]\.log", line) is not None,
              f"line {line!r}")
        check("d: nothing left alive", not job.survivors_after(5), "ranks still alive")
        check("d: no crash output", CRASH.search(out + "".join(per_rank.values())) is None, out)
    finally:
        job.cleanup()


def main():
    start = time.monotonic()
    try:
        for case in (case_bad_batch, lambda: case_rank_never_arrives(0),
                     lambda: case_rank_never_arrives(1), case_rank_killed, case_rank_frozen,
                     case_rank_silent):
            try:
                case()
            except Exception as e:  # a broken case is a failed check; the others still run
                check(getattr(case, "__doc__", None) or "case", False, repr(e))
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print(f"{passed} passed, {len(failures)} failed ({time.monotonic() - start:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
