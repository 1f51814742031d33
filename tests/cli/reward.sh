#!/usr/bin/env bash
# `zt train --task reward`: llama-tiny with a value head learns a preference (chosen responses are
# lower-case words, rejected ones the same words upper-cased) from prompt/chosen/rejected JSON
# Lines with the byte tokenizer; the held-out accuracy ends above 0.9; the 16-bit export is a
# LlamaForSequenceClassification directory that loads back as the reward model (its score.weight
# read: the accuracy holds); the errors are one line each.
# Usage: reward.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
src=$2
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
    w = " ".join("".join(random.choice("abcdefghij") for _ in range(random.randint(2, 4)))
                 for _ in range(random.randint(1, 3)))
    return {"prompt": "say:", "chosen": f" {w}", "rejected": f" {w.upper()}"}
for name, n in (("train", 1024), ("eval", 64)):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for _ in range(n):
            f.write(json.dumps(ex()) + "\n")
with open(f"{sys.argv[1]}/sft.jsonl", "w") as f:
    f.write(json.dumps({"prompt": "a", "response": "b"}) + "\n")
PY
cat >"$tmp/ds.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.0}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": 2e-3}}}
EOF2
start=$(date +%s)
"$zt" train --task reward --model llama-tiny --config "$tmp/ds.json" --data "$tmp/train.jsonl" \
  --eval-data "$tmp/eval.jsonl" --eval-interval 20 --steps 80 --seq-len 24 --device cpu \
  --metrics-out "$tmp/m.jsonl" --save-16bit-model "$tmp/hf" >"$tmp/out" 2>"$tmp/err" ||
  bad "reward run: $(tail -3 "$tmp/err")"
echo "training took $(( $(date +%s) - start )) s"
python3 - "$tmp/m.jsonl" <<'PY' && ok "held-out accuracy ends above 0.9, chosen scores above rejected ones" || bad "held-out metrics: $(grep eval_ "$tmp/m.jsonl" | tail -2)"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if "eval_accuracy" in l]
assert len(ev) == 4, len(ev)
first = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l][0]["loss"]
assert first > 0.5, f"the first step's loss {first} is not near ln 2: nothing to learn"
last = ev[-1]
print(f"eval loss {ev[0]['eval_loss']:.3f} (accuracy {ev[0]['eval_accuracy']:.2f}) at step {ev[0]['step']} "
      f"-> {last['eval_loss']:.3f} (accuracy {last['eval_accuracy']:.2f}, chosen {last['eval_chosen_score']:.2f}, "
      f"rejected {last['eval_rejected_score']:.2f}) at step {last['step']}")
assert last["eval_pairs"] == 64
assert last["eval_accuracy"] > 0.9 and last["eval_loss"] < 0.3
assert last["eval_chosen_score"] > last["eval_rejected_score"]
PY
grep -q "reward: 1024 pairs" "$tmp/err" && ok "the data summary is logged" || bad "no data summary: $(head -3 "$tmp/err")"
grep -q "sample ---" "$tmp/out" && bad "a reward model printed a generated sample" || ok "no generated sample"

python3 - "$tmp/hf" <<'PY' && ok "the export is a LlamaForSequenceClassification with score.weight [1, 128]" || bad "export: $(cat "$tmp/hf/config.json")"
import json, struct, sys
c = json.load(open(f"{sys.argv[1]}/config.json"))
assert c["architectures"] == ["LlamaForSequenceClassification"], c["architectures"]
assert c["num_labels"] == 1
raw = open(f"{sys.argv[1]}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
assert h["score.weight"]["shape"] == [1, 128], h["score.weight"]
assert not any(k.startswith("lm_head") for k in h), [k for k in h if k.startswith("lm_head")]
PY
# The export loads back as the reward model with its value head: one step at a tiny rate keeps
# the held-out accuracy.
cat >"$tmp/ds_tiny_lr.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 16,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-8, "weight_decay": 0.0}}}
EOF2
"$zt" train --task reward --model "$tmp/hf" --tokenizer bytes --config "$tmp/ds_tiny_lr.json" \
  --data "$tmp/train.jsonl" --eval-data "$tmp/eval.jsonl" --steps 1 --seq-len 24 --device cpu \
  --metrics-out "$tmp/m2.jsonl" >/dev/null 2>"$tmp/err2" || bad "reload run: $(tail -3 "$tmp/err2")"
python3 - "$tmp/m2.jsonl" <<'PY' && ok "the exported reward model loads with its score head" || bad "reloaded metrics: $(grep eval_ "$tmp/m2.jsonl")"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if "eval_accuracy" in l]
assert ev and ev[-1]["eval_accuracy"] > 0.9, ev
PY

# zt eval --task reward on the export gives the run's last held-out metrics.
"$zt" eval --task reward --model "$tmp/hf" --tokenizer bytes --data "$tmp/eval.jsonl" --seq-len 24 \
  --device cpu --metrics-out "$tmp/ev.json" >/dev/null 2>"$tmp/ev_err" || bad "zt eval --task reward: $(tail -2 "$tmp/ev_err")"
python3 - "$tmp/m.jsonl" "$tmp/ev.json" <<'PY' && ok "zt eval --task reward equals the run's last held-out metrics" || bad "zt eval reward: $(cat "$tmp/ev.json")"
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if "eval_accuracy" in l][-1]
ev = json.load(open(sys.argv[2]))
print(f"training's eval: loss {last['eval_loss']:.5f} accuracy {last['eval_accuracy']:.3f}; zt eval: loss {ev['loss']:.5f} accuracy {ev['accuracy']:.3f} over {ev['pairs']} pairs")
assert ev["pairs"] == last["eval_pairs"], (ev["pairs"], last["eval_pairs"])
assert abs(ev["loss"] - last["eval_loss"]) <= 2e-3 * max(1.0, last["eval_loss"])
assert abs(ev["accuracy"] - last["eval_accuracy"]) < 1e-9
PY

expect_error() {  # name, text the message must contain, args...
  local name=$1 want=$2; shift 2
  local out rc
  out=$("$@" 2>&1 >/dev/null); rc=$?
  local lines
  lines=$(printf '%s\n' "$out" | grep -c .)
  if [ $rc -ne 0 ] && [[ "$out" == *"$want"* ]] && [ "$lines" -le 1 ]; then ok "$name"; else bad "$name: exit $rc: $out"; fi
}
common=(--config "$tmp/ds.json" --steps 1 --seq-len 24 --device cpu)
expect_error "reward needs preference pairs" "preference pairs" "$zt" train --task reward --model llama-tiny "${common[@]}" --data "$tmp/sft.jsonl"
expect_error "reward needs a causal model" "a reward model is a causal decoder" "$zt" train --task reward --model "$src/tests/fixtures/hf/bert_mlm" "${common[@]}" --data "$tmp/train.jsonl"
expect_error "a reward model is not trained as sft" "train it with --task reward" "$zt" train --task sft --model "$tmp/hf" "${common[@]}" --data "$tmp/train.jsonl"
expect_error "zt eval of a reward model needs --task reward" "--task reward" "$zt" eval --model "$tmp/hf" --data "$tmp/eval.jsonl" --device cpu
expect_error "a reward model does not generate" "reward (value-head) model does not generate" "$zt" generate --model "$tmp/hf" --prompt-ids 1,2 --device cpu
expect_error "reward needs JSON Lines data" "--data FILE.jsonl" "$zt" train --task reward --model llama-tiny "${common[@]}"

[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
