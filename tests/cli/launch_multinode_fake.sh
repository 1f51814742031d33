# `zt launch` across "nodes" on one machine: the ssh runner with a stand-in for ssh (ZT_SSH) that
# runs the remote command here as sshd would (a new session, a login's bare environment, stdin
# passed through), so the whole multi-node path runs: pre-flight, the quoted remote command, the
# node launchers, the master -> node links, rank-prefixed output and whole-job teardown.
# Oracles: a 2-node x 2-rank CPU training run must end at the single-process run's loss (Gloo sums
# in another order: 1e-5 relative, as tests/dist/zero_equivalence.py); DeepSpeed launch.py's
# documented rank variables (reference §5); a rank failing with code 3 on node 1 must make the
# launcher exit 3 naming that rank and host, with no process left; SIGTERM to the launcher must
# leave no process. Usage: bash launch_multinode_fake.sh ZT_BINARY SOURCE_DIR
set -u
ZT=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute: the test runs in its folder
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
port() { echo $((20000 + RANDOM % 12000)); }
now_ms() { date +%s%3N; }
command -v setsid >/dev/null || { echo "launch_multinode_fake: skipped (no setsid)"; exit 0; }

cat >"$T/fakessh" <<'EOF2'
#!/bin/sh
# ssh stand-in: skips ssh's options, then runs the remote command here as sshd would: in a new
# session (signals to this process do not reach it), with a bare login environment.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-F|-i|-l|-E) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
echo "$1" >>"$FAKESSH_LOG"
shift
exec env -i PATH=/usr/bin:/bin HOME="$HOME" setsid -w sh -c "$*"
EOF2
chmod +x "$T/fakessh"
export ZT_SSH="$T/fakessh" FAKESSH_LOG="$T/ssh.log"
export ZT_LAUNCH_GRACE_S=2  # exported to the nodes too (ZT_*)
printf 'node-a slots=2\nnode-b slots=2\n' >"$T/hostfile"
cd "$T" || fail "cd $T"

# --- what each rank receives, through a shell that must not reinterpret anything ---
cat >"$T/show.sh" <<'EOF2'
#!/bin/sh
echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE lsize=$LOCAL_SIZE cross=$CROSS_RANK/$CROSS_SIZE master=$MASTER_ADDR:$MASTER_PORT cvd=${CUDA_VISIBLE_DEVICES-unset} mark=${ZT_TEST_MARK-unset} args=$*"
echo "token=$ZT_JOB_TOKEN" >&2
EOF2
chmod +x "$T/show.sh"
P=$(port)
hostile='a b;$(touch '"$T"'/pwned)`id` "q" '"'"'s'"'"' *'
# No --master_addr: the first host's first `hostname -I` address, as DeepSpeed finds it.
M=$(hostname -I 2>/dev/null | awk '{print $1}')
[ -n "$M" ] || M=127.0.0.1
ZT_TEST_MARK='x y$HOME' "$ZT" launch -H hostfile --num_procs 2 --master_port "$P" \
  ./show.sh "$hostile" >"$T/out" 2>"$T/err" || fail "show run: exit $? ($(cat "$T/err"))"
[ ! -e "$T/pwned" ] || fail "an argument was executed by a shell"
for r in 0 1 2 3; do
  node=$((r / 2))
  want="[rank $r] rank=$r local=$((r % 2)) world=4 lsize=2 cross=$node/2 master=$M:$P cvd=unset mark=x y\$HOME args=--local_rank=$((r % 2)) $hostile"
  grep -qxF -- "$want" "$T/out" || fail "rank $r line: want '$want', got: $(cat "$T/out")"
done
[ "$(grep -c '^\[rank [0-3]\] token=' "$T/err")" -eq 4 ] || fail "stderr lines not rank-prefixed: $(cat "$T/err")"
[ "$(sed -n 's/^\[rank [0-3]\] token=//p' "$T/err" | sort -u | wc -l)" -eq 1 ] || fail "ranks got different tokens"
grep -qx "node-a" "$T/ssh.log" && grep -qx "node-b" "$T/ssh.log" || fail "ssh was not run for both hosts: $(cat "$T/ssh.log")"

# --- 2 nodes x 2 CPU ranks train to the single-process run's loss ---
cat >"$T/ds.json" <<'EOF2'
{"train_batch_size": 8, "gradient_accumulation_steps": 1, "zero_allow_untested_optimizer": true,
 "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}},
 "zero_optimization": {"stage": 1}}
EOF2
# The nodes get the launcher's ZT_* and the env file's lines (DeepSpeed's .deepspeed_env).
printf 'OMP_NUM_THREADS=1\nOPENBLAS_NUM_THREADS=1\n' >"$T/.deepspeed_env"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 XDG_CACHE_HOME="$T/cache" ZT_COMM_TIMEOUT_S=120
train() {  # train METRICS
  echo train --config "$T/ds.json" --device cpu --steps 6 --seq-len 32 --sample-tokens 0 \
    --order sequential --metrics-out "$1"
}
"$ZT" $(train "$T/single.jsonl") >"$T/single.out" 2>&1 || fail "single-process run: $(tail -5 "$T/single.out")"
# No --master_addr: rank 0 serves the rendezvous store on this machine's first non-loopback
# address (hostname -I), as a multi-node job does, and its own client reaches it there.
"$ZT" launch -H hostfile --num_procs 2 --master_port "$(port)" \
  "$ZT" $(train "$T/multi.jsonl") \
  >"$T/multi.out" 2>&1 || fail "2x2 run: exit $? ($(tail -20 "$T/multi.out"))"
last_loss() { tail -1 "$1" | sed -n 's/.*"loss": *\([-0-9.eE+]*\).*/\1/p'; }
a=$(last_loss "$T/single.jsonl")
b=$(last_loss "$T/multi.jsonl")
[ -n "$a" ] && [ -n "$b" ] || fail "no final loss (single '$a', 2x2 '$b')"
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * (a < 0 ? -a : a)) }' ||
  fail "final loss of 2 nodes x 2 ranks $b != single-process $a"
[ "$(wc -l <"$T/multi.jsonl")" -eq "$(wc -l <"$T/single.jsonl")" ] || fail "metrics line counts differ"
rm -f "$T/.deepspeed_env"

# --- rank 3 (node 1) fails with code 3: every rank on every node stops; exit 3 names it ---
expect_gone() {
  for _ in $(seq 50); do
    alive=""
    for f in "$T"/pid.*; do
      [ -e "$f" ] || continue
      if kill -0 "$(cat "$f")" 2>/dev/null && ! grep -q '^State:\s*Z' "/proc/$(cat "$f")/status" 2>/dev/null; then
        alive="$alive $f"
      fi
    done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  [ -z "$alive" ] || fail "$1: still alive:$alive"
  pgrep -f -- "--zt_job_token" >/dev/null && fail "$1: a node launcher is still running"
  rm -f "$T"/pid.*
}
cat >"$T/fail.sh" <<EOF2
#!/bin/sh
echo \$\$ >$T/pid.\$RANK
if [ "\$RANK" = 3 ]; then sleep 0.5; exit 3; fi
exec sleep 60
EOF2
chmod +x "$T/fail.sh"
t0=$(now_ms)
"$ZT" launch -H hostfile --num_procs 2 --master_port "$(port)" ./fail.sh >"$T/out" 2>"$T/err"
rc=$?
elapsed=$(($(now_ms) - t0))
[ "$rc" -eq 3 ] || fail "failing rank: exit $rc, expected 3 ($(cat "$T/err"))"
[ "$elapsed" -lt 10000 ] || fail "failing rank: took ${elapsed} ms"
tail -1 "$T/err" | grep -q "^zt launch: rank 3 on node-b (node 1) exited with code 3" ||
  fail "last line does not name rank 3 on node-b: $(cat "$T/err")"
grep -q "zt-launch-node-failure" "$T/err" && fail "the node's marker line reached the user"
expect_gone "after a rank failure"

# --- SIGTERM to the launcher: every node stops its ranks, nothing is left ---
cat >"$T/sleep.sh" <<EOF2
#!/bin/sh
echo \$\$ >$T/pid.\$RANK
exec sleep 60
EOF2
chmod +x "$T/sleep.sh"
"$ZT" launch -H hostfile --num_procs 2 --master_port "$(port)" ./sleep.sh >"$T/out" 2>"$T/err" &
L=$!
for _ in $(seq 200); do
  [ -e "$T/pid.0" ] && [ -e "$T/pid.3" ] && break
  sleep 0.05
done
kill -TERM "$L"
wait "$L"
rc=$?
[ "$rc" -eq 143 ] || fail "SIGTERM: exit $rc, expected 143 ($(cat "$T/err"))"
grep -q "received SIGTERM; stopped 2 node(s)" "$T/err" || fail "SIGTERM line: $(cat "$T/err")"
expect_gone "after SIGTERM to the launcher"

# --- a node whose ssh fails (exit 255) is named by the pre-flight, nothing starts ---
cat >"$T/deadssh" <<'EOF2'
#!/bin/sh
for a; do last=$a; done
case "$*" in *node-b*) echo "ssh: connect to host node-b port 22: Connection refused" >&2; exit 255 ;; esac
exec "$ZT_REAL_FAKESSH" "$@"
EOF2
chmod +x "$T/deadssh"
ZT_REAL_FAKESSH="$T/fakessh" ZT_SSH="$T/deadssh" "$ZT" launch -H hostfile --num_procs 2 \
  --master_port "$(port)" ./sleep.sh >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" -eq 1 ] || fail "dead node: exit $rc, expected 1 ($(cat "$T/err"))"
grep -q "host node-b: ssh without a password failed: ssh: connect to host node-b port 22: Connection refused; set up key login" "$T/err" ||
  fail "pre-flight line: $(cat "$T/err")"
[ ! -e "$T/pid.0" ] || fail "ranks started despite a failed pre-flight"
echo "launch_multinode_fake: ok"
