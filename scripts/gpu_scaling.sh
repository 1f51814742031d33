#!/usr/bin/env bash
# Runs on a machine with N GPUs of one host (N = `nvidia-smi -L | wc -l`, 4 expected: H200 x4),
# over a bundle made by scripts/gpu_bundle.sh, from the repository root's copy that holds
# gpu_bundle/ and bench/, in one call of at most about 8.5 minutes:
#   (1) scaling at a fixed micro-batch per GPU: ZeroTrain (bench/gpt2_bench.cc) gpt-1.3b,
#       micro-batch 4, seq 1024, bf16, ZeRO stage 3 and stage 1, on 1, 2 and 4 GPUs (1 GPU:
#       zt_bench_gpt2 alone on CUDA_VISIBLE_DEVICES=0, no launcher; more: `zt launch --num_gpus`),
#       median of 15 timed steps after 3 warm-up. Efficiency(N) = tokens/s(N) / (N * tokens/s(1)).
#   (2) its peers on the same GPU counts, model, batch and sequence (bench/zero_torch.py under
#       torchrun): PyTorch FSDP2 with reshard_after_forward True (~ZeRO-3) and DDP (~ZeRO-0);
#       tokens/s per GPU, peak memory per GPU (rank 0's), ratios.
#   (3) the largest model ZeroTrain trains at stage 3 on all N GPUs without offload: micro-batch
#       1, seq 1024, bf16, 5 timed steps after 2 warm-up, from gpt-1.3b up in parameter count;
#       stops at the first failure (an out-of-memory rank aborts with an "out of GPU memory"
#       line and the launcher exits non-zero). A name zt_bench_gpt2 does not know (it answers
#       "unknown model": gpt2_config_named has no such entry) is listed as such and skipped.
# Each part runs whatever happened to the others. Every run is under `timeout -k 15`, its limit
# the time left before its part's deadline (parts 1, 2, 3 end by 310, 420, 480 s by default, so
# a hang in one part leaves the later ones their share) and at most ZT_SCALING_RUN_CAP_S; a run
# that would get under 25 s is skipped and reported as such. NVLink SHARP stays off
# (NCCL_NVLS_ENABLE=0: the lent machines do not support NVLS multicast). Results go to
# ${OUT:-gpu_out}/scaling: runs.jsonl (one line per run: command outcome), results.jsonl (that
# line merged with the benchmark's own JSON line), NAME.out / NAME.log per run, and the short
# table printed last, also written to summary.txt. Exits non-zero when a run of part 1 or 2
# failed or was skipped, or when part 3 could not train even its first model.
#
# Knobs: ZT_SCALING_PARTS (default 123), ZT_SCALING_STEPS (timed steps of parts 1-2, default 15),
# ZT_SCALING_LADDER (part 3's names, smallest first), ZT_SCALING_BUDGET_S (default 480; parts 1
# and 2 end 170 and 60 s before it), ZT_SCALING_RUN_CAP_S (one run at most, default 150).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-gpu_out}/scaling
mkdir -p "$out"
out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0
# torch runs with the library path it was installed for (its own NCCL and CUDA libraries win).
torch_ld=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$root/gpu_bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# A hang fails in minutes, not DeepSpeed's 30; a failed rank takes its peers down in 5 s.
export ZT_COMM_TIMEOUT_S=300
export ZT_LAUNCH_GRACE_S=5
bin=$root/gpu_bundle/bin
parts=${ZT_SCALING_PARTS:-123}
steps=${ZT_SCALING_STEPS:-15}
warmup=3
model=gpt-1.3b batch=4 seq=1024
# gpt2-xl (48 x 1600, 1.56B parameters) is larger than gpt-1.3b (24 x 2048, 1.31B) despite its
# name; the GPT-3 paper's sizes after it are tried if zt knows them.
ladder=${ZT_SCALING_LADDER:-gpt-1.3b gpt2-xl gpt-2.7b gpt-6.7b gpt-13b}
budget_s=${ZT_SCALING_BUDGET_S:-480}
cap_s=${ZT_SCALING_RUN_CAP_S:-150}
min_run_s=25
deadline1=$((budget_s - 170)) deadline2=$((budget_s - 60)) deadline3=$budget_s
port=29700
start_s=$SECONDS

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
if ((ngpu < 1)); then
  echo "gpu_scaling.sh: nvidia-smi -L lists no GPU; nothing to measure" | tee "$out/summary.txt"
  exit 1
fi
# GPU counts: 1, 2, 4 as far as the machine has them, and all of them.
counts=()
for c in 1 2 4; do ((c <= ngpu)) && counts+=("$c"); done
[[ " ${counts[*]} " == *" $ngpu "* ]] || counts+=("$ngpu")
: >"$out/runs.jsonl"

# zt_cmd N: sets cmd to zt_bench_gpt2 on N GPUs: alone on GPU 0 for 1, else under `zt launch`
# with a fresh rendezvous port each time (no wait for a closing socket).
zt_cmd() {
  if (($1 == 1)); then
    cmd=(env CUDA_VISIBLE_DEVICES=0 "$bin"/zt_bench_gpt2)
  else
    port=$((port + 1))
    cmd=("$bin"/zt launch --num_gpus "$1" --master_port "$port" "$bin"/zt_bench_gpt2)
  fi
}
# torch_cmd N: sets cmd to torchrun (through python3 -m, which needs no script on PATH) with
# torch's own library path; --standalone rendezvouses on a free port it picks itself, fresh
# each launch.
torch_cmd() {
  cmd=(env LD_LIBRARY_PATH="$torch_ld")
  (($1 == 1)) && cmd+=(CUDA_VISIBLE_DEVICES=0)
  cmd+=(python3 -m torch.distributed.run --standalone --nproc_per_node "$1" bench/zero_torch.py)
}

# run_one PART NAME IMPL GPUS MODEL BATCH DEADLINE CMD...: runs CMD under `timeout -k 15` with
# the seconds left before DEADLINE (at most cap_s), stdout to NAME.out, stderr to NAME.log; one
# line to runs.jsonl. Sets rc: the exit status, 124/137 for a timeout, "skipped" when under
# min_run_s were left.
run_one() {
  local part=$1 name=$2 impl=$3 gpus=$4 mdl=$5 mb=$6 deadline=$7
  shift 7
  local left=$((deadline - (SECONDS - start_s))) t0=$SECONDS
  local limit=$((left < cap_s ? left : cap_s))
  if ((limit < min_run_s)); then
    rc=skipped
    echo "  $name: skipped ($left s left before the part's deadline)"
  else
    timeout -k 15 "$limit" "$@" >"$out/$name.out" 2>"$out/$name.log"
    rc=$?
    if ((rc == 0)); then
      echo "  $name: ok ($((SECONDS - t0)) s)"
    else
      echo "  $name: exit $rc after $((SECONDS - t0)) s (limit $limit s):"
      tail -3 "$out/$name.log" | sed 's/^/    /'
    fi
  fi
  printf '{"part": %s, "name": "%s", "impl": "%s", "gpus": %s, "model": "%s", "batch": %s, "rc": "%s", "secs": %s}\n' \
    "$part" "$name" "$impl" "$gpus" "$mdl" "$mb" "$rc" "$((SECONDS - t0))" >>"$out/runs.jsonl"
}

if [[ $parts == *1* ]]; then
  echo "== (1) ZeroTrain $model, micro-batch $batch/GPU, seq $seq, bf16, stages 3 and 1 on ${counts[*]} GPUs"
  for stage in 3 1; do
    for n in "${counts[@]}"; do
      zt_cmd "$n"
      run_one 1 "zt_s${stage}_n$n" "zerotrain-s$stage" "$n" "$model" "$batch" "$deadline1" \
        "${cmd[@]}" --model "$model" --batch "$batch" --seq "$seq" --dtype bf16 \
        --steps "$steps" --warmup "$warmup" --stage "$stage"
    done
  done
fi

if [[ $parts == *2* ]]; then
  echo "== (2) PyTorch FSDP2 (reshard) and DDP, same model, batch and sequence, on ${counts[*]} GPUs"
  for impl in fsdp2-reshard ddp; do
    for n in "${counts[@]}"; do
      torch_cmd "$n"
      run_one 2 "torch_${impl}_n$n" "torch-$impl" "$n" "$model" "$batch" "$deadline2" \
        "${cmd[@]}" --impl "$impl" --model "$model" --batch "$batch" --seq "$seq" \
        --steps "$steps" --warmup "$warmup"
    done
  done
fi

if [[ $parts == *3* ]]; then
  echo "== (3) largest model at ZeRO-3 on $ngpu GPUs, no offload: micro-batch 1, seq $seq, bf16"
  for m in $ladder; do
    zt_cmd "$ngpu"
    run_one 3 "largest_$m" zerotrain-s3 "$ngpu" "$m" 1 "$deadline3" \
      "${cmd[@]}" --model "$m" --batch 1 --seq "$seq" --dtype bf16 --steps 5 --warmup 2 --stage 3
    [[ $rc == 0 ]] && continue
    # A name zt does not know is no failure to train: the next name may still be known.
    [[ $rc != skipped ]] && grep -q "unknown model" "$out/largest_$m.log" && continue
    break
  done
fi

echo
python3 - "$out" "$ngpu" "$model" "$batch" "$seq" "$steps" "$warmup" "$ladder" \
  "$((SECONDS - start_s))" <<'PY' | tee "$out/summary.txt"
# The short table: part 1 and 2 rows with efficiencies and ratios, then part 3's ladder; also
# writes results.jsonl (each run's outcome merged with the benchmark's JSON line).
import json, sys
out, ngpu, model, batch, seq, steps, warmup, ladder, secs = sys.argv[1:]
ngpu = int(ngpu)


def result(name):
    """The benchmark's JSON line from NAME.out (launchers may print other lines on stdout)."""
    res = None
    try:
        for line in open(f"{out}/{name}.out"):
            if line.startswith("{"):
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if "tokens_per_s" in r:
                    res = r
    except OSError:
        pass
    return res


def log_has(name, text):
    try:
        return text in open(f"{out}/{name}.log", errors="replace").read()
    except OSError:
        return False


def status(run):
    rc = run["rc"]
    if rc == "skipped":
        return "skipped (time budget)"
    if rc == "0":
        return "ok" if run["res"] else "no JSON line"
    if log_has(run["name"], "unknown model"):
        return "not known to zt (no gpt2_config_named entry): skipped"
    if log_has(run["name"], "out of GPU memory"):
        return f"out of GPU memory (exit {rc})"
    if rc in ("124", "137"):
        return f"timeout after {run['secs']} s"
    return f"exit {rc}"


runs = []
for line in open(f"{out}/runs.jsonl"):
    run = json.loads(line)
    run["res"] = result(run["name"]) if run["rc"] == "0" else None
    run["status"] = status(run)
    runs.append(run)
with open(f"{out}/results.jsonl", "w") as f:
    for run in runs:
        # The run's own fields win: its impl names the stage ("zerotrain-s3"), the line's does not.
        f.write(json.dumps({**(run["res"] or {}),
                            **{k: v for k, v in run.items() if k != "res"}}) + "\n")

try:
    device = open(f"{out}/gpu.txt").readline().split(",")[0].strip()
except OSError:
    device = "unknown GPU"
gib = 2**30
print(f"{ngpu} x {device}: {model}, micro-batch {batch}/GPU, seq {seq}, bf16, "
      f"median of {steps} steps after {warmup} warm-up")
table = [r for r in runs if r["part"] in (1, 2)]
by = {(r["impl"], r["gpus"]): r for r in table}
if table:
    print(f"{'impl':<22}{'GPUs':>5}{'tokens/s':>11}{'tok/s/GPU':>11}{'efficiency':>12}"
          f"{'peak GiB/GPU':>14}  status")
for r in table:
    res = r["res"]
    if not res:
        print(f"{r['impl']:<22}{r['gpus']:>5}{'-':>11}{'-':>11}{'-':>12}{'-':>14}  {r['status']}")
        continue
    tps = res["tokens_per_s"]
    one = by.get((r["impl"], 1))
    eff = (f"{tps / (r['gpus'] * one['res']['tokens_per_s']):.3f}"
           if one and one["res"] else "n/a")
    print(f"{r['impl']:<22}{r['gpus']:>5}{tps:>11.0f}{tps / r['gpus']:>11.0f}{eff:>12}"
          f"{res['peak_mem_bytes'] / gib:>14.2f}  {r['status']}")
if table:
    print("(efficiency: tokens/s(N) / (N x tokens/s(1)) of the same impl; peak: rank 0's)")
    gpus = sorted({r["gpus"] for r in table})
    for a, b in (("zerotrain-s3", "torch-fsdp2-reshard"), ("zerotrain-s1", "torch-ddp")):
        cells = []
        for n in gpus:
            ra, rb = by.get((a, n)), by.get((b, n))
            if ra and rb and ra["res"] and rb["res"]:
                cells.append(f"{n}: {ra['res']['tokens_per_s'] / rb['res']['tokens_per_s']:.2f}x"
                             f" tok/s, {ra['res']['peak_mem_bytes'] / rb['res']['peak_mem_bytes']:.2f}x peak")
            else:
                cells.append(f"{n}: n/a")
        print(f"  {a} / {b} at N GPUs  " + ";  ".join(cells))

big = [r for r in runs if r["part"] == 3]
if big:
    print(f"\nlargest model at ZeRO-3 on {ngpu} GPUs without offload "
          f"(micro-batch 1, seq {seq}, bf16, median of 5 steps after 2 warm-up)")
    print(f"{'model':<12}{'params':>9}{'tokens/s':>11}{'peak GiB/GPU':>14}  status")
    tried = set()
    for r in big:
        tried.add(r["model"])
        res = r["res"]
        if res:
            print(f"{r['model']:<12}{res['params'] / 1e9:>8.2f}B{res['tokens_per_s']:>11.0f}"
                  f"{res['peak_mem_bytes'] / gib:>14.2f}  {r['status']}")
        else:
            print(f"{r['model']:<12}{'-':>9}{'-':>11}{'-':>14}  {r['status']}")
    for m in ladder.split():
        if m not in tried:
            print(f"{m:<12}{'-':>9}{'-':>11}{'-':>14}  not tried (stopped at the first failure)")
    ok = [r for r in big if r["res"]]
    if ok:
        best = max(ok, key=lambda r: r["res"]["params"])
        print(f"=> largest that ran: {best['model']} ({best['res']['params'] / 1e9:.2f}B "
              f"parameters), peak {best['res']['peak_mem_bytes'] / gib:.2f} GiB/GPU")
    else:
        print("=> no model ran")
print(f"run time {secs} s; results in {out}")
PY
# Non-zero when a run of part 1 or 2 failed or was skipped, or part 3's first model did not run.
python3 - "$out/runs.jsonl" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
bad = [r for r in runs if r["part"] in (1, 2) and r["rc"] != "0"]
big = [r for r in runs if r["part"] == 3]
sys.exit(1 if bad or (big and big[0]["rc"] != "0") else 0)
PY
