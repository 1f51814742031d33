#!/usr/bin/env bash
# `zt report`: one screen with the build, GPUs, CPU, memory and launchers; --json is one JSON
# object; a low locked-memory limit is named as a problem with its fix.
# Usage: report.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }
out=$("$zt" report) || bad "zt report exited $?"
for s in ZeroTrain GPUs CPU Memory "Network and launchers" "ulimit -l" "/dev/shm" OpenBLAS Gloo; do
  [[ "$out" == *"$s"* ]] && ok "shows $s" || bad "no '$s' in: $out"
done
"$zt" report --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["cpus"] > 0 and "problems" in d' &&
  ok "--json is one object" || bad "--json"
low=$( (ulimit -l 64 && "$zt" report) 2>&1)
[[ "$low" == *"ulimit -l) is 64 KiB"* ]] && ok "a low ulimit -l is a problem" || bad "low ulimit -l not named: $low"
[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
