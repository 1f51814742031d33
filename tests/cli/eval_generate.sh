#!/usr/bin/env bash
# `zt eval` and `zt generate` as a user runs them, against transformers' numbers in the fixtures
# (tests/fixtures/hf/*/expected.safetensors): the loss of the fixture's rows written as JSON Lines,
# and greedy generation from its prompts; then the user mistakes, one line each.
# Usage: eval_generate.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
src=$2
fx=$src/tests/fixtures/hf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# Reads a fixture's expected.safetensors with the standard library only (CI has no numpy).
cat >"$tmp/fixture.py" <<'PY'
import json, struct, sys
def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        fmt = {"I32": "i", "F32": "f"}[e["dtype"]]
        out[name] = (e["shape"], list(struct.unpack("<%d%s" % ((b - a) // 4, fmt), data[a:b])))
    return out
what, path = sys.argv[1], sys.argv[2]
t = read(path)
if what == "jsonl":  # one example per row, as transformers' tokenizer would give it
    (B, T), ids = t["input_ids"]
    for b in range(B):
        row = {"input_ids": ids[b * T:(b + 1) * T], "labels": t["labels"][1][b * T:(b + 1) * T],
               "attention_mask": t["attention_mask"][1][b * T:(b + 1) * T]}
        if "token_type_ids" in t:
            row["token_type_ids"] = t["token_type_ids"][1][b * T:(b + 1) * T]
        print(json.dumps(row))
elif what == "loss":
    print(t["loss"][1][0])
elif what == "prompt":  # row 0's prompt ids, comma-separated
    (B, P), ids = t["generate_prompt"]
    print(",".join(map(str, ids[:P])))
elif what == "generated":  # row 0's new ids
    (B, P), _ = t["generate_prompt"]
    (B, L), ids = t["generated"]
    print(" ".join(map(str, ids[P:L])))
elif what == "argmax_jsonl":  # masked LM: the labelled positions relabelled with the argmax
    (B, T, V), logits = t["logits"]  # of transformers' logits, so the accuracy must be 1
    (B, T), ids = t["input_ids"]
    labels = list(t["labels"][1])
    for p, y in enumerate(labels):
        if y >= 0:
            row = logits[p * V:(p + 1) * V]
            labels[p] = max(range(V), key=lambda v: (row[v], -v))
    for b in range(B):
        print(json.dumps({"input_ids": ids[b * T:(b + 1) * T], "labels": labels[b * T:(b + 1) * T],
                          "attention_mask": t["attention_mask"][1][b * T:(b + 1) * T],
                          "token_type_ids": t["token_type_ids"][1][b * T:(b + 1) * T]}))
elif what == "new":
    (B, P), _ = t["generate_prompt"]
    print(t["generated"][0][1] - P)
PY
py() { python3 "$tmp/fixture.py" "$@"; }

for name in gpt2 llama qwen2 opt bert_mlm; do
  py jsonl "$fx/$name/expected.safetensors" >"$tmp/$name.jsonl"
  want=$(py loss "$fx/$name/expected.safetensors")
  out=$("$zt" eval --model "$fx/$name" --data "$tmp/$name.jsonl" --device cpu --micro-batch 2 \
        --metrics-out "$tmp/$name.json" 2>&1)
  got=$(python3 -c "import json; print(json.load(open('$tmp/$name.json'))['loss'])" 2>/dev/null)
  if [ -n "$got" ] && python3 -c "import sys; g, w = $got, $want; sys.exit(0 if abs(g - w) <= 1e-5 * abs(w) else 1)"; then
    echo "ok: zt eval $name: loss $got (transformers $want)"
  else
    echo "FAIL: zt eval $name: loss '$got', transformers $want"; echo "$out" | tail -3; fails=$((fails+1))
  fi
done

# Masked-token accuracy of the BERT fixture: with the labels set to the argmax of transformers'
# logits, every labelled position must be predicted (and the fixture's own labels give 0).
py argmax_jsonl "$fx/bert_mlm/expected.safetensors" >"$tmp/bert_argmax.jsonl"
"$zt" eval --model "$fx/bert_mlm" --data "$tmp/bert_argmax.jsonl" --device cpu \
  --metrics-out "$tmp/bert_argmax.json" >/dev/null 2>&1
got=$(python3 -c "import json; print(json.load(open('$tmp/bert_argmax.json'))['accuracy'])" 2>/dev/null)
low=$(python3 -c "import json; print(json.load(open('$tmp/bert_mlm.json'))['accuracy'])" 2>/dev/null)
if [ "$got" = "1.0" ] && [ "$low" = "0.0" ]; then
  echo "ok: zt eval bert_mlm: masked-token accuracy 1 on transformers' argmax labels, 0 on the fixture's"
else
  echo "FAIL: zt eval bert_mlm accuracy '$got' on transformers' argmax labels (want 1), '$low' on the fixture's"
  fails=$((fails+1))
fi

for name in gpt2 llama qwen2 opt; do
  e=$fx/$name/expected.safetensors
  want=$(py generated "$e")
  got=$("$zt" generate --model "$fx/$name" --prompt-ids "$(py prompt "$e")" \
        --max-new-tokens "$(py new "$e")" --device cpu 2>/dev/null)
  if [ "$got" = "$want" ]; then
    echo "ok: zt generate $name: $got"
  else
    echo "FAIL: zt generate $name: '$got', transformers '$want'"; fails=$((fails+1))
  fi
done

# The stop tokens default to generation_config.json's eos_token_id (an id or a list), as in
# transformers; --eos-id -1 never stops.
e=$fx/llama/expected.safetensors
cp -r "$fx/llama" "$tmp/llama_eos"
third=$(py generated "$e" | awk '{print $3}')
printf '{"eos_token_id": [99999, %s]}\n' "$third" >"$tmp/llama_eos/generation_config.json"
got=$("$zt" generate --model "$tmp/llama_eos" --prompt-ids "$(py prompt "$e")" --max-new-tokens 8 --device cpu 2>/dev/null)
want=$(py generated "$e" | awk -v t="$third" '{for (i = 1; i <= NF; i++) {printf "%s%s", (i > 1 ? " " : ""), $i; if ($i == t) break}; print ""}')
if [ "$got" = "$want" ]; then echo "ok: stops at generation_config's eos: $got"; else echo "FAIL: eos: '$got', want '$want'"; fails=$((fails+1)); fi
got=$("$zt" generate --model "$tmp/llama_eos" --prompt-ids "$(py prompt "$e")" --max-new-tokens 8 --eos-id -1 --device cpu 2>/dev/null)
if [ "$got" = "$(py generated "$e")" ]; then echo "ok: --eos-id -1 runs to the end"; else echo "FAIL: --eos-id -1: '$got'"; fails=$((fails+1)); fi

# A byte-level model from text: the prompt comes back first.
got=$("$zt" generate --model llama-tiny --prompt "Hello" --max-new-tokens 4 --device cpu 2>/dev/null)
if [ "${got:0:5}" = "Hello" ]; then echo "ok: text prompt"; else echo "FAIL: text prompt: '$got'"; fails=$((fails+1)); fi

# expect_error DESCRIPTION EXPECTED_SUBSTRING -- COMMAND...
expect_error() {
  local what=$1 want=$2
  shift 3
  local out rc
  out=$(timeout 60 "$@" 2>&1 </dev/null)
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ] || ! grep -qF -- "$want" <<<"$out" || [ "$(grep -c . <<<"$out")" -gt 2 ]; then
    echo "FAIL: $what: exit $rc:"; echo "$out" | head -5; fails=$((fails+1)); return
  fi
  echo "ok: $what"
}
echo '{"text": "hello"}' >"$tmp/text.jsonl"
expect_error "text rows need a tokenizer" "no tokenizer.json" -- "$zt" eval --model "$fx/gpt2" --data "$tmp/text.jsonl" --device cpu
# `text` rows through a tokenizer evaluate as the ids it makes: the byte tokenizer's ids are the
# UTF-8 bytes (written here by Python), so both files must give the same loss over as many tokens.
printf '{"text": "hello world, a longer line"}\n{"text": "s\\u00e9cond \\u2603"}\n' >"$tmp/text2.jsonl"
python3 - "$tmp/text2.jsonl" >"$tmp/bytes2.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    print(json.dumps({"input_ids": list(json.loads(line)["text"].encode("utf-8"))}))
PY
"$zt" eval --model "$fx/llama" --tokenizer bytes --data "$tmp/text2.jsonl" --device cpu --metrics-out "$tmp/et.json" >/dev/null 2>&1
"$zt" eval --model "$fx/llama" --data "$tmp/bytes2.jsonl" --device cpu --metrics-out "$tmp/eb.json" >/dev/null 2>&1
if python3 - "$tmp/et.json" "$tmp/eb.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["tokens"] == b["tokens"] > 20 and a["loss"] == b["loss"], (a, b)
PY
then echo "ok: text rows evaluate as their tokenizer's ids"; else echo "FAIL: text rows vs ids"; fails=$((fails+1)); fi
printf '{"input_ids": [1, 2]}\n{"input_ids": [1, 999]}\n' >"$tmp/big.jsonl"
expect_error "an id past the vocabulary names the line" "big.jsonl:2" -- "$zt" eval --model "$fx/gpt2" --data "$tmp/big.jsonl" --device cpu
printf '{"input_ids": [1, 2], "labels": [1]}\n' >"$tmp/len.jsonl"
expect_error "labels of another length" "labels" -- "$zt" eval --model "$fx/gpt2" --data "$tmp/len.jsonl" --device cpu
printf '{"input_ids": [1, 2]}\n' >"$tmp/nolabels.jsonl"
expect_error "masked LM without labels" "labels" -- "$zt" eval --model "$fx/bert_mlm" --data "$tmp/nolabels.jsonl" --device cpu
expect_error "wrong task for the model" "--task mlm" -- "$zt" eval --model "$fx/gpt2" --data "$tmp/nolabels.jsonl" --task mlm --device cpu
expect_error "BERT does not generate" "masked-LM" -- "$zt" generate --model "$fx/bert_mlm" --prompt-ids 1,2 --device cpu
expect_error "an id past the vocabulary" "--prompt-ids" -- "$zt" generate --model "$fx/gpt2" --prompt-ids 1,300 --device cpu
expect_error "text prompt without a tokenizer" "tokenizer.json" -- "$zt" generate --model "$fx/opt" --prompt hi --device cpu
expect_error "a tokenizer larger than the model" "do not belong together" -- "$zt" generate --model "$fx/opt" --tokenizer "$src/tests/fixtures/tokenizers/gpt2" --prompt hi --device cpu
echo '{"eos_token_id": "x"}' >"$tmp/llama_eos/generation_config.json"
expect_error "a bad generation_config names it" "generation_config.json" -- "$zt" generate --model "$tmp/llama_eos" --prompt-ids 1,2 --device cpu
expect_error "unknown model" "unknown model" -- "$zt" generate --model nosuch --prompt hi --device cpu
expect_error "folder without config.json" "config.json" -- "$zt" eval --model "$tmp" --data "$tmp/big.jsonl" --device cpu

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all eval/generate checks passed"
