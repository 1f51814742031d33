#!/usr/bin/env bash
# Several ranks of one machine starting with an empty cache: exactly one prepares the default
# corpus (the others wait on its lock and then read the file), and all of them train on it.
# Usage: default_corpus.sh ZT_BINARY SOURCE_DIR
set -euo pipefail
zt=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=$tmp/cache OMP_NUM_THREADS=1
cat >"$tmp/ds.json" <<'JSON'
{"train_batch_size": 6, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 1}}
JSON
port=$((20000 + RANDOM % 12000))
"$zt" launch --num_procs 3 --master_port "$port" --enable_each_rank_log "$tmp/logs" \
  "$zt" train --config "$tmp/ds.json" --model gpt2-tiny --device cpu --steps 2 --seq-len 32 \
  --sample-tokens 0 >"$tmp/out" 2>"$tmp/err" || { tail -5 "$tmp/err" "$tmp"/logs/* >&2; exit 1; }
n=$(cat "$tmp"/logs/* "$tmp/err" | grep -c "preparing the default corpus" || true)
[ "$n" -eq 1 ] || { echo "FAIL: $n ranks prepared the corpus, expected 1" >&2; exit 1; }
[ -s "$tmp/cache/zerotrain/default-corpus.bin" ] || { echo "FAIL: no corpus file" >&2; exit 1; }
echo "1 passed, 0 failed"
