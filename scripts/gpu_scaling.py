#!/usr/bin/env python3
"""ZeRO scaling runs on one host with several GPUs (4 or 8 H200 expected), in one call.

Runs on the GPU machine over a bundle made by scripts/gpu_bundle.sh, from the repository root's
copy that holds gpu_bundle/ and bench/. Every run is one benchmark process tree under a time
limit; its stdout and stderr go to NAME.out and NAME.log under ${OUT:-gpu_out}/scaling.

Plans (--plans, comma-separated, run in that order):
  tests     zt_gpu_tests on one GPU, alone and first (its CPU references keep every core busy:
            beside it, two-GPU runs measured half their speed).
  1.3b      gpt-1.3b (24 x 2048), micro-batch 4 per GPU: ZeroTrain stages 3, 2, 1
            (bench/gpt2_bench.cc) and PyTorch FSDP2 with reshard_after_forward (~ZeRO-3) and DDP
            (bench/zero_torch.py under torchrun) on 1, 2, 4 and 8 GPUs (as far as the host has
            them), FSDP2 without reshard (~ZeRO-2) on all GPUs; then ZeroTrain stage 3 + CPU
            optimizer offload next to FSDP2 + CPUOffloadPolicy on all GPUs.
  7b        the same for gpt-6.7b (32 x 4096), micro-batch 1 per GPU, without DDP.
  largest   the largest model each stage trains on all GPUs, micro-batch 1: a ladder per stage
            (1, 2, 3, and 3 + CPU offload), each from the size below its expected limit upwards,
            stopping at the first failure.
  cpuadam   zt_bench_cpu_adam next to PyTorch's fused CPU AdamW (bench/cpu_adam_torch.py).
All at sequence 1024, bf16 compute with fp32 master weights, AdamW, clipping 1.0; timed steps are
the median of --steps after --warmup (offload and ladder runs: fewer, see below).

Scheduling: runs start in plan order on free GPUs (first in, first out; a run that does not fit
waits and holds back those after it). Runs of 1, 2 or 4 GPUs share the host with other runs on
disjoint GPUs (aligned blocks: 0-1, 2-3, 0-3, ...); runs that use host cores heavily (CPU
offload, the ladders, cpuadam) and runs on every GPU start only when nothing else runs. Each
run's limit is the least of its cap and the time left before --budget (a run left under 25 s is
skipped and reported so); a hang or an out-of-memory rank ends that run alone. Measured on 8
H200s: ZeroTrain's runs give the same figures beside others as alone, but PyTorch FSDP2 on one
GPU, whose step is bound by its Python host work, ran about 20% slower beside others: --solo
runs everything alone, for figures to quote when the call has the time.

Results: runs.jsonl (one line per run: outcome, GPUs, the runs it shared the host with),
results.jsonl (that line merged with the benchmark's JSON line), and the short table printed
last (also summary.txt). With --append, rows of an earlier call in the same folder are kept and
reported with this call's (a later row with the same name replaces an earlier one). Exit status
1 when a scaling run failed or was skipped or a ladder could not train its first model.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "gpu_bundle", "bin")
GIB = 2**30
MIN_RUN_S = 25
# ZeroTrain's zero_optimization tuning in every run: buckets of 5e7 elements reduced on the
# communication stream while backward runs.
ZERO_KEYS = '"reduce_bucket_size": 50000000, "overlap_comm": true'
# Ladders (smallest first), each starting at or below the size its stage is expected to reach and
# ending at the first size the engine's start-up check refuses. Per GPU, stage 1 holds 6 + 16/N
# bytes per parameter, stage 2 2 + 16/N, stage 3 16/N (docs/zero.md), stage 3 + offload 6/N on
# the GPU and 12/N pinned on the host per rank. H200s have 140 GiB each; the 8-GPU host 560 GiB of
# host memory, the 4-GPU host 512 GiB. On 8 that expects gpt-13b at stage 1, gpt-30b at stage 2,
# gpt-50b at stage 3 and gpt-40b at stage 3 + offload (host-bound: 12 bytes a parameter); on 4
# gpt-13b, gpt-20b, gpt-30b and gpt-40b.
LADDERS = {
    8: {
        "s3": "gpt-40b gpt-50b gpt-65b",
        "s2": "gpt-20b gpt-30b gpt-40b",
        "s1": "gpt-13b gpt-20b",
        "s3off": "gpt-30b gpt-40b gpt-50b",
    },
    4: {
        "s3": "gpt-20b gpt-30b gpt-40b",
        "s2": "gpt-13b gpt-20b gpt-30b",
        "s1": "gpt-6.7b gpt-13b gpt-20b",
        "s3off": "gpt-30b gpt-40b gpt-50b",
    },
}


def ladders_for(ngpu):
    """The ladder set of the largest GPU count in LADDERS not above ngpu (else the smallest)."""
    fit = [n for n in LADDERS if n <= ngpu]
    return LADDERS[max(fit) if fit else min(LADDERS)]


class Run:
    def __init__(self, section, name, impl, gpus, model, batch, argv, env=None, exclusive=False,
                 cap=150, ladder=None, kind="bench"):
        self.section, self.name, self.impl, self.gpus = section, name, impl, gpus
        self.model, self.batch, self.argv, self.env = model, batch, argv, env or {}
        self.exclusive, self.cap, self.ladder, self.kind = exclusive, cap, ladder, kind
        self.ids, self.proc, self.t0, self.rc, self.secs = [], None, None, None, 0
        self.shared = set()


class Plan:
    def __init__(self, args, ngpu, ncores):
        self.a, self.ngpu, self.ncores = args, ngpu, ncores
        self.port = 29700
        self.runs = []
        self.torch_ld = os.environ.get("ZT_TORCH_LD_LIBRARY_PATH", "")

    def counts(self):
        cs = [c for c in self.a.counts if c <= self.ngpu]
        return cs if self.ngpu in cs or self.a.exact_counts else cs + [self.ngpu]

    def zt(self, section, impl, stage, n, model, batch, steps, warmup, offload=False, **kw):
        bench = [os.path.join(BIN, "zt_bench_gpt2"), "--model", model, "--batch", str(batch),
                 "--seq", "1024", "--dtype", "bf16", "--steps", str(steps), "--warmup",
                 str(warmup), "--stage", str(stage), "--zero-keys", self.a.zero_keys]
        if offload:
            bench += ["--offload-optimizer", "cpu"]
        name = kw.pop("name", f"{section}_{impl}_n{n}")
        run = Run(section, name, impl, n, model, batch, None, **kw)
        run.build = lambda ids: self._zt_argv(bench, ids, offload)
        self.runs.append(run)
        return run

    def _zt_argv(self, bench, ids, bind):
        if len(ids) == 1:
            return bench, {"CUDA_VISIBLE_DEVICES": str(ids[0])}
        self.port += 1
        launch = [os.path.join(BIN, "zt"), "launch", "--include",
                  "localhost:" + ",".join(map(str, ids)), "--master_port", str(self.port)]
        if bind:
            launch.append("--bind_cores_to_rank")
        return launch + bench, {}

    def torch(self, section, impl, n, model, batch, steps, warmup, **kw):
        script = ["python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                  str(n), os.path.join(ROOT, "bench", "zero_torch.py"), "--impl", impl,
                  "--model", model, "--batch", str(batch), "--seq", "1024", "--steps", str(steps),
                  "--warmup", str(warmup)]
        env = {"LD_LIBRARY_PATH": self.torch_ld}
        if impl == "fsdp2-offload":  # torchrun would set 1 thread per rank for several ranks
            env["OMP_NUM_THREADS"] = str(max(1, self.ncores // n))
        run = Run(section, f"{section}_torch-{impl}_n{n}", f"torch-{impl}", n, model, batch, None,
                  **kw)
        run.build = lambda ids: (script, {**env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, ids))})
        self.runs.append(run)
        return run

    def scaling(self, section, model, batch):
        a = self.a
        # Fewest GPUs first: the one- and two-GPU runs pack onto the host together.
        for n in self.counts():
            for stage in a.stages:
                self.zt(section, f"zerotrain-s{stage}", stage, n, model, batch, a.steps, a.warmup)
            for impl in a.torch:
                # DDP keeps the whole fp32 model state on every GPU (16 bytes a parameter, 107 GB
                # at 6.7B): only in the 1.3B plan.
                if impl != "ddp" or model == "gpt-1.3b":
                    self.torch(section, impl, n, model, batch, a.steps, a.warmup)
        if a.noreshard:
            self.torch(section, "fsdp2-noreshard", self.ngpu, model, batch, a.steps, a.warmup)
        if a.offload:
            for n in a.offload_counts or [self.ngpu]:
                if n > self.ngpu:
                    continue
                self.zt(section, "zerotrain-s3-offload", 3, n, model, batch, a.offload_steps, 2,
                        offload=True, exclusive=True, cap=a.offload_cap)
                self.torch(section, "fsdp2-offload", n, model, batch, a.offload_steps, 2,
                           exclusive=True, cap=a.offload_cap)

    def largest(self):
        for key in self.a.ladders:
            stage = 3 if key.startswith("s3") else int(key[1])
            offload = key == "s3off"
            models = ladders_for(self.ngpu)[key].split()
            impl = f"zerotrain-s{stage}" + ("-offload" if offload else "")
            ladder = [self.zt("largest", impl, stage, self.ngpu, m, 1, 4, 2, offload=offload,
                              exclusive=True, cap=self.a.ladder_cap, name=f"largest_{key}_{m}")
                      for m in models]
            for i, run in enumerate(ladder):
                run.ladder = ladder[:i]  # runs only if every smaller model of its ladder ran

    def tests(self):
        run = Run("tests", "gpu_tests", "zt_gpu_tests", 1, "-", 0, None, exclusive=True, cap=300,
                  kind="tests")
        run.build = lambda ids: ([os.path.join(BIN, "zt_gpu_tests"), "--gtest_brief=1"],
                                 {"CUDA_VISIBLE_DEVICES": str(ids[0])})
        self.runs.append(run)

    def cpuadam(self):
        for impl, argv in (("zerotrain-cpu-adam", [os.path.join(BIN, "zt_bench_cpu_adam")]),
                           ("torch-cpu-adamw",
                            ["python3", os.path.join(ROOT, "bench", "cpu_adam_torch.py")])):
            run = Run("cpuadam", f"cpuadam_{impl}", impl, 0, "-", 0, None, exclusive=True, cap=90,
                      kind="cpuadam")
            env = {} if impl.startswith("zero") else {"LD_LIBRARY_PATH": self.torch_ld}
            run.build = lambda ids, argv=argv, env=env: (argv + ["--elements", "200000000"], env)
            self.runs.append(run)


def aligned_block(free, n, ngpu):
    """The first n-aligned block of n free GPUs (n a power of two), else the first n free."""
    if n & (n - 1) == 0 and ngpu % n == 0:
        for start in range(0, ngpu, n):
            block = list(range(start, start + n))
            if all(g in free for g in block):
                return block
        return None
    ids = sorted(free)[:n]
    return ids if len(ids) == n else None


def schedule(runs, ngpu, ncores, out, budget_s, log):
    start = time.monotonic()
    pending, running = list(runs), []
    free = set(range(ngpu))

    def left():
        return budget_s - (time.monotonic() - start)

    def finish(run, rc):
        run.rc, run.secs = rc, round(time.monotonic() - run.t0)
        free.update(run.ids)
        note = "ok" if rc == 0 else f"exit {rc}"
        log(f"  {run.name}: {note} ({run.secs} s, GPUs {run.ids or '-'})")
        if rc != 0:
            try:
                tail = open(f"{out}/{run.name}.log", errors="replace").read().splitlines()[-3:]
            except OSError:
                tail = []
            for line in tail:
                log("    " + line[:200])

    while pending or running:
        for run in list(running):
            rc = run.proc.poll()
            if rc is not None:
                running.remove(run)
                finish(run, 124 if rc == -9 or rc == 124 else rc)
            elif time.monotonic() - run.t0 > run.limit:
                os.killpg(run.proc.pid, 15)
                try:
                    run.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(run.proc.pid, 9)
                    run.proc.wait()
                running.remove(run)
                finish(run, 124)
        while pending:
            run = pending[0]
            if run.ladder and any(r.rc is None for r in run.ladder):
                break  # the smaller model of its ladder is still running
            if run.ladder and any(r.rc != 0 for r in run.ladder):
                pending.pop(0)
                run.rc = "not tried"
                continue
            limit = min(run.cap, left() - 5)
            if limit < MIN_RUN_S:
                pending.pop(0)
                run.rc = "skipped"
                log(f"  {run.name}: skipped ({int(left())} s of the budget left)")
                continue
            solo = run.exclusive or run.gpus == ngpu
            if solo and running:
                break
            if running and any(r.exclusive or r.gpus == ngpu for r in running):
                break
            ids = aligned_block(free, run.gpus, ngpu) if run.gpus else []
            if ids is None:
                break
            pending.pop(0)
            argv, env = run.build(ids)
            if not solo:
                # Runs beside others get their GPUs' share of the cores for OpenMP (start-up draws,
                # CPU kernels), so that one run's busy threads do not slow another's host thread.
                env = {"OMP_NUM_THREADS": str(max(1, ncores * max(run.gpus, 1) // ngpu)), **env}
            run.ids, run.limit, run.t0 = ids, limit, time.monotonic()
            with open(f"{out}/{run.name}.out", "w") as fo, open(f"{out}/{run.name}.log", "w") as fe:
                run.proc = subprocess.Popen(argv, stdout=fo, stderr=fe, cwd=ROOT,
                                            env={**os.environ, **run.env, **env},
                                            start_new_session=True)
            free.difference_update(ids)
            for other in running:
                other.shared.add(run.name)
                run.shared.add(other.name)
            running.append(run)
        time.sleep(0.5)
    return round(time.monotonic() - start)


def bench_line(out, name):
    """The benchmark's JSON line from NAME.out (launchers may print other lines on stdout)."""
    res = None
    try:
        for line in open(f"{out}/{name}.out"):
            if line.startswith("{"):
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if "tokens_per_s" in r or "ms_median" in r or "step_ms_median" in r:
                    res = r
    except OSError:
        pass
    return res


def log_has(out, name, text):
    try:
        return text in open(f"{out}/{name}.log", errors="replace").read()
    except OSError:
        return False


def status(out, row):
    rc = row["rc"]
    if rc in ("skipped", "not tried"):
        return {"skipped": "skipped (time budget)",
                "not tried": "not tried (a smaller model failed)"}[rc]
    if rc == 0:
        return "ok" if row.get("res") or row["kind"] == "tests" else "no JSON line"
    if log_has(out, row["name"], "the model state alone needs"):
        return f"model state larger than the GPU: refused at start (exit {rc})"
    if log_has(out, row["name"], "offload_optimizer keeps"):
        return f"offloaded state larger than the host's memory: refused at start (exit {rc})"
    if log_has(out, row["name"], "out of GPU memory") or log_has(out, row["name"], "OutOfMemory"):
        return f"out of GPU memory (exit {rc})"
    if log_has(out, row["name"], "out of host memory") or log_has(out, row["name"], "bad_alloc"):
        return f"out of host memory (exit {rc})"
    if rc == 124:
        return f"time limit after {row['secs']} s"
    return f"exit {rc}"


def report(out, rows, ngpu, device, secs, args):
    lines = []
    p = lines.append
    p(f"{ngpu} x {device}; seq 1024, bf16 compute, fp32 master weights, AdamW; tokens/s over "
      "all GPUs, peak = rank 0's GPU memory")
    tests = [r for r in rows if r["kind"] == "tests"]
    for r in tests:
        summary = ""
        try:
            txt = open(f"{out}/{r['name']}.out", errors="replace").read().splitlines()
            summary = "; ".join(l.strip() for l in txt if l.startswith("[  PASSED") or
                                l.startswith("[  FAILED") or "tests ran" in l)
        except OSError:
            pass
        p(f"GPU tests (zt_gpu_tests, GPU {r.get('ids')}): {r['status']} {summary}")
    for section in dict.fromkeys(r["section"] for r in rows if r["kind"] == "bench"):
        if section == "largest":
            continue
        sect = [r for r in rows if r["section"] == section]
        by = {(r["impl"], r["gpus"]): r for r in sect}
        m = sect[0]
        p("")
        p(f"{m['model']}, micro-batch {m['batch']} per GPU")
        p(f"{'impl':<24}{'GPUs':>5}{'tokens/s':>11}{'tok/s/GPU':>11}{'efficiency':>11}"
          f"{'peak GiB':>10}  status")
        for r in sect:
            res = r.get("res")
            if not res:
                p(f"{r['impl']:<24}{r['gpus']:>5}{'-':>11}{'-':>11}{'-':>11}{'-':>10}  {r['status']}")
                continue
            tps = res["tokens_per_s"]
            one = by.get((r["impl"], 1))
            eff = (f"{tps / (r['gpus'] * one['res']['tokens_per_s']):.3f}"
                   if one and one.get("res") else "-")
            shared = f" (beside {len(r['shared'])})" if r["shared"] else ""
            p(f"{r['impl']:<24}{r['gpus']:>5}{tps:>11.0f}{tps / r['gpus']:>11.0f}{eff:>11}"
              f"{res['peak_mem_bytes'] / GIB:>10.2f}  {r['status']}{shared}")
        gpus = sorted({r["gpus"] for r in sect})
        for a, b in (("zerotrain-s3", "torch-fsdp2-reshard"), ("zerotrain-s2", "torch-fsdp2-noreshard"),
                     ("zerotrain-s1", "torch-ddp"),
                     ("zerotrain-s3-offload", "torch-fsdp2-offload")):
            cells = []
            for n in gpus:
                ra, rb = by.get((a, n)), by.get((b, n))
                if ra and rb and ra.get("res") and rb.get("res"):
                    cells.append(f"{n}: {ra['res']['tokens_per_s'] / rb['res']['tokens_per_s']:.2f}x"
                                 f" tok/s, {ra['res']['peak_mem_bytes'] / rb['res']['peak_mem_bytes']:.2f}x mem")
            if cells:
                p(f"  {a} / {b}:  " + ";  ".join(cells))
    big = [r for r in rows if r["section"] == "largest"]
    if big:
        p("")
        p(f"largest model on {ngpu} GPUs, micro-batch 1 (median of 4 steps after 2 warm-up)")
        p(f"{'impl':<24}{'model':<10}{'params':>8}{'tokens/s':>10}{'peak GiB':>10}"
          f"{'host GiB/rank':>14}  status")
        for r in big:
            res = r.get("res")
            if res:
                host = res.get("model_state_bytes_host", 0) / GIB
                p(f"{r['impl']:<24}{r['model']:<10}{res['params'] / 1e9:>7.2f}B"
                  f"{res['tokens_per_s']:>10.0f}{res['peak_mem_bytes'] / GIB:>10.2f}"
                  f"{host:>14.2f}  {r['status']}")
            else:
                p(f"{r['impl']:<24}{r['model']:<10}{'-':>8}{'-':>10}{'-':>10}{'-':>14}  "
                  f"{r['status']}")
        for impl in dict.fromkeys(r["impl"] for r in big):
            ok = [r for r in big if r["impl"] == impl and r.get("res")]
            best = max(ok, key=lambda r: r["res"]["params"]) if ok else None
            p(f"  => {impl}: " + (f"{best['model']} ({best['res']['params'] / 1e9:.2f}B)"
                                  if best else "none ran"))
    adam = [r for r in rows if r["kind"] == "cpuadam"]
    if adam:
        p("")
        p("CPU AdamW step + bf16 copy, 200M fp32 elements, all cores (median ms)")
        zt_ms = next((r["res"]["ms_median"] for r in adam
                      if r["impl"].startswith("zero") and r.get("res")), None)
        for r in adam:
            res = r.get("res")
            if res:
                ratio = f"  torch/zerotrain {res['ms_median'] / zt_ms:.2f}x" if zt_ms else ""
                p(f"{r['impl']:<24}{res['ms_median']:>10.1f} ms{ratio}")
            else:
                p(f"{r['impl']:<24}{'-':>10}     {r['status']}")
    p(f"\nrun time {secs} s; results in {out}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plans", default="tests,1.3b")
    ap.add_argument("--budget", type=int, default=540, help="seconds for the whole call")
    ap.add_argument("--counts", default="1,2,4,8")
    ap.add_argument("--exact-counts", action="store_true", help="do not add the host's GPU count")
    ap.add_argument("--stages", default="3,2,1")
    ap.add_argument("--torch", default="fsdp2-reshard,ddp", help="peers on every GPU count")
    ap.add_argument("--no-noreshard", dest="noreshard", action="store_false")
    ap.add_argument("--no-offload", dest="offload", action="store_false")
    ap.add_argument("--offload-counts", default="", help="default: all GPUs only")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--offload-steps", type=int, default=6)
    ap.add_argument("--cap", type=int, default=150, help="seconds one scaling run may take")
    ap.add_argument("--offload-cap", type=int, default=240)
    ap.add_argument("--ladder-cap", type=int, default=240)
    ap.add_argument("--ladders", default="s3,s2,s1,s3off")
    ap.add_argument("--zero-keys", default=os.environ.get("ZT_BENCH_ZERO_KEYS", ZERO_KEYS))
    ap.add_argument("--append", action="store_true", help="keep an earlier call's rows")
    ap.add_argument("--only", default="", help="run only these run names (comma-separated)")
    ap.add_argument("--solo", action="store_true", help="every run alone on the host")
    a = ap.parse_args()
    a.counts = [int(c) for c in a.counts.split(",")]
    a.stages = [int(s) for s in a.stages.split(",") if s]
    a.torch = [t for t in a.torch.split(",") if t]
    a.offload_counts = [int(c) for c in a.offload_counts.split(",") if c]
    a.ladders = [k for k in a.ladders.split(",") if k]
    for k in a.ladders:
        if k not in LADDERS[8]:
            sys.exit(f"gpu_scaling.py: --ladders: unknown ladder {k}; known: {', '.join(LADDERS[8])}")

    out = os.path.abspath(os.path.join(os.environ.get("OUT", "gpu_out"), "scaling"))
    os.makedirs(out, exist_ok=True)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    # torch runs with the library path it was installed for (its own NCCL and CUDA libraries win).
    os.environ.setdefault("ZT_TORCH_LD_LIBRARY_PATH", os.environ.get("LD_LIBRARY_PATH", ""))
    os.environ["LD_LIBRARY_PATH"] = ":".join(
        [os.path.join(ROOT, "gpu_bundle", "lib"), "/usr/local/cuda/lib64",
         os.environ.get("LD_LIBRARY_PATH", "")])
    # A hang fails in minutes, not DeepSpeed's 30; a failed rank takes its peers down in 5 s.
    os.environ["ZT_COMM_TIMEOUT_S"] = "300"
    os.environ["ZT_LAUNCH_GRACE_S"] = "5"

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True)
    gpu_lines = [l for l in smi.stdout.splitlines() if l.strip()]
    ngpu = len(gpu_lines)
    try:  # the host memory the offload rungs are measured against
        meminfo = "".join(open("/proc/meminfo").readlines()[:3])
    except OSError:
        meminfo = ""
    open(f"{out}/gpu.txt", "w").write(smi.stdout + meminfo)
    if ngpu < 1:
        sys.exit("gpu_scaling.py: nvidia-smi lists no GPU; nothing to measure")
    device = gpu_lines[0].split(",")[0].strip()
    ncores = len(os.sched_getaffinity(0))
    print(f"{ngpu} x {gpu_lines[0]}; {ncores} cores", flush=True)

    plan = Plan(a, ngpu, ncores)
    for name in a.plans.split(","):
        if name == "tests":
            plan.tests()
        elif name == "1.3b":
            plan.scaling("1.3b", "gpt-1.3b", 4)
        elif name == "7b":
            plan.scaling("7b", "gpt-6.7b", 1)
        elif name == "largest":
            plan.largest()
        elif name == "cpuadam":
            plan.cpuadam()
        else:
            sys.exit(f"gpu_scaling.py: --plans: unknown plan {name}; "
                     "known: tests, 1.3b, 7b, largest, cpuadam")
    if a.only:
        keep = set(a.only.split(","))
        plan.runs = [r for r in plan.runs if r.name in keep]
        for r in plan.runs:
            r.ladder = [x for x in r.ladder if x.name in keep] if r.ladder else r.ladder
    if a.solo:
        for r in plan.runs:
            r.exclusive = True
    # The test suite first, alone.
    plan.runs = ([r for r in plan.runs if r.kind == "tests"] +
                 [r for r in plan.runs if r.kind != "tests"])

    def log(msg):
        print(msg, flush=True)

    log(f"{len(plan.runs)} runs, budget {a.budget} s")
    secs = schedule(plan.runs, ngpu, ncores, out, a.budget, log)

    rows = []
    if a.append and os.path.exists(f"{out}/runs.jsonl"):
        rows = [json.loads(l) for l in open(f"{out}/runs.jsonl") if l.strip()]
    names = {r.name for r in plan.runs}
    rows = [r for r in rows if r["name"] not in names]
    for r in plan.runs:
        rows.append({"section": r.section, "name": r.name, "impl": r.impl, "gpus": r.gpus,
                     "ids": r.ids, "model": r.model, "batch": r.batch, "kind": r.kind,
                     "rc": r.rc, "secs": r.secs, "shared": sorted(r.shared)})
    with open(f"{out}/runs.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with open(f"{out}/results.jsonl", "w") as f:
        for row in rows:
            row["res"] = bench_line(out, row["name"]) if row["rc"] == 0 else None
            row["status"] = status(out, row)
            f.write(json.dumps({**(row["res"] or {}),
                                **{k: v for k, v in row.items() if k != "res"}}) + "\n")
    text = report(out, rows, ngpu, device, secs, a)
    open(f"{out}/summary.txt", "w").write(text + "\n")
    print("\n" + text, flush=True)
    bad = [r for r in rows if r["kind"] in ("bench", "tests") and r["section"] != "largest"
           and r["rc"] != 0]
    first_rungs = {}
    for r in rows:
        if r["section"] == "largest":
            first_rungs.setdefault(r["impl"], r)
    bad += [r for r in first_rungs.values() if r["rc"] != 0]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
