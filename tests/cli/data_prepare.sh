#!/usr/bin/env bash
# `zt data prepare`: the output is the same file for any --workers, a .jsonl.gz gives the file
# the plain .jsonl gives, bad lines are errors naming FILE:LINE (or skipped and counted), the
# validation split writes its second file; `zt train --data` takes a weighted blend of files.
# Usage: data_prepare.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }

mkdir -p "$tmp/corpus"
for f in 1 2 3; do
  for i in $(seq 1 400); do
    printf '{"id": %d, "text": "document %d of file %d: caf\\u00e9 \\"quoted\\" line\\nnext %s"}\n' \
      "$i" "$i" "$f" "$(printf 'x%.0s' $(seq 1 $((i % 17))))"
  done >"$tmp/corpus/part$f.jsonl"
done
for i in $(seq 1 20); do seq 1 $((i * 50)) >"$tmp/corpus/text$i.txt"; done

"$zt" data prepare "$tmp/corpus" -o "$tmp/w1.bin" --workers 1 >"$tmp/out1" 2>"$tmp/err1" ||
  { bad "prepare --workers 1: $(tail -2 "$tmp/err1")"; }
"$zt" data prepare "$tmp/corpus" -o "$tmp/w4.bin" --workers 4 >"$tmp/out4" 2>"$tmp/err4" ||
  { bad "prepare --workers 4: $(tail -2 "$tmp/err4")"; }
if cmp -s "$tmp/w1.bin" "$tmp/w4.bin" && [ -s "$tmp/w1.bin" ]; then
  ok "--workers 1 and --workers 4 write the same file"
else
  bad "--workers 1 and --workers 4 differ"
fi
grep -q "1220 documents from 23 files" "$tmp/out1" && ok "summary counts 1200 lines + 20 texts" ||
  bad "summary: $(cat "$tmp/out1")"

# A BPE tokenizer (the GPT-2 fixture): the same file for any --workers too.
tok=${2:-.}/tests/fixtures/tokenizers/gpt2
if [ -f "$tok/tokenizer.json" ]; then
  "$zt" data prepare --tokenizer "$tok" "$tmp/corpus" -o "$tmp/b1.bin" --workers 1 >/dev/null 2>"$tmp/errb" &&
    "$zt" data prepare --tokenizer "$tok" "$tmp/corpus" -o "$tmp/b4.bin" --workers 4 >/dev/null 2>>"$tmp/errb"
  if cmp -s "$tmp/b1.bin" "$tmp/b4.bin" && [ -s "$tmp/b1.bin" ]; then
    ok "--tokenizer gpt2 fixture: --workers 1 and 4 write the same file"
  else
    bad "--tokenizer gpt2 fixture: $(tail -2 "$tmp/errb")"
  fi
fi

gzip -c "$tmp/corpus/part2.jsonl" >"$tmp/part2.jsonl.gz"
"$zt" data prepare "$tmp/corpus/part2.jsonl" -o "$tmp/plain.bin" >/dev/null 2>&1
"$zt" data prepare "$tmp/part2.jsonl.gz" -o "$tmp/gz.bin" --workers 3 >/dev/null 2>"$tmp/errgz"
if cmp -s "$tmp/plain.bin" "$tmp/gz.bin" && [ -s "$tmp/gz.bin" ]; then
  ok ".jsonl.gz gives the plain file"
else
  bad ".jsonl.gz differs from .jsonl: $(tail -2 "$tmp/errgz")"
fi

printf '{"text": "fine"}\n\n{"text": 12}\n{"text": "also fine"}\n' >"$tmp/bad.jsonl"
out=$("$zt" data prepare "$tmp/bad.jsonl" -o "$tmp/bad.bin" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF "$tmp/bad.jsonl:3: \"text\" is a number, not a string" <<<"$out" &&
   [ ! -e "$tmp/bad.bin" ] && [ "$(grep -c . <<<"$out")" -le 2 ]; then
  ok "a bad line: one error naming FILE:LINE, no output"
else
  bad "bad line: rc $rc: $out"
fi
out=$("$zt" data prepare "$tmp/bad.jsonl" -o "$tmp/bad.bin" --text-key body 2>&1)
grep -qF "$tmp/bad.jsonl:1: no \"body\" key" <<<"$out" && ok "missing key named" || bad "missing key: $out"
out=$("$zt" data prepare "$tmp/bad.jsonl" -o "$tmp/skip.bin" --skip-bad 2>&1)
grep -q "1 bad documents skipped" <<<"$out" && [ -s "$tmp/skip.bin" ] && ok "--skip-bad counts" ||
  bad "--skip-bad: $out"

out=$("$zt" data prepare "$tmp/corpus" -o "$tmp/split/train.bin" --val-fraction 0.1 --append-eos 2>&1)
grep -q "wrote $tmp/split/train_val.bin: .* 122 documents (validation)" <<<"$out" &&
  [ -s "$tmp/split/train_val.bin" ] && ok "--val-fraction writes train_val.bin" ||
  bad "--val-fraction: $out"
out=$("$zt" data prepare "$tmp/corpus" -o "$tmp/x.bin" --val-fraction 1.5 2>&1)
grep -qF -- "--val-fraction expects a number in [0, 1)" <<<"$out" && ok "bad fraction" ||
  bad "bad fraction: $out"

# A weighted blend in zt train, and its errors.
cat >"$tmp/ds.json" <<'JSON'
{"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
JSON
"$zt" data prepare "$tmp/corpus/text1.txt" "$tmp/corpus/text2.txt" "$tmp/corpus/text3.txt" \
  -o "$tmp/small.bin" >/dev/null 2>&1
train() {
  timeout 300 "$zt" train --config "$tmp/ds.json" --model gpt2-tiny --device cpu --steps 2 \
    --seq-len 16 --sample-tokens 0 "$@"
}
if train --data 0.7 "$tmp/w1.bin" 0.3 "$tmp/small.bin" >"$tmp/tout" 2>"$tmp/terr" &&
   grep -q "trained 2 steps" "$tmp/tout" && grep -q "0.7000 of the windows from $tmp/w1.bin" "$tmp/terr"; then
  ok "zt train --data 0.7 A 0.3 B"
else
  bad "blend training: $(tail -3 "$tmp/terr")"
fi
out=$(train --data 0.7 "$tmp/w1.bin" 0.3 2>&1)
grep -qF "WEIGHT FILE pairs" <<<"$out" && ok "blend: odd values" || bad "odd values: $out"
out=$(train --data -1 "$tmp/w1.bin" 1 "$tmp/small.bin" 2>&1)
grep -qF "weights must be positive" <<<"$out" && ok "blend: negative weight" || bad "negative: $out"
out=$(train --data 0.5 "$tmp/w1.bin" 0.5 "$tmp/none.bin" 2>&1)
grep -qF -- "--data: '$tmp/none.bin' does not exist" <<<"$out" && ok "blend: missing file" ||
  bad "missing file: $out"

if [ $fails -ne 0 ]; then echo "$fails failed"; exit 1; fi
echo "all passed"
