#!/usr/bin/env bash
# Runs on a machine with N GPUs of one host (N = `nvidia-smi -L | wc -l`, 4 expected: H200 x4),
# over a bundle made by scripts/gpu_bundle.sh, from the repository root's copy that holds
# gpu_bundle/ and bench/, in one call of at most about 8.5 minutes per selection of parts:
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
#   (4) stage 3 + CPU optimizer offload (ZeRO-Offload: zero_optimization.offload_optimizer
#       {device: cpu, pin_memory: true}) as part 1, on the same GPU counts, model and batch,
#       next to its peer PyTorch FSDP2 (reshard) with CPUOffloadPolicy(pin_memory=True); median
#       of ZT_SCALING_OFFLOAD_STEPS (default 8) timed steps after 2 warm-up. Each rank gets its
#       share of the cores for the CPU optimizer: `zt launch --bind_cores_to_rank`, and
#       OMP_NUM_THREADS = cores / N for torch (torchrun would set 1).
#   (5) the largest model at stage 3 + CPU offload on all N GPUs, as part 3 (ladder
#       ZT_SCALING_OFFLOAD_LADDER, default from gpt-6.7b, the largest part 3 reached on 4 H200s).
# Parts 1-3 are the default selection; run 4-5 in a second call (ZT_SCALING_PARTS=45): each
# selection shares ZT_SCALING_BUDGET_S among its parts (weights 310, 110, 60, 330, 150 s, so the
# default 123 ends parts 1, 2, 3 by 310, 420, 480 s, and 45 ends them by 330 and 480 s).
# Each part runs whatever happened to the others. Every run is under `timeout -k 15`, its limit
# the time left before its part's deadline (so a hang in one part leaves the later ones their
# share) and at most ZT_SCALING_RUN_CAP_S; a run that would get under 25 s is skipped and reported
# as such. NVLink SHARP stays off
# (NCCL_NVLS_ENABLE=0: the lent machines do not support NVLS multicast). Results go to
# ${OUT:-gpu_out}/scaling: runs.jsonl (one line per run: command outcome), results.jsonl (that
# line merged with the benchmark's own JSON line), NAME.out / NAME.log per run, and the short
# table printed last, also written to summary.txt (runs.jsonl is appended to, so a second call
# with other parts adds its rows to the same table). Exits non-zero when a run of part 1, 2 or 4
# failed or was skipped, or when part 3 or 5 could not train even its first model.
#
# Knobs: ZT_SCALING_MODEL / ZT_SCALING_BATCH (parts 1, 2, 4; default gpt-1.3b / 4),
# ZT_SCALING_STAGES (part 1, default "3 2 1"), ZT_SCALING_TORCH (part 2's impls, default
# "fsdp2-reshard ddp"), ZT_SCALING_COUNTS (GPU counts, default "1 2 4" and all),
# ZT_SCALING_OFFLOAD_COUNTS (part 4, default the same), ZT_BENCH_ZERO_KEYS (ZeroTrain's extra
# zero_optimization members), ZT_SCALING_PARTS (default 123), ZT_SCALING_STEPS (timed steps of parts 1-2, default 15),
# ZT_SCALING_OFFLOAD_STEPS (part 4, default 8), ZT_SCALING_LADDER (part 3's names, smallest
# first), ZT_SCALING_OFFLOAD_LADDER (part 5's), ZT_SCALING_BUDGET_S (default 480),
# ZT_SCALING_RUN_CAP_S (one run at most, default 150), ZT_SCALING_FRESH=1 (empty runs.jsonl
# first; by default it is emptied only when part 1 or 3 is selected).
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
offload_steps=${ZT_SCALING_OFFLOAD_STEPS:-8}
offload_warmup=2
model=${ZT_SCALING_MODEL:-gpt-1.3b} batch=${ZT_SCALING_BATCH:-4} seq=1024
stages=${ZT_SCALING_STAGES:-3 2 1}
torch_impls=${ZT_SCALING_TORCH:-fsdp2-reshard ddp}
# ZeroTrain's zero_optimization tuning in every run: buckets of 5e7 elements reduced on the
# communication stream while backward runs.
zero_keys=${ZT_BENCH_ZERO_KEYS:-\"reduce_bucket_size\": 50000000, \"overlap_comm\": true}
# gpt2-xl (48 x 1600, 1.56B parameters) is larger than gpt-1.3b (24 x 2048, 1.31B) despite its
# name; the GPT-3 paper's sizes after it are tried if zt knows them.
ladder=${ZT_SCALING_LADDER:-gpt-1.3b gpt2-xl gpt-2.7b gpt-6.7b gpt-13b}
offload_ladder=${ZT_SCALING_OFFLOAD_LADDER:-gpt-6.7b gpt-13b}
budget_s=${ZT_SCALING_BUDGET_S:-480}
cap_s=${ZT_SCALING_RUN_CAP_S:-150}
min_run_s=25
# Each selected part's deadline: the budget shared in proportion to the parts' weights.
weights=(0 310 110 60 330 150)
declare -A deadline
total_w=0
for p in 1 2 3 4 5; do [[ $parts == *$p* ]] && total_w=$((total_w + weights[p])); done
acc=0
for p in 1 2 3 4 5; do
  [[ $parts == *$p* ]] || continue
  acc=$((acc + weights[p]))
  deadline[$p]=$((budget_s * acc / total_w))
done
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
for c in ${ZT_SCALING_COUNTS:-1 2 4}; do ((c <= ngpu)) && counts+=("$c"); done
[[ -n ${ZT_SCALING_COUNTS:-} || " ${counts[*]} " == *" $ngpu "* ]] || counts+=("$ngpu")
offload_counts=(${ZT_SCALING_OFFLOAD_COUNTS:-${counts[*]}})
# A call with only parts 2, 4 or 5 adds its rows to an earlier call's table.
if [[ ${ZT_SCALING_FRESH:-0} == 1 || $parts == *1* || $parts == *3* || ! -f $out/runs.jsonl ]]; then
  : >"$out/runs.jsonl"
fi
ncores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')

# zt_cmd N [LAUNCH_FLAGS...]: sets cmd to zt_bench_gpt2 on N GPUs: alone on GPU 0 for 1, else
# under `zt launch` (with LAUNCH_FLAGS) with a fresh rendezvous port each time (no wait for a
# closing socket).
zt_cmd() {
  local n=$1
  shift
  if ((n == 1)); then
    cmd=(env CUDA_VISIBLE_DEVICES=0 "$bin"/zt_bench_gpt2)
  else
    port=$((port + 1))
    cmd=("$bin"/zt launch --num_gpus "$n" --master_port "$port" "$@" "$bin"/zt_bench_gpt2)
  fi
}
# torch_cmd N [VAR=VALUE...]: sets cmd to torchrun (through python3 -m, which needs no script on
# PATH) with torch's own library path and the given variables; --standalone rendezvouses on a
# free port it picks itself, fresh each launch.
torch_cmd() {
  local n=$1
  shift
  cmd=(env LD_LIBRARY_PATH="$torch_ld" "$@")
  ((n == 1)) && cmd+=(CUDA_VISIBLE_DEVICES=0)
  cmd+=(python3 -m torch.distributed.run --standalone --nproc_per_node "$n" bench/zero_torch.py)
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
  echo "== (1) ZeroTrain $model, micro-batch $batch/GPU, seq $seq, bf16, stages $stages on ${counts[*]} GPUs"
  for stage in $stages; do
    for n in "${counts[@]}"; do
      zt_cmd "$n"
      run_one 1 "zt_s${stage}_n$n" "zerotrain-s$stage" "$n" "$model" "$batch" "${deadline[1]}" \
        "${cmd[@]}" --model "$model" --batch "$batch" --seq "$seq" --dtype bf16 \
        --steps "$steps" --warmup "$warmup" --stage "$stage" --zero-keys "$zero_keys"
    done
  done
fi

if [[ $parts == *2* ]]; then
  echo "== (2) PyTorch ($torch_impls), same model, batch and sequence, on ${counts[*]} GPUs"
  for impl in $torch_impls; do
    for n in "${counts[@]}"; do
      torch_cmd "$n"
      run_one 2 "torch_${impl}_n$n" "torch-$impl" "$n" "$model" "$batch" "${deadline[2]}" \
        "${cmd[@]}" --impl "$impl" --model "$model" --batch "$batch" --seq "$seq" \
        --steps "$steps" --warmup "$warmup"
    done
  done
fi

if [[ $parts == *3* ]]; then
  echo "== (3) largest model at ZeRO-3 on $ngpu GPUs, no offload: micro-batch 1, seq $seq, bf16"
  for m in $ladder; do
    zt_cmd "$ngpu"
    run_one 3 "largest_$m" zerotrain-s3 "$ngpu" "$m" 1 "${deadline[3]}" \
      "${cmd[@]}" --model "$m" --batch 1 --seq "$seq" --dtype bf16 --steps 5 --warmup 2 --stage 3 \
      --zero-keys "$zero_keys"
    [[ $rc == 0 ]] && continue
    # A name zt does not know is no failure to train: the next name may still be known.
    [[ $rc != skipped ]] && grep -q "unknown model" "$out/largest_$m.log" && continue
    break
  done
fi

if [[ $parts == *4* ]]; then
  echo "== (4) stage 3 + CPU optimizer offload, ZeroTrain and FSDP2 CPUOffloadPolicy, $model, micro-batch $batch/GPU, on ${counts[*]} GPUs"
  for n in "${offload_counts[@]}"; do
    zt_cmd "$n" --bind_cores_to_rank
    run_one 4 "zt_s3off_n$n" zerotrain-s3-offload "$n" "$model" "$batch" "${deadline[4]}" \
      "${cmd[@]}" --model "$model" --batch "$batch" --seq "$seq" --dtype bf16 \
      --steps "$offload_steps" --warmup "$offload_warmup" --stage 3 --offload-optimizer cpu \
      --zero-keys "$zero_keys"
  done
  for n in "${offload_counts[@]}"; do
    torch_cmd "$n" OMP_NUM_THREADS=$((ncores / n > 0 ? ncores / n : 1))
    run_one 4 "torch_fsdp2-offload_n$n" torch-fsdp2-offload "$n" "$model" "$batch" "${deadline[4]}" \
      "${cmd[@]}" --impl fsdp2-offload --model "$model" --batch "$batch" --seq "$seq" \
      --steps "$offload_steps" --warmup "$offload_warmup"
  done
fi

if [[ $parts == *5* ]]; then
  echo "== (5) largest model at ZeRO-3 + CPU offload on $ngpu GPUs: micro-batch 1, seq $seq, bf16"
  for m in $offload_ladder; do
    zt_cmd "$ngpu" --bind_cores_to_rank
    run_one 5 "largest_offload_$m" zerotrain-s3-offload "$ngpu" "$m" 1 "${deadline[5]}" \
      "${cmd[@]}" --model "$m" --batch 1 --seq "$seq" --dtype bf16 --steps 5 --warmup 2 \
      --stage 3 --offload-optimizer cpu --zero-keys "$zero_keys"
    [[ $rc == 0 ]] && continue
    [[ $rc != skipped ]] && grep -q "unknown model" "$out/largest_offload_$m.log" && continue
    break
  done
fi

echo
python3 - "$out" "$ngpu" "$model" "$batch" "$seq" "$steps" "$warmup" "$ladder" \
  "$((SECONDS - start_s))" "$offload_ladder" "$offload_steps" "$offload_warmup" <<'PY' | tee "$out/summary.txt"
# The short table: part 1 and 2 rows with efficiencies and ratios, then part 3's ladder; also
# writes results.jsonl (each run's outcome merged with the benchmark's JSON line).
import json, sys
(out, ngpu, model, batch, seq, steps, warmup, ladder, secs, offload_ladder, offload_steps,
 offload_warmup) = sys.argv[1:]
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
table = [r for r in runs if r["part"] in (1, 2, 4)]
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
    if any(r["part"] == 4 for r in table):
        print(f"(*-offload rows, part 4: median of {offload_steps} steps after {offload_warmup} "
              "warm-up; peak is GPU memory only, the optimizer state is in host memory)")
    gpus = sorted({r["gpus"] for r in table})
    for a, b in (("zerotrain-s3", "torch-fsdp2-reshard"), ("zerotrain-s1", "torch-ddp"),
                 ("zerotrain-s3-offload", "torch-fsdp2-offload")):
        if not any(r["impl"] in (a, b) for r in table):
            continue
        cells = []
        for n in gpus:
            ra, rb = by.get((a, n)), by.get((b, n))
            if ra and rb and ra["res"] and rb["res"]:
                cells.append(f"{n}: {ra['res']['tokens_per_s'] / rb['res']['tokens_per_s']:.2f}x"
                             f" tok/s, {ra['res']['peak_mem_bytes'] / rb['res']['peak_mem_bytes']:.2f}x peak")
            else:
                cells.append(f"{n}: n/a")
        print(f"  {a} / {b} at N GPUs  " + ";  ".join(cells))

for part, names, what in ((3, ladder, "without offload"),
                          (5, offload_ladder, "with CPU optimizer offload")):
    big = [r for r in runs if r["part"] == part]
    if not big:
        continue
    print(f"\nlargest model at ZeRO-3 on {ngpu} GPUs {what} "
          f"(micro-batch 1, seq {seq}, bf16, median of 5 steps after 2 warm-up)")
    host = part == 5
    print(f"{'model':<12}{'params':>9}{'tokens/s':>11}{'peak GiB/GPU':>14}"
          + (f"{'host GiB/rank':>15}" if host else "") + "  status")
    tried = set()
    for r in big:
        tried.add(r["model"])
        res = r["res"]
        if res:
            extra = f"{res.get('model_state_bytes_host', 0) / gib:>15.2f}" if host else ""
            print(f"{r['model']:<12}{res['params'] / 1e9:>8.2f}B{res['tokens_per_s']:>11.0f}"
                  f"{res['peak_mem_bytes'] / gib:>14.2f}{extra}  {r['status']}")
        else:
            print(f"{r['model']:<12}{'-':>9}{'-':>11}{'-':>14}" + (f"{'-':>15}" if host else "")
                  + f"  {r['status']}")
    for m in names.split():
        if m not in tried:
            print(f"{m:<12}{'-':>9}{'-':>11}{'-':>14}" + (f"{'-':>15}" if host else "")
                  + "  not tried (stopped at the first failure)")
    ok = [r for r in big if r["res"]]
    if ok:
        best = max(ok, key=lambda r: r["res"]["params"])
        print(f"=> largest that ran: {best['model']} ({best['res']['params'] / 1e9:.2f}B "
              f"parameters), peak {best['res']['peak_mem_bytes'] / gib:.2f} GiB/GPU")
    else:
        print("=> no model ran")
print(f"run time {secs} s; results in {out}")
PY
# Non-zero when a run of part 1, 2 or 4 failed or was skipped, or the first model of part 3 or 5
# did not run.
python3 - "$out/runs.jsonl" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
bad = [r for r in runs if r["part"] in (1, 2, 4) and r["rc"] != "0"]
first = [[r for r in runs if r["part"] == p][:1] for p in (3, 5)]
sys.exit(1 if bad or any(f and f[0]["rc"] != "0" for f in first) else 0)
PY
