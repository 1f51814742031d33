# `zt launch` failure handling, as reference §5 documents for DeepSpeed's launch.py and DESIGN.md
# strengthens it: the first rank to fail stops every other rank (SIGTERM, SIGKILL after the grace)
# and its exit code (128+signal when killed) becomes the launcher's; SIGTERM to the launcher
# stops all ranks; no rank survives. Usage: bash launch_failure.sh ZT_BINARY SOURCE_DIR
set -u
ZT=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
port() { echo $((20000 + RANDOM % 12000)); }
now_ms() { date +%s%3N; }
# Every rank wrote its pid to $T/pid.<rank>; none may be alive now.
expect_ranks_gone() {
  for f in "$T"/pid.*; do
    [ -e "$f" ] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null && ! grep -q '^State:\s*Z' "/proc/$(cat "$f")/status" 2>/dev/null; then
      fail "$1: rank pid $(cat "$f") ($f) is still alive"
    fi
  done
  rm -f "$T"/pid.*
}

# --- rank 1 exits 3 after 0.3 s; the others would sleep 60 s ---
cat >"$T/fail.sh" <<EOF
#!/bin/sh
echo \$\$ >$T/pid.\$RANK
if [ "\$RANK" = 1 ]; then sleep 0.3; exit 3; fi
exec sleep 60
EOF
chmod +x "$T/fail.sh"
t0=$(now_ms)
"$ZT" launch --num_procs 3 --master_port "$(port)" "$T/fail.sh" 2>"$T/err"
rc=$?
elapsed=$(($(now_ms) - t0))
[ "$rc" -eq 3 ] || fail "exit $rc, expected rank 1's code 3 ($(cat "$T/err"))"
[ "$elapsed" -lt 10000 ] || fail "took ${elapsed} ms: the sleeping ranks were not stopped"
grep -q "rank 1 (pid [0-9]*) exited with code 3" "$T/err" || fail "failure line: $(cat "$T/err")"
expect_ranks_gone "after a failure"

# --- the failure line names the rank's log file ---
"$ZT" launch --num_procs 2 --enable_each_rank_log "$T/logs" --master_port "$(port)" "$T/fail.sh" \
  2>"$T/err"
[ $? -eq 3 ] || fail "with logs: exit code"
grep -q "log: $T/logs/[0-9]*_rank1.log" "$T/err" || fail "failure line lacks the log: $(cat "$T/err")"
expect_ranks_gone "with logs"

# --- a rank killed by a signal: 128 + signal ---
cat >"$T/segv.sh" <<EOF
#!/bin/sh
echo \$\$ >$T/pid.\$RANK
if [ "\$RANK" = 0 ]; then sleep 0.2; kill -KILL \$\$; fi
exec sleep 60
EOF
chmod +x "$T/segv.sh"
"$ZT" launch --num_procs 2 --master_port "$(port)" "$T/segv.sh" 2>"$T/err"
rc=$?
[ "$rc" -eq 137 ] || fail "killed rank: exit $rc, expected 137 ($(cat "$T/err"))"
grep -q "rank 0 (pid [0-9]*) was killed by signal 9 (SIGKILL)" "$T/err" || fail "$(cat "$T/err")"
expect_ranks_gone "after a signal"

# --- ranks that ignore SIGTERM are killed after ZT_LAUNCH_GRACE_S ---
cat >"$T/stubborn.sh" <<EOF
#!/bin/sh
echo \$\$ >$T/pid.\$RANK
trap '' TERM
if [ "\$RANK" = 1 ]; then sleep 0.3; exit 4; fi
sleep 60
EOF
chmod +x "$T/stubborn.sh"
t0=$(now_ms)
ZT_LAUNCH_GRACE_S=0.5 "$ZT" launch --num_procs 2 --master_port "$(port)" "$T/stubborn.sh" 2>"$T/err"
rc=$?
elapsed=$(($(now_ms) - t0))
[ "$rc" -eq 4 ] || fail "stubborn ranks: exit $rc, expected 4 ($(cat "$T/err"))"
[ "$elapsed" -lt 10000 ] || fail "stubborn ranks: took ${elapsed} ms despite ZT_LAUNCH_GRACE_S=0.5"
expect_ranks_gone "after SIGKILL"
ZT_LAUNCH_GRACE_S=soon "$ZT" launch --num_procs 1 "$T/fail.sh" 2>"$T/err" && fail "bad grace accepted"
grep -q "ZT_LAUNCH_GRACE_S='soon'" "$T/err" || fail "bad grace message: $(cat "$T/err")"

# --- SIGTERM to the launcher stops every rank; exit 128+15 ---
cat >"$T/sleep.sh" <<EOF
#!/bin/sh
echo \$\$ >$T/pid.\$RANK
exec sleep 60
EOF
chmod +x "$T/sleep.sh"
"$ZT" launch --num_procs 2 --save_pid --master_port "$(port)" "$T/sleep.sh" >"$T/out" 2>"$T/err" &
L=$!
for _ in $(seq 100); do
  [ -e "$T/pid.0" ] && [ -e "$T/pid.1" ] && break
  sleep 0.05
done
[ -e "/tmp/$L.deepspeed" ] || fail "no pid file /tmp/$L.deepspeed while running"
kill -TERM "$L"
wait "$L"
rc=$?
[ "$rc" -eq 143 ] || fail "SIGTERM to the launcher: exit $rc, expected 143 ($(cat "$T/err"))"
grep -q "received SIGTERM; stopped 2 running rank(s)" "$T/err" || fail "$(cat "$T/err")"
[ ! -e "/tmp/$L.deepspeed" ] || fail "pid file left after SIGTERM"
expect_ranks_gone "after SIGTERM to the launcher"
echo "launch_failure: ok"
