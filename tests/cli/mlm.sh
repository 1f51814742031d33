#!/usr/bin/env bash
# `zt train --task mlm`: the BERT fixture (tests/fixtures/hf/bert_mlm) pre-trains on a token file
# of a learnable chain with 15% of positions masked, and its masked-token loss falls; the
# errors are one line each.
# Usage: mlm.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }

for part in train:5 eval:6; do
python3 - "$tmp/${part%%:*}.bin" "${part##*:}" <<'PY'
import array, random, struct, sys
rng, t, toks = random.Random(int(sys.argv[2])), 10, []
for _ in range(200000):
    t = 10 + (t * 7 + rng.choice([0, 0, 0, 1])) % 240  # ids 10..249; 0..9 stay for specials
    toks.append(t)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(array.array("H", toks).tobytes())
PY
done
cat >"$tmp/ds.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 16,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.0}}}
EOF2
bert=$src/tests/fixtures/hf/bert_mlm
"$zt" train --task mlm --model "$bert" --mask-id 4 --config "$tmp/ds.json" --data "$tmp/train.bin" \
  --steps 60 --seq-len 32 --device cpu --metrics-out "$tmp/m.jsonl" --eval-data "$tmp/eval.bin" \
  --eval-interval 20 --eval-steps 4 >"$tmp/out" 2>"$tmp/err" ||
  bad "mlm run: $(tail -3 "$tmp/err")"
python3 - "$tmp/m.jsonl" <<'PY' && ok "the masked-token loss falls" || bad "loss: $(tail -1 "$tmp/m.jsonl")"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
first = sum(x["loss"] for x in r[:5]) / 5
last = sum(x["loss"] for x in r[-5:]) / 5
print(f"mean loss of the first 5 steps {first:.3f}, of the last 5 {last:.3f}")
assert len(r) == 60 and last < 0.7 * first
PY
python3 - "$tmp/m.jsonl" <<'PY' && ok "held-out masked-token loss falls (eval every 20 steps, 4 batches)" || bad "eval: $(grep eval_ "$tmp/m.jsonl")"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if "eval_loss" in l]
print(f"eval loss {ev[0]['eval_loss']:.3f} -> {ev[-1]['eval_loss']:.3f}, accuracy {ev[-1]['eval_accuracy']:.3f} over {ev[-1]['eval_positions']} positions")
assert [e["step"] for e in ev] == [20, 40, 60]
assert ev[-1]["eval_loss"] < ev[0]["eval_loss"] and 0 <= ev[-1]["eval_accuracy"] <= 1
assert all(e["eval_positions"] == ev[0]["eval_positions"] > 50 for e in ev)  # the same masked positions each time
PY

# JSON Lines: records of 8..32 tokens of the same chain ([CLS]=2 ... [SEP]=3), one padded row
# each (run_mlm.py --line_by_line); the held-out set is JSON Lines too.
for part in train:7 eval:8; do
python3 - "$tmp/${part%%:*}.jsonl" "${part##*:}" <<'PY'
import json, random, sys
rng = random.Random(int(sys.argv[2]))
with open(sys.argv[1], "w") as f:
    for _ in range(600):
        t, ids = rng.randrange(10, 250), []
        for _ in range(rng.randrange(6, 31)):
            t = 10 + (t * 7 + rng.choice([0, 0, 0, 1])) % 240
            ids.append(t)
        f.write(json.dumps({"input_ids": [2] + ids + [3]}) + "\n")
PY
done
"$zt" train --task mlm --model "$bert" --mask-id 4 --config "$tmp/ds.json" --data "$tmp/train.jsonl" \
  --steps 60 --seq-len 32 --device cpu --metrics-out "$tmp/mj.jsonl" --eval-data "$tmp/eval.jsonl" \
  --eval-interval 20 --eval-steps 4 >"$tmp/out" 2>"$tmp/err" ||
  bad "mlm JSON Lines run: $(tail -3 "$tmp/err")"
grep -q "mlm: 600 examples from" "$tmp/err" && ok "JSON Lines data is read as padded rows" || bad "no data line: $(tail -3 "$tmp/err")"
python3 - "$tmp/mj.jsonl" <<'PY' && ok "JSON Lines: training and held-out masked-token losses fall" || bad "JSON Lines loss: $(grep eval_ "$tmp/mj.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in rows if '"loss"' in json.dumps(x) and "eval_loss" not in x]
ev = [x for x in rows if "eval_loss" in x]
first = sum(x["loss"] for x in r[:5]) / 5
last = sum(x["loss"] for x in r[-5:]) / 5
print(f"loss {first:.3f} -> {last:.3f}; eval {ev[0]['eval_loss']:.3f} -> {ev[-1]['eval_loss']:.3f}")
assert len(r) == 60 and last < 0.8 * first
assert [e["step"] for e in ev] == [20, 40, 60] and ev[-1]["eval_loss"] < ev[0]["eval_loss"]
assert all(e["eval_positions"] == ev[0]["eval_positions"] > 30 for e in ev)
PY

expect_error() {  # name, text the message must contain, args...
  local name=$1 want=$2; shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [[ "$out" == *"$want"* ]]; then ok "$name"; else bad "$name: exit $rc: $out"; fi
}
common=(--config "$tmp/ds.json" --data "$tmp/train.bin" --steps 1 --seq-len 32 --device cpu)
expect_error "mlm needs a masked-LM model" "not a masked-LM" "$zt" train --task mlm --model llama-tiny "${common[@]}"
expect_error "no mask token" "--mask-id" "$zt" train --task mlm --model "$bert" "${common[@]}"
expect_error "a mask id past the vocabulary" "outside the model's vocabulary" "$zt" train --task mlm --model "$bert" --mask-id 999 "${common[@]}"
expect_error "shares above 1" "more than 1" "$zt" train --task mlm --model "$bert" --mask-id 4 --mask-share 0.95 "${common[@]}"
expect_error "mlm flags need --task mlm" "belongs to --task mlm" "$zt" train --model llama-tiny --mask-id 4 "${common[@]}"
expect_error "eval data for pretraining" "--eval-data belongs" "$zt" train --model llama-tiny --eval-data "$tmp/eval.bin" "${common[@]}"
expect_error "BERT without --task mlm" "--task mlm" "$zt" train --model "$bert" "${common[@]}"

[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
