#!/usr/bin/env bash
# Runs on the GPU machine, over a bundle made by scripts/gpu_bundle.sh: the GPU test suite, a short
# `zt train` of GPT-2 124M in bf16, and the GPT-2 benchmark next to PyTorch (eager and
# torch.compile) with the same model, batch, sequence and precision, in the same run. Prints a
# short table last. Results (JSON lines, logs) go to ${OUT:-gpu_out}.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$PWD/gpu_bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
bin=gpu_bundle/bin
model=${ZT_BENCH_MODEL:-gpt2}
batch=${ZT_BENCH_BATCH:-16}
seq=${ZT_BENCH_SEQ:-1024}
steps=${ZT_BENCH_STEPS:-20}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

echo "== GPU tests"
"$bin"/zt_gpu_tests --gtest_brief=1 --gtest_output=json:"$out/gpu_tests.json" 2>&1 | tail -40 | tee "$out/gpu_tests.log"
gpu_rc=${PIPESTATUS[0]}

echo "== zt train --model gpt2 --device cuda (bf16, micro-batch 16, seq 1024)"
"$bin"/zt train --config examples/ds_config_gpt2_bf16.json --model gpt2 --device cuda \
  --steps "${ZT_TRAIN_STEPS:-30}" ${ZT_TRAIN_DATA:+--data "$ZT_TRAIN_DATA"} --metrics-out "$out/train.jsonl" \
  --sample-tokens 0 >"$out/train.log" 2>&1
train_rc=$?
tail -5 "$out/train.log"

echo "== benchmark: $model, batch $batch, seq $seq, bf16, median of $steps steps"
: >"$out/bench.jsonl"
"$bin"/zt_bench_gpt2 --model "$model" --batch "$batch" --seq "$seq" --dtype bf16 --steps "$steps" \
  >>"$out/bench.jsonl" 2>"$out/bench_zt.log" || tail -5 "$out/bench_zt.log"
python3 bench/gpt2_torch.py --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" \
  >>"$out/bench.jsonl" 2>"$out/bench_torch.log" || tail -5 "$out/bench_torch.log"
if [ "${ZT_BENCH_COMPILE:-1}" = "1" ]; then
  python3 bench/gpt2_torch.py --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" --compile \
    >>"$out/bench.jsonl" 2>"$out/bench_compile.log" || tail -5 "$out/bench_compile.log"
fi

echo "== attention fwd+bwd, bf16: fused and unfused next to torch SDPA"
: >"$out/attention.jsonl"
"$bin"/zt_bench_attention >>"$out/attention.jsonl" 2>"$out/attention_zt.log" || tail -5 "$out/attention_zt.log"
python3 bench/attention_torch.py >>"$out/attention.jsonl" 2>"$out/attention_torch.log" ||
  tail -5 "$out/attention_torch.log"

echo
python3 - "$out" "$gpu_rc" "$train_rc" <<'PY'
import json, sys
out, gpu_rc, train_rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    t = json.load(open(f"{out}/gpu_tests.json"))
    tests = f"{t['tests'] - t['failures'] - t.get('disabled', 0)} passed, {t['failures']} failed"
except Exception as e:
    tests = f"no report ({e})"
rows = [json.loads(l) for l in open(f"{out}/bench.jsonl") if l.strip()]
zt = next((r for r in rows if r["impl"] == "zerotrain"), None)
print(f"GPU tests: {tests} (exit {gpu_rc});  zt train gpt2 bf16: exit {train_rc}")
print(f"{'impl':<14}{'tokens/s':>12}{'step ms':>10}{'peak GiB':>10}{'vs zerotrain':>14}")
for r in rows:
    ratio = (zt["tokens_per_s"] / r["tokens_per_s"]) if zt else float("nan")
    print(f"{r['impl']:<14}{r['tokens_per_s']:>12.0f}{r['step_ms_median']:>10.1f}"
          f"{r['peak_mem_bytes']/2**30:>10.2f}{ratio:>13.2f}x")
print("(last column: ZeroTrain tokens/s divided by that row's tokens/s)")
att = [json.loads(l) for l in open(f"{out}/attention.jsonl") if l.strip()]
print(f"\n{'attention (B,NH,T,HS)':<24}{'impl':<20}{'ms':>8}{'TFLOP/s':>9}{'torch/this':>12}")
for r in att:
    key = (r["B"], r["NH"], r["T"], r["HS"])
    t = next((x for x in att if x["impl"] == "torch-sdpa" and (x["B"], x["NH"], x["T"], x["HS"]) == key), None)
    ratio = t["ms_median"] / r["ms_median"] if t else float("nan")
    print(f"{str(key):<24}{r['impl']:<20}{r['ms_median']:>8.3f}{r['tflops']:>9.1f}{ratio:>11.2f}x")
print("(last column: torch SDPA time divided by that row's time; above 1 is faster than torch)")
PY
