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
[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
