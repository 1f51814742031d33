#!/usr/bin/env bash
# `zt train --lora-dim`: LoRA fine-tuning on prompt/response JSON Lines with every other weight
# frozen (--only-optimize-lora). The base is llama-tiny fully fine-tuned first on a copy task
# ("copy abc =" -> " abc"); the adapters then teach it to answer in capitals ("copy abc =" ->
# " ABC", letters the base never wrote): the held-out loss falls far below the base model's, the run logs how few
# parameters it trains, a resumed run continues exactly where an uninterrupted one goes, the
# merged export evaluates (zt eval, no adapters involved) to the run's last held-out loss, the
# adapter-only export is a PEFT folder, and bad flags are one-line errors.
# Usage: lora.sh ZT_BINARY SOURCE_DIR
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
def ex(task):
    w = "".join(random.choice("abcdefgh") for _ in range(random.randint(3, 6)))
    return {"prompt": f"copy {w} =", "response": " " + (w if task == "copy" else w.upper())}
for name, task, n in (("copy", "copy", 1600), ("train", "upper", 1000), ("eval", "upper", 64)):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for _ in range(n):
            f.write(json.dumps(ex(task)) + "\n")
PY
cat >"$tmp/full.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 16, "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}}
EOF2
cat >"$tmp/ds.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}},
 "zero_optimization": {"stage": 2}}
EOF2
"$zt" train --task sft --model llama-tiny --config "$tmp/full.json" --data "$tmp/copy.jsonl" \
  --steps 100 --seq-len 24 --device cpu --sample-tokens 0 --save-16bit-model "$tmp/base" \
  >/dev/null 2>"$tmp/base_err" || bad "base model: $(tail -3 "$tmp/base_err")"
lora=(--lora-dim 16 --lora-alpha 32 --lora-dropout 0.05 --only-optimize-lora)
common=(train --task sft --model "$tmp/base" --tokenizer bytes --config "$tmp/ds.json"
        --data "$tmp/train.jsonl" --seq-len 24 --device cpu --sample-tokens 0 --order sequential)
"$zt" "${common[@]}" "${lora[@]}" --eval-data "$tmp/eval.jsonl" --eval-interval 5 --steps 40 \
  --metrics-out "$tmp/m.jsonl" --save "$tmp/ck" >"$tmp/out" 2>"$tmp/err" ||
  bad "lora run: $(tail -3 "$tmp/err")"
"$zt" eval --task sft --model "$tmp/base" --tokenizer bytes --data "$tmp/eval.jsonl" --device cpu \
  --metrics-out "$tmp/base_eval.json" >/dev/null 2>&1 || bad "zt eval of the base"
python3 - "$tmp/base_eval.json" "$tmp/m.jsonl" <<'PY' && ok "held-out loss falls well below the base model's with only the adapters trained" || bad "held-out loss: $(grep eval_loss "$tmp/m.jsonl" | tail -1)"
import json, sys
base = json.load(open(sys.argv[1]))["loss"]
ev = [json.loads(l) for l in open(sys.argv[2]) if "eval_loss" in l]
last = ev[-1]["eval_loss"]
print(f"eval loss of the base {base:.3f} -> {last:.3f} after {ev[-1]['step']} LoRA steps")
assert len(ev) == 8 and last < 0.5 * base
PY
grep -q "trained (" "$tmp/err" && ok "the engine says how many parameters it trains: $(grep -o '[0-9]* parameters, [0-9]* trained ([0-9.]*%)' "$tmp/err" | head -1)" ||
  bad "no trained-parameter count: $(grep engine: "$tmp/err")"

# Resume at step 20: steps 21-40 equal the uninterrupted run's.
"$zt" "${common[@]}" "${lora[@]}" --steps 20 --save "$tmp/half" >/dev/null 2>"$tmp/err1" ||
  bad "first half: $(tail -2 "$tmp/err1")"
"$zt" "${common[@]}" "${lora[@]}" --steps 40 --load "$tmp/half" --metrics-out "$tmp/r.jsonl" \
  >/dev/null 2>"$tmp/err2" || bad "resumed half: $(tail -2 "$tmp/err2")"
python3 - "$tmp/m.jsonl" "$tmp/r.jsonl" <<'PY' && ok "a resumed LoRA run equals the uninterrupted one" || bad "resume differs"
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and "step" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
steps = [s for s in b if s > 20]
worst = max(abs(a[s] - b[s]) for s in steps)
print(f"{len(steps)} resumed steps, worst difference {worst:.2e}")
assert len(steps) == 20 and worst < 1e-5
PY
"$zt" "${common[@]}" --steps 41 --load "$tmp/half" >/dev/null 2>"$tmp/err3" &&
  bad "resuming a LoRA checkpoint without the adapters succeeded" ||
  { grep -q "lora-dim" "$tmp/err3" && ok "resuming without the adapters is refused: $(grep -o 'checkpoint .* was trained with [^:]*' "$tmp/err3" | head -1)" || bad "refusal: $(tail -1 "$tmp/err3")"; }

# The merged export is a plain model: zt eval gives the run's last held-out loss.
"$zt" ckpt export-hf "$tmp/ck" "$tmp/merged" >/dev/null 2>"$tmp/exp_err" || bad "merged export: $(tail -2 "$tmp/exp_err")"
"$zt" eval --task sft --model "$tmp/merged" --tokenizer bytes --data "$tmp/eval.jsonl" --device cpu \
  --metrics-out "$tmp/eval.json" >/dev/null 2>"$tmp/eval_err" || bad "zt eval: $(tail -2 "$tmp/eval_err")"
python3 - "$tmp/m.jsonl" "$tmp/eval.json" <<'PY' && ok "the merged export evaluates to the run's last held-out loss" || bad "merged eval differs"
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if "eval_loss" in l][-1]
ev = json.load(open(sys.argv[2]))
print(f"training's eval {last['eval_loss']:.5f}, merged model {ev['loss']:.5f}")
assert abs(ev["loss"] - last["eval_loss"]) < 1e-4 * max(1.0, last["eval_loss"])
PY
"$zt" ckpt export-hf "$tmp/ck" "$tmp/adapter" --adapter-only >/dev/null 2>"$tmp/ad_err" || bad "adapter export: $(tail -2 "$tmp/ad_err")"
python3 - "$tmp/adapter" <<'PY' && ok "--adapter-only writes adapter_config.json and adapter_model.safetensors" || bad "adapter folder"
import json, os, sys
c = json.load(open(os.path.join(sys.argv[1], "adapter_config.json")))
assert c["peft_type"] == "LORA" and c["r"] == 16 and c["lora_alpha"] == 32, c
assert os.path.getsize(os.path.join(sys.argv[1], "adapter_model.safetensors")) > 0
PY

"$zt" ckpt inspect "$tmp/ck" 2>&1 | grep -q "LoRA rank 16, alpha 32, 28 adapters on .*only the adapters trained" &&
  ok "zt ckpt inspect names the adapters" || bad "inspect: $("$zt" ckpt inspect "$tmp/ck" 2>&1 | tail -3)"

# One-line errors.
"$zt" "${common[@]}" --only-optimize-lora --steps 1 >/dev/null 2>"$tmp/e1" && bad "--only-optimize-lora alone ran" ||
  { grep -q "needs --lora-dim" "$tmp/e1" && ok "--only-optimize-lora needs --lora-dim" || bad "$(tail -1 "$tmp/e1")"; }
"$zt" "${common[@]}" --lora-dim 4 --lora-modules c_attn --steps 1 >/dev/null 2>"$tmp/e2" && bad "unknown module ran" ||
  { grep -q "'c_attn' is no linear module" "$tmp/e2" && ok "an unknown module is named with the model's modules" || bad "$(tail -1 "$tmp/e2")"; }

exit $((fails > 0))
