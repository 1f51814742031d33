#!/usr/bin/env bash
# Runs on a machine with two GPUs (H200s), over a bundle made by scripts/gpu_bundle.sh, from the
# repository root's copy that holds gpu_bundle/ and bench/:
#   (a) the NCCL communicator tests (zt_unit_tests --gtest_filter='Nccl*');
#   (b) ZeRO stages 0-3 over NCCL against the single-GPU run with the same global batch: gpt2-tiny,
#       fp32, SGD with momentum (linear in the gradients, so only summation order differs; see
#       tests/dist/zero_equivalence.py), 10 steps; every step's loss within 1e-4 relative and the
#       final parameters within 1e-4 in relative norm (looser than the CPU test's 1e-5: cuBLAS may
#       pick another fp32 algorithm for the halved per-GPU batch). Two configs per stage: "unit"
#       (reduce_bucket_size 50000: every unit reduced alone; overlap_comm unset, so on at stage 3
#       only) and "bucket" (vocabulary 4000 and reduce_bucket_size 420000: the head and two blocks
#       share a bucket, two blocks another, the embedding is larger than the bucket; overlap_comm
#       on: reductions and stage-3 gathers on the communication stream);
#   (c) collective bus bandwidth, ZeroTrain (bench/comm_bench.cc) next to torch.distributed
#       (bench/comm_torch.py), bf16, 1 MiB .. 1 GiB;
#   (d) ZeRO training throughput: ZeroTrain stages 0-3 (bench/gpt2_bench.cc --stage N) next to
#       torch DDP and FSDP2 with reshard_after_forward True (~ZeRO-3) and False (~ZeRO-2)
#       (bench/zero_torch.py), bf16, gpt2 and gpt-1.3b, seq 1024: tokens/s, peak GiB, ratios.
# Each part runs whatever happened to the others; results (JSON lines, logs) go to
# ${OUT:-gpu_out}, and a short table comes last. NVLink SHARP stays off (NCCL_NVLS_ENABLE=0: the
# lent machines do not support NVLS multicast). Exits non-zero when a part failed. Target run
# time: under 8 minutes (no torch.compile here).
#
# Knobs: ZT_DIST_PARTS (default abcd), ZT_BENCH_STEPS (timed steps, default 20),
# ZT_DIST_MODELS (model:micro-batch list, default "gpt2:16 gpt-1.3b:4"), ZT_BENCH_ZERO_KEYS (part d's
# extra zero_optimization members for ZeroTrain).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-gpu_out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0
# torch runs with the library path it was installed for (its own NCCL and CUDA libraries win).
torch_ld=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$root/gpu_bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# A hang fails in minutes, not DeepSpeed's 30; a failed rank takes its peer down in 5 s.
export ZT_COMM_TIMEOUT_S=${ZT_COMM_TIMEOUT_S:-300}
export ZT_LAUNCH_GRACE_S=${ZT_LAUNCH_GRACE_S:-5}
bin=$root/gpu_bundle/bin
parts=${ZT_DIST_PARTS:-abcd}
steps=${ZT_BENCH_STEPS:-20}
models=${ZT_DIST_MODELS:-gpt2:16 gpt-1.3b:4}
# Part d's zero_optimization tuning for every stage: buckets of 5e7 elements reduced on the
# communication stream while backward runs (DeepSpeed's defaults, 5e8 and overlap only at stage 3,
# would reduce all of GPT-2 124M after backward).
zero_keys=${ZT_BENCH_ZERO_KEYS:-\"reduce_bucket_size\": 50000000, \"overlap_comm\": true}
port=29600

# zt launch on both GPUs, a fresh rendezvous port each time (no wait for a closing socket).
zt_launch() {
  port=$((port + 1))
  timeout -k 15 "$1" "$bin"/zt launch --num_gpus 2 --master_port "$port" "${@:2}"
}
# torchrun (through python3 -m, which needs no script on PATH) with torch's own library path.
torch_run() {
  LD_LIBRARY_PATH="$torch_ld" timeout -k 15 "$1" \
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 "${@:2}"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
start_s=$SECONDS
a_rc=skipped b_rc=skipped c_rc=skipped d_rc=skipped

if [[ $parts == *a* ]]; then
  echo "== (a) NCCL communicator tests"
  timeout -k 15 300 "$bin"/zt_unit_tests --gtest_filter='Nccl*' --gtest_brief=1 \
    --gtest_output=json:"$out/nccl_tests.json" >"$out/nccl_tests.log" 2>&1
  a_rc=$?
  tail -5 "$out/nccl_tests.log"
fi

if [[ $parts == *b* ]]; then
  echo "== (b) ZeRO stages 0-3 on 2 GPUs vs 1 GPU: gpt2-tiny, fp32 SGD, 10 steps, global batch" \
    "16, each unit alone and in shared buckets with overlap_comm"
  eq=$out/equivalence
  mkdir -p "$eq"
  b_rc=0
  for stage in 0 1 2 3; do
    for kind in unit bucket; do
      case $kind in
        unit) zero_extra='"reduce_bucket_size": 50000' extra=() ;;
        bucket) zero_extra='"reduce_bucket_size": 420000, "overlap_comm": true'
                extra=(--vocab-size 4000) ;;
      esac
      c=${kind}_s$stage
      cat >"$eq/$c.json" <<EOF
{"train_batch_size": 16, "gradient_clipping": 1.0, "zero_allow_untested_optimizer": true,
 "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $stage, $zero_extra,
                       "stage3_param_persistence_threshold": 5000}}
EOF
      train=(train --config "$eq/$c.json" --model gpt2-tiny --steps 10 --seq-len 64
             --sample-tokens 0 --order sequential "${extra[@]}")
      # The single-GPU run goes first: it also prepares the default corpus, which the two ranks
      # would otherwise both write at once.
      CUDA_VISIBLE_DEVICES=0 timeout -k 15 180 "$bin"/zt "${train[@]}" \
        --metrics-out "$eq/w1_$c.jsonl" --dump-params "$eq/w1_$c.bin" \
        >"$eq/w1_$c.log" 2>&1 ||
        { b_rc=1; echo "$c 1-GPU run failed:"; tail -3 "$eq/w1_$c.log"; }
      zt_launch 180 "$bin"/zt "${train[@]}" \
        --metrics-out "$eq/w2_$c.jsonl" --dump-params "$eq/w2_$c.bin" \
        >"$eq/w2_$c.log" 2>&1 ||
        { b_rc=1; echo "$c 2-GPU run failed:"; tail -3 "$eq/w2_$c.log"; }
    done
  done
  python3 - "$eq" <<'PY' || b_rc=1
# Compares each stage's 2-GPU run with the 1-GPU run: losses every step, final parameters.
import array, json, math, os, sys
eq, tol, ok_all, summary = sys.argv[1], 1e-4, True, {}
def steps(path):
    return [r for r in map(json.loads, open(path)) if r.get("type") != "run"]
def floats(path):
    a = array.array("f")
    a.frombytes(open(path, "rb").read())
    return a
for s in [f"{kind}_s{stage}" for stage in range(4) for kind in ("unit", "bucket")]:
    try:
        ref, got = steps(f"{eq}/w1_{s}.jsonl"), steps(f"{eq}/w2_{s}.jsonl")
        pr, pg = floats(f"{eq}/w1_{s}.bin"), floats(f"{eq}/w2_{s}.bin")
        loss = max(abs(g["loss"] - r["loss"]) / abs(r["loss"]) for g, r in zip(got, ref))
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(pg, pr)))
        pnorm = diff / math.sqrt(sum(y * y for y in pr))
        ok = len(ref) == len(got) == 10 and len(pr) == len(pg) > 0 and loss <= tol and pnorm <= tol
        detail = f"worst loss rel diff {loss:.2e}, params rel norm diff {pnorm:.2e} (tol {tol:g})"
    except Exception as e:  # a missing file is a failed stage; the others are still compared
        ok, detail = False, f"no result ({e})"
    ok_all &= ok
    summary[s] = {"ok": ok, "detail": detail}
    print(f"{s}: {'ok' if ok else 'FAIL'}: {detail}")
json.dump(summary, open(f"{eq}/summary.json", "w"))
sys.exit(0 if ok_all else 1)
PY
fi

if [[ $parts == *c* ]]; then
  echo "== (c) collective bus bandwidth, bf16, 2 GPUs: ZeroTrain vs torch.distributed"
  : >"$out/comm.jsonl"
  c_rc=0
  zt_launch 300 "$bin"/zt_comm_bench >>"$out/comm.jsonl" 2>"$out/comm_zt.log" ||
    { c_rc=1; echo "zt_comm_bench failed:"; tail -5 "$out/comm_zt.log"; }
  torch_run 300 bench/comm_torch.py >>"$out/comm.jsonl" 2>"$out/comm_torch.log" ||
    { c_rc=1; echo "comm_torch.py failed:"; tail -5 "$out/comm_torch.log"; }
fi

if [[ $parts == *d* ]]; then
  echo "== (d) ZeRO throughput on 2 GPUs, bf16, seq 1024, median of $steps steps"
  : >"$out/zero.jsonl"
  d_rc=0
  for mb in $models; do
    model=${mb%%:*} batch=${mb##*:}
    for stage in 0 1 2 3; do
      log=$out/zero_zt_${model}_s$stage.log
      zt_launch 240 "$bin"/zt_bench_gpt2 --model "$model" --batch "$batch" --seq 1024 \
        --dtype bf16 --steps "$steps" --stage "$stage" --zero-keys "$zero_keys" \
        >>"$out/zero.jsonl" 2>"$log" ||
        { d_rc=1; echo "zerotrain $model stage $stage failed:"; tail -3 "$log"; }
    done
    for impl in ddp fsdp2-reshard fsdp2-noreshard; do
      log=$out/zero_torch_${model}_$impl.log
      torch_run 240 bench/zero_torch.py --impl "$impl" --model "$model" --batch "$batch" \
        --seq 1024 --steps "$steps" >>"$out/zero.jsonl" 2>"$log" ||
        { d_rc=1; echo "torch $impl $model failed:"; tail -3 "$log"; }
    done
  done
fi

echo
secs=$((SECONDS - start_s))
python3 - "$out" "$a_rc" "$b_rc" "$c_rc" "$d_rc" "$secs" <<'PY' | tee "$out/summary.txt"
# The short table: each part's outcome, then bandwidth and throughput side by side.
import json, sys
out, a_rc, b_rc, c_rc, d_rc, secs = sys.argv[1:]

def rows(name):
    res = []
    try:
        for line in open(f"{out}/{name}"):
            if line.startswith("{"):  # launchers may print other lines on stdout
                try:
                    res.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return res

try:
    t = json.load(open(f"{out}/nccl_tests.json"))
    tests = f"{t['tests'] - t['failures'] - t.get('disabled', 0)} passed, {t['failures']} failed"
except Exception as e:
    tests = f"no report ({type(e).__name__})"
print(f"(a) NCCL tests: {tests} (exit {a_rc})")
try:
    eq = json.load(open(f"{out}/equivalence/summary.json"))
    print("(b) 2 GPUs vs 1 GPU: " + ", ".join(
        f"{s} {'ok' if v['ok'] else 'FAIL'}" for s, v in eq.items()) + f" (exit {b_rc})")
except Exception:
    print(f"(b) 2 GPUs vs 1 GPU: no comparison (exit {b_rc})")
print(f"(c) bandwidth exit {c_rc};  (d) throughput exit {d_rc};  run time {secs} s")

comm = {(r["impl"], r["op"], r["bytes"]): r for r in rows("comm.jsonl")}
if comm:
    print(f"\n{'op':<16}{'bytes':>8}{'zt GB/s':>10}{'torch GB/s':>12}{'zt/torch':>10}")
    keys = sorted({(op, b) for _, op, b in comm}, key=lambda k: (k[0], k[1]))
    for op, b in keys:
        z, t = comm.get(("zerotrain", op, b)), comm.get(("torch", op, b))
        zb = z["busbw_gbps"] if z else float("nan")
        tb = t["busbw_gbps"] if t else float("nan")
        ratio = zb / tb if z and t and tb > 0 else float("nan")
        size = f"{b >> 20}M" if b < 1 << 30 else f"{b >> 30}G"
        print(f"{op:<16}{size:>8}{zb:>10.1f}{tb:>12.1f}{ratio:>9.2f}x")
    print("(bus bandwidth, nccl-tests' formulas; median of the timed calls)")

zero = rows("zero.jsonl")
for model in dict.fromkeys(r["model"] for r in zero):
    rs = [r for r in zero if r["model"] == model]
    def name(r):
        return f"zerotrain-s{r['stage']}" if r["impl"] == "zerotrain" else r["impl"]
    by = {name(r): r for r in rs}
    print(f"\n{model} (micro-batch {rs[0]['batch']}/GPU, seq {rs[0]['seq']}, 2 GPUs, bf16)")
    print(f"{'impl':<24}{'tokens/s':>11}{'step ms':>9}{'peak GiB':>10}")
    for r in rs:
        print(f"{name(r):<24}{r['tokens_per_s']:>11.0f}{r['step_ms_median']:>9.1f}"
              f"{r['peak_mem_bytes'] / 2**30:>10.2f}")
    def ratio(a, b):
        if a in by and b in by:
            return (f"{by[a]['tokens_per_s'] / by[b]['tokens_per_s']:.2f}x tokens/s, "
                    f"{by[a]['peak_mem_bytes'] / by[b]['peak_mem_bytes']:.2f}x peak")
        return "n/a"
    for label, a, b in (("ZeRO-3 / own stage 0, zerotrain", "zerotrain-s3", "zerotrain-s0"),
                        ("ZeRO-3 / own stage 0, torch", "torch-fsdp2-reshard", "torch-ddp"),
                        ("zerotrain s3 / FSDP2-reshard", "zerotrain-s3", "torch-fsdp2-reshard"),
                        ("zerotrain s2 / FSDP2-noreshard", "zerotrain-s2", "torch-fsdp2-noreshard"),
                        ("zerotrain s0 / DDP", "zerotrain-s0", "torch-ddp")):
        print(f"  {label:<34}{ratio(a, b)}")
PY
# Non-zero when any part that ran failed (the table above says which).
for rc in "$a_rc" "$b_rc" "$c_rc" "$d_rc"; do
  [[ $rc == 0 || $rc == skipped ]] || exit 1
done
exit 0
