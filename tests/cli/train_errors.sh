#!/usr/bin/env bash
# User mistakes give one clear line and a non-zero exit: never a stack trace, abort or hang.
# Usage: train_errors.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# expect_error DESCRIPTION EXPECTED_SUBSTRING -- COMMAND...
expect_error() {
  local what=$1 want=$2
  shift 3
  local out rc
  out=$(timeout 60 "$@" 2>&1 </dev/null)
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
    echo "FAIL: $what: exit code $rc (want 1 or 2)"; fails=$((fails+1)); return
  fi
  if ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: $what: output lacks '$want':"; echo "$out" | head -5; fails=$((fails+1)); return
  fi
  local lines
  lines=$(grep -c . <<<"$out")
  if [ "$lines" -gt 3 ]; then
    echo "FAIL: $what: $lines lines of output (want one clear line):"; echo "$out" | head -8
    fails=$((fails+1)); return
  fi
  echo "ok: $what"
}

printf '{"train_batch_size": 4, "bf16": {"enabled" true}}' >"$tmp/badjson.json"
printf '{"train_batch_size": 4, "zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}}' >"$tmp/unknown.json"
printf '{"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2}' >"$tmp/triad.json"
printf '{"train_batch_size": 4, "train_batch_size": 8}' >"$tmp/dup.json"
printf '{"train_batch_size": 4}' >"$tmp/ok.json"

expect_error "missing config file" "$tmp/nope.json" -- "$zt" train --config "$tmp/nope.json" --device cpu
expect_error "bad JSON" "badjson.json" -- "$zt" train --config "$tmp/badjson.json" --device cpu
expect_error "unknown key" "reduce_bucket_size" -- "$zt" train --config "$tmp/unknown.json" --device cpu
expect_error "impossible batch triad" "Check batch related parameters" -- "$zt" train --config "$tmp/triad.json" --device cpu
expect_error "duplicate keys" "Duplicate keys in DeepSpeed config" -- "$zt" config check "$tmp/dup.json"
expect_error "unknown model" "unknown model 'gpt5'" -- "$zt" train --config "$tmp/ok.json" --model gpt5 --device cpu
expect_error "missing data file" "$tmp/none.bin" -- "$zt" train --config "$tmp/ok.json" --data "$tmp/none.bin" --device cpu
expect_error "bad device" "unknown device 'tpu'" -- "$zt" train --config "$tmp/ok.json" --device tpu
if [ "$("$zt" --version | grep -c '0 GPU')" = "1" ]; then
  expect_error "cuda unavailable" "cuda:0" -- "$zt" train --config "$tmp/ok.json" --device cuda
fi
expect_error "unknown flag" "did you mean '--steps'" -- "$zt" train --config "$tmp/ok.json" --stpes 3
expect_error "unknown command" "unknown command 'trian'" -- "$zt" trian
expect_error "config check triad" "Check batch related parameters" -- "$zt" config check "$tmp/triad.json"
expect_error "config check world size" "--world-size must be at least 1" -- "$zt" config check "$tmp/ok.json" --world-size 0

# The resolved config: DeepSpeed's triad arithmetic (TB=32, MB=4, W=2 -> GAS=4).
printf '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}' >"$tmp/triad_ok.json"
out=$("$zt" config check "$tmp/triad_ok.json" --world-size 2)
if grep -q '"gradient_accumulation_steps": 4' <<<"$out"; then echo "ok: config check resolves triad"; else
  echo "FAIL: config check resolves triad:"; echo "$out" | head -20; fails=$((fails+1)); fi

"$zt" --help >/dev/null && "$zt" train --help | grep -q -- "--metrics-out" && echo "ok: help" || { echo "FAIL: help"; fails=$((fails+1)); }

echo "$((13 + 3 - fails)) passed, $fails failed"
[ $fails -eq 0 ]
