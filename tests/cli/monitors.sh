#!/usr/bin/env bash
# The config's tensorboard and csv_monitor blocks: a short run writes an event file and one CSV
# per tag (header step,<name>), and the CSV's train_loss rows are the metrics file's losses
# against global samples.
# Usage: monitors.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }
cat >"$tmp/ds.json" <<EOF2
{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "tensorboard": {"enabled": true, "output_path": "$tmp/tb", "job_name": "run1"},
 "csv_monitor": {"enabled": true, "output_path": "$tmp/csv", "job_name": "run1"}}
EOF2
XDG_CACHE_HOME=$tmp/cache "$zt" train --config "$tmp/ds.json" --steps 6 --seq-len 32 --device cpu --sample-tokens 0 \
  --metrics-out "$tmp/m.jsonl" >/dev/null 2>"$tmp/err" || bad "run: $(tail -3 "$tmp/err")"
ls "$tmp"/tb/run1/events.out.tfevents.* >/dev/null 2>&1 && ok "an event file under output_path/job_name" || bad "no event file: $(ls -R "$tmp/tb")"
for t in train_loss lr loss_scale tokens_per_s; do
  f=$tmp/csv/run1/Train_Samples_$t.csv
  [ "$(head -1 "$f" 2>/dev/null)" = "step,$t" ] && ok "$t.csv has DeepSpeed's header" || bad "$f: $(head -2 "$f" 2>&1)"
done
python3 - "$tmp/m.jsonl" "$tmp/csv/run1/Train_Samples_train_loss.csv" <<'PY' && ok "the CSV's losses are the run's, against global samples" || bad "csv rows differ"
import json, sys
want = [(r["samples"], r["loss"]) for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
rows = [l.strip().split(",") for l in open(sys.argv[2])][1:]
got = [(int(s), float(v)) for s, v in rows]
assert len(got) == len(want) == 6 and all(a[0] == b[0] and abs(a[1] - b[1]) <= 1e-12 * abs(b[1]) for a, b in zip(got, want)), (got, want)
PY

# wall_clock_breakdown: DeepSpeed's timer lines every micro-step and step, and the
# elapsed_time_ms_* tags; the timed parts fit inside the step's own wall time (an independent
# host clock: the run's tokens/s) and cover most of it.
cat >"$tmp/wc.json" <<EOF2
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "wall_clock_breakdown": true,
 "csv_monitor": {"enabled": true, "output_path": "$tmp/csv", "job_name": "wc"}}
EOF2
XDG_CACHE_HOME=$tmp/cache "$zt" train --config "$tmp/wc.json" --steps 3 --seq-len 64 --device cpu --sample-tokens 0 \
  --metrics-out "$tmp/wc.jsonl" >/dev/null 2>"$tmp/wc_err" || bad "wall_clock_breakdown run: $(tail -3 "$tmp/wc_err")"
[ "$(grep -c 'time (ms) | fwd: [0-9.]* | bwd: [0-9.]* | bwd_inner: [0-9.]* | bwd_allreduce: [0-9.]* | step: [0-9.]*$' "$tmp/wc_err")" = 3 ] &&
  [ "$(grep -c 'time (ms) | fwd_microstep: ' "$tmp/wc_err")" = 6 ] &&
  ok "DeepSpeed's timer lines: one global line a step, one micro line a micro-step" || bad "timer lines: $(grep 'time (ms)' "$tmp/wc_err" | head -3)"
python3 - "$tmp/wc.jsonl" "$tmp/csv/wc" <<'PY' && ok "elapsed_time_ms_* tags, inside the step's wall time" || bad "elapsed tags"
import json, os, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
for r in recs:
    parts = r["elapsed_time_ms_forward"] + r["elapsed_time_ms_backward"] + r["elapsed_time_ms_step"]
    wall = 2 * 4 * 64 / r["tokens_per_s"] * 1000  # ms of the step: tokens per step / tokens per s
    inner = r["elapsed_time_ms_backward_inner"] + r["elapsed_time_ms_backward_allreduce"]
    print(f"step {r['step']}: fwd+bwd+step {parts:.1f} ms of {wall:.1f} ms; bwd {r['elapsed_time_ms_backward']:.1f} = inner+allreduce {inner:.1f}")
    assert 0.5 * wall <= parts <= wall * 1.01 and abs(inner - r["elapsed_time_ms_backward"]) <= 0.05 * r["elapsed_time_ms_backward"] + 0.5
for t in ("forward", "backward", "backward_inner", "backward_allreduce", "step"):
    f = os.path.join(sys.argv[2], f"Train_Samples_elapsed_time_ms_{t}.csv")
    assert open(f).readline().strip() == f"step,elapsed_time_ms_{t}", f
PY

# ZeRO-3 on 2 ranks: the global line adds the parameter gathers' cost on the compute path.
cat >"$tmp/s3.json" <<EOF2
{"train_micro_batch_size_per_gpu": 4, "wall_clock_breakdown": true,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}
EOF2
XDG_CACHE_HOME=$tmp/cache "$zt" launch --num_procs 2 --master_port $((29000 + RANDOM % 2000)) "$zt" train \
  --config "$tmp/s3.json" --steps 2 --seq-len 32 --device cpu --sample-tokens 0 \
  --metrics-out "$tmp/s3.jsonl" >/dev/null 2>"$tmp/s3_err" || bad "stage-3 run: $(tail -3 "$tmp/s3_err")"
python3 - "$tmp/s3.jsonl" "$tmp/s3_err" <<'PY' && ok "ZeRO-3: the allgather time, inside forward + backward" || bad "allgather: $(grep 'fwd:' "$tmp/s3_err" | head -2)"
import json, re, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
lines = [l for l in open(sys.argv[2]) if re.search(r"\| step: [0-9.]+ \| allgather: [0-9.]+$", l)]
assert len(recs) == 2 and len(lines) == 2, (len(recs), len(lines))
for r in recs:
    g = r["elapsed_time_ms_allgather"]
    print(f"step {r['step']}: allgather {g:.2f} ms of fwd+bwd {r['elapsed_time_ms_forward'] + r['elapsed_time_ms_backward']:.2f} ms")
    assert 0 < g <= r["elapsed_time_ms_forward"] + r["elapsed_time_ms_backward"]
PY
[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
