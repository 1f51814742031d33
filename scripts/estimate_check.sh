#!/usr/bin/env bash
# zt estimate against the GPU: for several models, ZeRO stages, precisions and micro-batches,
# trains a few steps with zt_bench_gpt2 (which reports the caching allocator's peak of the timed
# steps, peak_mem_bytes) and prints ZeroTrain's predicted peak (zt estimate --json:
# zerotrain.without_checkpointing.peak_allocated_bytes) beside it, with their ratio. The cases
# with 2 ranks run through `zt launch --num_gpus 2` (rank 0's peak) where two GPUs are visible,
# and are skipped otherwise. About 30 s on one H100, 40 s on two.
#
#   scripts/estimate_check.sh [BIN_DIR]     (default gpu_bundle/bin, made by scripts/gpu_bundle.sh)
#
# ZT_ESTIMATE names the zt binary that predicts (default BIN_DIR/zt; a CPU-only build works too,
# the prediction needs no GPU). ZT_ESTIMATE_TOLERANCE (default 0.10) is the allowed |ratio - 1|;
# the exit status is 1 when a case is outside it or failed to run.
set -u
cd "$(dirname "$0")/.."
bin=${1:-gpu_bundle/bin}
zt=${ZT_ESTIMATE:-$bin/zt}
tol=${ZT_ESTIMATE_TOLERANCE:-0.10}
export LD_LIBRARY_PATH="$bin/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=${ZT_ESTIMATE_OUT:-gpu_out/estimate}
mkdir -p "$out"
gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2>/dev/null |
  awk '{printf "%.2f", $1 / 1024}')
gpu_gib=${gpu_gib:-80}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# model stage offload dtype batch seq ranks [extra: ckpt (activation checkpointing), lora (rank-16
# adapters on every block module, base frozen), lora+ckpt]
cases=(
  "gpt2 0 none bf16 8 1024 1"
  "gpt2 2 none bf16 16 1024 1"
  "gpt2 3 none bf16 8 1024 1"
  "gpt2 0 none f32 4 1024 1"
  "gpt2-medium 1 none bf16 8 1024 1"
  "llama-1b 0 none bf16 2 2048 1"
  "llama-1b 2 cpu bf16 4 2048 1"
  "llama-1b 3 none bf16 4 2048 1"
  "gpt2-medium 2 none bf16 8 1024 2"
  "gpt2-medium 3 none bf16 8 1024 2"
  "llama-1b 1 none bf16 2 2048 2"
  "gpt2 2 none bf16 16 1024 1 ckpt"
  "llama-1b 0 none bf16 4 2048 1 ckpt"
  "llama-1b 0 none bf16 2 2048 1 lora"
  "llama-1b 3 none bf16 4 2048 1 lora+ckpt"
)
printf '%-12s %5s %7s %5s %5s %5s %5s %12s %12s %7s  %s\n' model stage offload dtype B T ranks \
  predicted_MiB measured_MiB ratio "peak (predicted at)"
status=0
port=29611
for c in "${cases[@]}"; do
  read -r model stage offload dtype batch seq ranks extra <<<"$c"
  extra=${extra:-none}
  tag="$model-s$stage-$offload-$dtype-b$batch-t$seq-w$ranks-$extra"
  extra_args=()
  [[ $extra == *ckpt* ]] && extra_args+=(--gradient-checkpointing)
  [[ $extra == *lora* ]] && extra_args+=(--lora-dim 16 --only-optimize-lora)
  if ((ranks > gpus)); then
    printf '%-12s %5s %7s %5s %5s %5s %5s  skipped: %s GPU(s) visible\n' "$model" "$stage" \
      "$offload" "$dtype" "$batch" "$seq" "$ranks" "$gpus"
    continue
  fi
  bench_args=(--model "$model" --batch "$batch" --seq "$seq" --dtype "$dtype" --steps 3 --warmup 2
    --stage "$stage")
  [ "$offload" = cpu ] && bench_args+=(--offload-optimizer cpu)
  bench_args+=(${extra_args[@]+"${extra_args[@]}"})
  launch=()
  if ((ranks > 1)); then
    port=$((port + 1))
    launch=("$bin"/zt launch --num_gpus "$ranks" --master_port "$port")
  fi
  if ! ${launch[@]+"${launch[@]}"} "$bin"/zt_bench_gpt2 "${bench_args[@]}" >"$out/$tag.bench.json" \
      2>"$out/$tag.bench.log"; then
    printf '%-12s %5s %7s %5s %5s %5s %5s  bench failed: %s\n' "$model" "$stage" "$offload" \
      "$dtype" "$batch" "$seq" "$ranks" "$(tail -1 "$out/$tag.bench.log")"
    status=1
    continue
  fi
  if ! "$zt" estimate --model "$model" --stage "$stage" --offload "$offload" --dtype "$dtype" \
      --micro-batch "$batch" --seq-len "$seq" --num-gpus "$ranks" --gpu-memory "$gpu_gib" --json \
      ${extra_args[@]+"${extra_args[@]}"} \
      >"$out/$tag.estimate.json" 2>"$out/$tag.estimate.log"; then
    printf '%-12s  estimate failed: %s\n' "$model" "$(tail -1 "$out/$tag.estimate.log")"
    status=1
    continue
  fi
  python3 - "$out/$tag.bench.json" "$out/$tag.estimate.json" "$c" "$tol" <<'EOF' || status=1
import json, sys
line = [l for l in open(sys.argv[1]) if '"peak_mem_bytes"' in l][-1]  # rank 0's JSON line
bench = json.loads(line[line.index("{"):])
fields = sys.argv[3].split()
model, stage, offload, dtype, batch, seq, ranks = fields[:7]
extra = fields[7] if len(fields) > 7 else ""
est = json.load(open(sys.argv[2]))["zerotrain"]["with_checkpointing" if "ckpt" in extra else
                                                "without_checkpointing"]
tol = float(sys.argv[4])
measured, predicted = bench["peak_mem_bytes"], est["peak_allocated_bytes"]
ratio = predicted / measured
flag = "" if abs(ratio - 1) <= tol else "  OUTSIDE %.0f%%" % (tol * 100)
print("%-12s %5s %7s %5s %5s %5s %5s %12.1f %12.1f %7.3f  %s%s%s" % (model, stage, offload, dtype,
      batch, seq, ranks, predicted / 2**20, measured / 2**20, ratio, est["peak_at"],
      " [" + extra + "]" if extra else "", flag))
sys.exit(1 if flag else 0)
EOF
done
exit $status
