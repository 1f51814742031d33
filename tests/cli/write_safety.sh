#!/usr/bin/env bash
# Outputs never replace what they must not, and a failed write is never silent (issue:
# reliability 1-5): device nodes and FIFOs are written in place (never renamed over), symlinks
# stay links, /dev/full is an error naming the file (or, for metrics with --on-write-error warn,
# one warning and training goes on), stdout to /dev/full fails, FIFOs as inputs do not block,
# integers too large for their type are refused naming the flag, deep JSON is refused.
# Usage: write_safety.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }
export XDG_CACHE_HOME="$tmp/cache" OMP_NUM_THREADS=1

printf 'hello world, a small corpus for a token file\n%.0s' {1..50} >"$tmp/text.txt"
printf '{"train_batch_size": 2}' >"$tmp/cfg.json"
"$zt" data prepare "$tmp/text.txt" -o "$tmp/data.bin" >/dev/null 2>&1 || bad "data prepare"
train=("$zt" train --config "$tmp/cfg.json" --device cpu --steps 2 --seq-len 16 --sample-tokens 0
       --data "$tmp/data.bin")

# /dev/null and /dev/full stay character devices (as root a rename would replace them).
if [ -w /dev/full ]; then
  before=$(stat -c '%F %t:%T %i' /dev/full)
  out=$("$zt" data prepare "$tmp/text.txt" -o /dev/full 2>&1); rc=$?
  after=$(stat -c '%F %t:%T %i' /dev/full)
  if [ $rc -ne 0 ] && [ "$before" = "$after" ] && grep -q "/dev/full" <<<"$out"; then
    ok "data prepare -o /dev/full: an error naming it, the device node unchanged"
  else bad "data prepare -o /dev/full: rc $rc, '$before' -> '$after': $out"; fi
  out=$("${train[@]}" --metrics-out /dev/full 2>&1); rc=$?
  if [ $rc -ne 0 ] && grep -q "metrics file '/dev/full'" <<<"$out"; then
    ok "--metrics-out /dev/full fails naming the file"
  else bad "--metrics-out /dev/full: rc $rc: $(tail -2 <<<"$out")"; fi
  out=$("${train[@]}" --metrics-out /dev/full --on-write-error warn 2>&1); rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c "no longer written" <<<"$out")" = 1 ]; then
    ok "--on-write-error warn: one warning, training goes on"
  else bad "--on-write-error warn: rc $rc: $(tail -3 <<<"$out")"; fi
  "$zt" config check "$tmp/cfg.json" >/dev/full 2>"$tmp/err"; rc=$?
  if [ $rc -ne 0 ] && grep -q "standard output" "$tmp/err"; then ok "stdout to /dev/full fails"
  else bad "stdout to /dev/full: rc $rc"; fi
fi
before=$(stat -c '%F %i' /dev/null)
"$zt" data prepare "$tmp/text.txt" -o /dev/null >/dev/null 2>&1 || bad "data prepare -o /dev/null"
[ "$(stat -c '%F %i' /dev/null)" = "$before" ] && ok "-o /dev/null stays the device" || bad "/dev/null replaced"

# A symlinked output stays a link; its target gets the data.
mkdir -p "$tmp/real"
ln -s real/metrics.jsonl "$tmp/link.jsonl"
"${train[@]}" --metrics-out "$tmp/link.jsonl" >/dev/null 2>&1
if [ -L "$tmp/link.jsonl" ] && [ "$(grep -c '"step"' "$tmp/real/metrics.jsonl")" = 2 ]; then
  ok "a symlinked metrics file stays a link, its target has the records"
else bad "symlinked metrics file"; fi
ln -s real/tokens.bin "$tmp/tokens_link.bin"
"$zt" data prepare "$tmp/text.txt" -o "$tmp/tokens_link.bin" >/dev/null 2>&1
[ -L "$tmp/tokens_link.bin" ] && [ -s "$tmp/real/tokens.bin" ] && ok "a symlinked token file stays a link" ||
  bad "symlinked token file"

# FIFOs as inputs fail at once instead of blocking; as outputs with no reader they fail too.
mkfifo "$tmp/fifo"
for args in "--data $tmp/fifo" "--config $tmp/fifo"; do
  # shellcheck disable=SC2086
  out=$(timeout 20 "$zt" train --device cpu --steps 1 --config "$tmp/cfg.json" $args 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -q "FIFO" <<<"$out"; then ok "FIFO as ${args%% *}: a clear error"
  else bad "FIFO as ${args%% *}: rc $rc: $out"; fi
done

# Integers that do not fit.
out=$("$zt" train --config "$tmp/cfg.json" --device cpu --steps 99999999999999999999 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q -- "--steps .*out of range" <<<"$out" && ok "--steps 1e20 refused naming the flag" ||
  bad "--steps 1e20: rc $rc: $out"
printf '{"train_batch_size": 99999999999999999999}' >"$tmp/huge.json"
out=$("$zt" config check "$tmp/huge.json" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "train_batch_size" <<<"$out" && ok "a config integer beyond int64 refused" ||
  bad "config integer beyond int64: $out"

# A number beyond any JSON number type (found by the fuzzer: it used to abort the reader).
printf '{"train_batch_size": 1E400}' >"$tmp/overflow.json"
out=$("$zt" config check "$tmp/overflow.json" 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "number overflow" <<<"$out" && ok "1E400 in a config: one line" ||
  bad "1E400: rc $rc: $out"

# 100,000 levels of nesting: one line, no crash.
python3 -c "print('{\"a\":' * 100000 + '1' + '}' * 100000)" >"$tmp/deep.json"
out=$("$zt" config check "$tmp/deep.json" 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "nested more than" <<<"$out" && ok "deep JSON refused" ||
  bad "deep JSON: rc $rc: $(head -c 300 <<<"$out")"

# Folders without permission (as another user: root reads and writes anywhere).
if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null && runuser -u nobody -- test -x "$zt" 2>/dev/null; then
  "${train[@]}" --save "$tmp/ckpt" >/dev/null 2>&1 || bad "save for the permission case"
  chmod 700 "$tmp/ckpt"
  chmod 755 "$tmp"
  out=$(runuser -u nobody -- "${train[@]}" --load "$tmp/ckpt" 2>&1); rc=$?
  [ $rc -ne 0 ] && grep -q "Permission denied" <<<"$out" && grep -q "$tmp/ckpt" <<<"$out" &&
    ok "a checkpoint folder without permission: one line naming it" ||
    bad "checkpoint folder without permission: rc $rc: $(tail -2 <<<"$out")"
  mkdir -p "$tmp/ro" && chmod 555 "$tmp/ro"
  out=$(runuser -u nobody -- "${train[@]}" --save "$tmp/ro/ckpt" 2>&1); rc=$?
  [ $rc -ne 0 ] && grep -q "Permission denied" <<<"$out" && grep -q "$tmp/ro" <<<"$out" &&
    ok "saving into a folder without write permission: one line naming it" ||
    bad "saving without permission: rc $rc: $(tail -2 <<<"$out")"
else
  echo "skip: permission cases (need root and runuser to act as another user)"
fi

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
exit $((fails > 0))
