#!/usr/bin/env bash
# `zt train --task sft`: a Llama-shaped tiny model learns a copy instruction ("copy abc =" ->
# " abc") from prompt/response JSON Lines with the byte tokenizer, the held-out loss (response
# and eos only) falls far below the loss of guessing among the 8 letters, and the run's errors
# are one line each.
# Usage: sft.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=2
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }

python3 - "$tmp" <<'PY'
import json, random, sys
random.seed(0)
def ex():
    w = "".join(random.choice("abcdefgh") for _ in range(random.randint(3, 6)))
    return {"prompt": f"copy {w} =", "response": f" {w}"}
for name, n in (("train", 2000), ("eval", 64)):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for _ in range(n):
            f.write(json.dumps(ex()) + "\n")
with open(f"{sys.argv[1]}/pairs.jsonl", "w") as f:
    f.write(json.dumps({"prompt": "a", "chosen": "b", "rejected": "c"}) + "\n")
PY
cat >"$tmp/ds.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.0}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 20, "warmup_max_lr": 3e-3}}}
EOF2
"$zt" train --task sft --model llama-tiny --config "$tmp/ds.json" --data "$tmp/train.jsonl" \
  --eval-data "$tmp/eval.jsonl" --eval-interval 10 --steps 160 --seq-len 24 --device cpu \
  --sample-tokens 0 --metrics-out "$tmp/m.jsonl" --save-16bit-model "$tmp/hf" >"$tmp/out" 2>"$tmp/err" ||
  bad "sft run: $(tail -3 "$tmp/err")"
python3 - "$tmp/m.jsonl" <<'PY' && ok "held-out response loss falls from its first evaluation to below 1.0 (ln 8 = 2.08)" || bad "held-out loss: $(grep eval_loss "$tmp/m.jsonl" | head -2; grep eval_loss "$tmp/m.jsonl" | tail -1)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if "eval_loss" in l]
assert len(ev) == 16, len(ev)
first, last = ev[0]["eval_loss"], ev[-1]["eval_loss"]
print(f"eval loss {first:.3f} at step {ev[0]['step']} -> {last:.3f} at step {ev[-1]['step']}")
assert last < 1.0 and last < 0.6 * first
PY
# zt eval --task sft on the exported model gives the run's last held-out loss.
"$zt" eval --task sft --model "$tmp/hf" --tokenizer bytes --data "$tmp/eval.jsonl" --device cpu \
  --metrics-out "$tmp/eval.json" >/dev/null 2>"$tmp/eval_err" || bad "zt eval --task sft: $(tail -2 "$tmp/eval_err")"
python3 - "$tmp/m.jsonl" "$tmp/eval.json" <<'PY' && ok "zt eval --task sft equals the run's last held-out loss" || bad "eval differs"
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if "eval_loss" in l][-1]
ev = json.load(open(sys.argv[2]))
print(f"training's eval {last['eval_loss']:.5f} over {last['eval_tokens']}, zt eval {ev['loss']:.5f} over {ev.get('tokens')}")
assert abs(ev["loss"] - last["eval_loss"]) < 2e-3 * max(1.0, last["eval_loss"])
PY
grep -q "sft: 2000 examples" "$tmp/err" && ok "the data summary is logged" || bad "no data summary: $(head -3 "$tmp/err")"

# --gradient-checkpointing trains bit for bit as without it.
for gc in "" --gradient-checkpointing; do
  "$zt" train --task sft --model llama-tiny --config "$tmp/ds.json" --data "$tmp/train.jsonl" \
    --steps 4 --seq-len 24 --device cpu --sample-tokens 0 $gc --metrics-out "$tmp/gc$gc.jsonl" \
    >/dev/null 2>"$tmp/gc_err" || bad "run ${gc:-without checkpointing}: $(tail -2 "$tmp/gc_err")"
done
python3 - "$tmp/gc.jsonl" "$tmp/gc--gradient-checkpointing.jsonl" <<'PY' && ok "--gradient-checkpointing gives the same losses" || bad "checkpointing changed the losses"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:3])
assert len(a) == 4 and a == b, (a, b)
PY

expect_error() {  # name, text the message must contain, args...
  local name=$1 want=$2; shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [[ "$out" == *"$want"* ]]; then ok "$name"; else bad "$name: exit $rc: $out"; fi
}
common=(--model llama-tiny --config "$tmp/ds.json" --steps 1 --seq-len 24 --device cpu)
expect_error "an unknown task" "--task must be" "$zt" train --task rlhf "${common[@]}" --data "$tmp/train.jsonl"
expect_error "sft flags need --task sft" "belongs to --task sft" "$zt" train --pack "${common[@]}"
expect_error "sft needs JSON Lines data" "--data FILE.jsonl" "$zt" train --task sft "${common[@]}"
expect_error "preference pairs are not sft data" "preference pairs" "$zt" train --task sft "${common[@]}" --data "$tmp/pairs.jsonl"
printf '{"prompt": "a", "response": 5}\n' >"$tmp/badtype.jsonl"
expect_error "a bad record names FILE:LINE" "badtype.jsonl:1" "$zt" train --task sft "${common[@]}" --data "$tmp/badtype.jsonl"

[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
