#!/usr/bin/env bash
# The CPU demo end to end: `zt train` on the default corpus with the example config; the loss
# must fall well below ln(257) = 5.55, the metrics file must hold a run record and one record per
# step, and a text sample must be printed. Usage: demo_train.sh ZT_BINARY SOURCE_DIR
set -euo pipefail
zt=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=$tmp/cache
steps=${ZT_DEMO_TEST_STEPS:-80}
"$zt" train --config "$src/examples/ds_config_tiny.json" --model gpt2-tiny --device cpu \
  --steps "$steps" --metrics-out "$tmp/m.jsonl" --sample-tokens 60 >"$tmp/out.txt" 2>"$tmp/err.txt"
cat "$tmp/out.txt"
tail -3 "$tmp/err.txt"
grep -q -- "--- sample ---" "$tmp/out.txt"
python3 - "$tmp/m.jsonl" "$steps" <<'PY'
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = int(sys.argv[2])
run, rest = recs[0], recs[1:]
assert run["type"] == "run" and run["parameters"] > 0 and run["train_batch_size"] == 16, run
assert run["model_state_bytes"]["total"] > 0, run
assert len(rest) == steps, len(rest)
for k in ("step", "loss", "lr", "loss_scale", "grad_norm", "skipped", "tokens_per_s", "samples"):
    assert k in rest[-1], k
first, last = rest[0]["loss"], sum(r["loss"] for r in rest[-5:]) / 5
print(f"loss {first:.3f} -> {last:.3f} (ln 257 = {math.log(257):.3f})")
assert abs(first - math.log(257)) < 0.3, first
assert last < math.log(257) - 2.0, last
PY
echo "1 passed, 0 failed"
