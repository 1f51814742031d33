#!/usr/bin/env bash
# `zt ckpt export-hf` from the command line: a transformers model directory exported unchanged
# has the same tensors (names, dtypes, shapes: read from the safetensors headers) and the same
# generation config, one progress line per file and a summary; --dtype and --max-shard-size
# change what they should; an output path that is a file is one error line naming it.
# Usage: export_hf.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
src=$2/tests/fixtures/hf/llama
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }

# The "name":{"dtype":..,"shape":[..]} entries of a safetensors header, sorted (the header is
# JSON after an 8-byte little-endian length).
tensors() {
  local n
  n=$(od -An -t u8 -N8 "$1" | tr -d ' ')
  tail -c +9 "$1" | head -c "$n" | grep -o '"[^"]*":{"dtype":"[A-Z0-9]*","shape":\[[0-9,]*\]' | sort
}

out=$("$zt" ckpt export-hf "$src" "$tmp/out" 2>"$tmp/err"); rc=$?
if [ $rc -eq 0 ] && [ -s "$tmp/out/model.safetensors" ] && [ -s "$tmp/out/config.json" ]; then
  ok "export-hf llama: model.safetensors and config.json"
else bad "export-hf llama: rc $rc: $out $(cat "$tmp/err")"; fi
want=$(tensors "$src/model.safetensors")
got=$(tensors "$tmp/out/model.safetensors")
if [ -n "$want" ] && [ "$want" = "$got" ] && [ "$(wc -l <<<"$got")" -eq 21 ]; then
  ok "the same 21 tensors, dtypes and shapes as transformers' file"
else bad "tensors differ: $(diff <(echo "$want") <(echo "$got") | head -5)"; fi
grep -q '"format":"pt"' "$tmp/out/model.safetensors" && ok "__metadata__ format pt" ||
  bad "no format pt metadata"
cmp -s "$src/generation_config.json" "$tmp/out/generation_config.json" &&
  ok "generation_config.json copied" || bad "generation_config.json not copied"
grep -q '"model_type": "llama"' "$tmp/out/config.json" && ok "config.json is llama's" ||
  bad "config.json: $(head -c 200 "$tmp/out/config.json")"
grep -q "wrote $tmp/out/model.safetensors" "$tmp/err" && grep -q "21 tensors" <<<"$out" &&
  ok "progress and summary lines" || bad "progress/summary: $out $(cat "$tmp/err")"

# --dtype bf16: every tensor BF16, the config says so.
"$zt" ckpt export-hf "$src" "$tmp/bf16" --dtype bf16 >/dev/null 2>&1
if [ "$(tensors "$tmp/bf16/model.safetensors" | grep -c '"dtype":"BF16"')" -eq 21 ] &&
   grep -q '"dtype": "bfloat16"' "$tmp/bf16/config.json"; then ok "--dtype bf16"
else bad "--dtype bf16"; fi

# --max-shard-size: shards and an index naming every tensor.
"$zt" ckpt export-hf "$src" "$tmp/sharded" --max-shard-size 40KB >/dev/null 2>&1
n=$(ls "$tmp/sharded" | grep -c '^model-000..-of-000..\.safetensors$')
names=$(grep -c '"model\.\|"lm_head\.' "$tmp/sharded/model.safetensors.index.json")
if [ "$n" -gt 3 ] && [ "$names" -eq 21 ] && [ ! -e "$tmp/sharded/model.safetensors" ]; then
  ok "--max-shard-size 40KB: $n shards, an index of 21 tensors"
else bad "--max-shard-size: $n shards, $names names"; fi

# Errors: one line naming the path.
touch "$tmp/file"
err=$("$zt" ckpt export-hf "$src" "$tmp/file" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -q "$tmp/file" <<<"$err"; then
  ok "OUT is a file: one line naming it"
else bad "OUT is a file: rc $rc: $err"; fi
err=$("$zt" ckpt export-hf "$tmp" "$tmp/o2" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "neither" <<<"$err"; then ok "SRC neither: named"
else bad "SRC neither: rc $rc: $err"; fi
err=$("$zt" ckpt export-hf "$src" "$tmp/o3" --dtype int8 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q -- "--dtype" <<<"$err" && ok "--dtype int8 refused" || bad "--dtype int8: $err"
"$zt" ckpt --help | grep -q "export-hf" && ok "help lists export-hf" || bad "help"

echo "$fails failed"
[ $fails -eq 0 ]
