# `zt launch` end to end on one machine with CPU ranks (no GPU needed): --help, the arguments and
# environment each rank receives (DeepSpeed launch.py's RANK/LOCAL_RANK/WORLD_SIZE/... and
# --local_rank=N first), per-rank log files, --no_local_rank, core binding, --save_pid, and the
# errors reference §5 documents. Usage: bash launch_basic.sh ZT_BINARY SOURCE_DIR
set -u
ZT=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# A random port per run: other tests may be using 29500 right now.
port() { echo $((20000 + RANDOM % 12000)); }

# --- help ---
"$ZT" launch --help >"$T/help" || fail "--help exited non-zero"
grep -q "usage: zt launch" "$T/help" || fail "--help does not print the usage"

# --- what each rank receives ---
cat >"$T/show.sh" <<'EOF'
#!/bin/sh
echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE lsize=$LOCAL_SIZE cross=$CROSS_RANK/$CROSS_SIZE master=$MASTER_ADDR:$MASTER_PORT cvd=${CUDA_VISIBLE_DEVICES-unset} args=$*"
echo "token=$ZT_JOB_TOKEN" >&2
EOF
chmod +x "$T/show.sh"
P=$(port)
CUDA_VISIBLE_DEVICES=7 "$ZT" launch --num_procs 3 --master_port "$P" "$T/show.sh" a "b c" \
  >"$T/out" 2>"$T/err" || fail "3 CPU ranks: exit $? ($(cat "$T/err"))"
for r in 0 1 2; do
  want="rank=$r local=$r world=3 lsize=3 cross=0/1 master=127.0.0.1:$P cvd=7 args=--local_rank=$r a b c"
  grep -qxF "$want" "$T/out" || fail "rank $r line missing: want '$want', got: $(cat "$T/out")"
done
[ "$(wc -l <"$T/out")" -eq 3 ] || fail "expected 3 lines of output, got $(cat "$T/out")"
[ "$(grep '^token=' "$T/err" | sort -u | wc -l)" -eq 1 ] || fail "ranks got different ZT_JOB_TOKENs"
grep -qE '^token=[0-9a-f]{32}$' "$T/err" || fail "ZT_JOB_TOKEN is not 32 hex digits"

# Flags after PROGRAM belong to PROGRAM; --no_local_rank drops --local_rank=N.
"$ZT" launch --num_procs 1 --no_local_rank --master_port "$(port)" "$T/show.sh" --num_gpus 5 \
  >"$T/out" 2>/dev/null || fail "--no_local_rank run failed"
grep -q "args=--num_gpus 5$" "$T/out" || fail "PROGRAM's flags were not passed untouched: $(cat "$T/out")"

# --- per-rank logs: DIR/<timestamp>_rank<R>.log, nothing on the terminal ---
"$ZT" launch --num_procs 2 --enable_each_rank_log "$T/logs" --master_port "$(port)" "$T/show.sh" \
  >"$T/out" 2>/dev/null || fail "--enable_each_rank_log run failed"
[ ! -s "$T/out" ] || fail "rank output reached the terminal despite --enable_each_rank_log"
for r in 0 1; do
  f=$(ls "$T"/logs/*_rank$r.log 2>/dev/null) || fail "no log file for rank $r"
  basename "$f" | grep -qE "^[0-9]{14}_rank$r\.log$" || fail "log name $f is not <timestamp>_rank$r.log"
  grep -q "^rank=$r " "$f" || fail "rank $r log lacks its stdout"
  grep -q "^token=" "$f" || fail "rank $r log lacks its stderr"
done
: >"$T/afile"
"$ZT" launch --num_procs 1 --enable_each_rank_log "$T/afile" "$T/show.sh" 2>"$T/err" &&
  fail "a log 'directory' that is a file was accepted"
grep -q "should not be a file" "$T/err" || fail "log dir error text: $(cat "$T/err")"

# --- core binding: one core each, OMP_NUM_THREADS=1 ---
if grep -qE 'Cpus_allowed_list:\s*0-' /proc/self/status; then
  cat >"$T/cpus.sh" <<'EOF'
#!/bin/sh
echo "rank=$RANK omp=$OMP_NUM_THREADS $(grep Cpus_allowed_list /proc/self/status | tr -d '\t')"
EOF
  chmod +x "$T/cpus.sh"
  "$ZT" launch --num_procs 2 --bind_cores_to_rank --bind_core_list 0,1 --master_port "$(port)" \
    "$T/cpus.sh" >"$T/out" 2>/dev/null || fail "--bind_cores_to_rank run failed"
  grep -qx "rank=0 omp=1 Cpus_allowed_list:0" "$T/out" || fail "rank 0 binding: $(cat "$T/out")"
  grep -qx "rank=1 omp=1 Cpus_allowed_list:1" "$T/out" || fail "rank 1 binding: $(cat "$T/out")"
fi

# --- --save_pid: /tmp/<launcher pid>.deepspeed holds the launcher's pid while the job runs ---
cat >"$T/pid.sh" <<'EOF'
#!/bin/sh
[ "$(cat /tmp/$PPID.deepspeed)" = "$PPID" ] && echo pidfile-ok
EOF
chmod +x "$T/pid.sh"
"$ZT" launch --num_procs 1 --save_pid --master_port "$(port)" "$T/pid.sh" >"$T/out" 2>/dev/null ||
  fail "--save_pid run failed"
grep -q "^launcher pid: [0-9]*$" "$T/out" || fail "--save_pid did not print the launcher pid"
grep -q "^pidfile-ok$" "$T/out" || fail "rank did not find /tmp/<launcher pid>.deepspeed"
L=$(sed -n 's/^launcher pid: //p' "$T/out")
[ ! -e "/tmp/$L.deepspeed" ] || fail "pid file left behind"

# --- errors before anything starts: exit code and the text that says what to do ---
expect_error() {  # expect_error CODE TEXT ARGS...
  local code=$1 text=$2
  shift 2
  "$ZT" launch "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "zt launch $*: exit $rc, expected $code ($(cat "$T/err"))"
  grep -qF -- "$text" "$T/err" || fail "zt launch $*: stderr lacks '$text': $(cat "$T/err")"
}
printf 'localhost slots=2\n' >"$T/hf_local"
printf 'worker-9 slots=2\n' >"$T/hf_remote"
printf 'localhost slots=2\nthis is bad slots=1\n' >"$T/hf_bad"
printf 'localhost slots=1\nlocalhost slots=2\n' >"$T/hf_dup"
expect_error 1 "cannot be used together" --num_procs 1 --module --no_python pkg.train
expect_error 1 "not a Python module name" --num_procs 1 --module ./pkg/train.py
expect_error 2 "unrecognized argument: --bogus" --bogus "$T/show.sh"
expect_error 2 "PROGRAM" --num_procs 2
expect_error 2 "multi-node" --no_ssh "$T/show.sh"
if ! command -v srun >/dev/null 2>&1; then
  expect_error 1 "needs srun (Debian package slurm-client)" --launcher slurm --num_procs 1 "$T/show.sh"
fi
expect_error 1 "Unknown launcher foo" --launcher foo --num_procs 1 "$T/show.sh"
expect_error 1 "multi-node" -H "$T/hf_remote" "$T/show.sh"
expect_error 1 "Hostfile contains a bad entry: this is bad slots=1" -H "$T/hf_bad" "$T/show.sh"
expect_error 1 "Hostfile contains multiple entries for localhost" -H "$T/hf_dup" "$T/show.sh"
expect_error 1 "does not exist" -H "$T/no_such_hostfile" "$T/show.sh"
expect_error 1 "Cannot specify num_nodes/gpus with include/exclude" --num_gpus 1 -i localhost:0 "$T/show.sh"
expect_error 1 "mutually exclusive" -H "$T/hf_local" -i localhost:0 -e localhost:1 "$T/show.sh"
expect_error 1 "No slot '5' specified on host 'localhost'" -H "$T/hf_local" -i localhost:5 "$T/show.sh"
expect_error 1 "Hostname '' not found" -H "$T/hf_local" -i "localhost:0@" "$T/show.sh"
expect_error 1 "Num nodes is >1" --num_nodes 2 "$T/show.sh"
expect_error 1 "not found on PATH" --num_procs 1 zt-no-such-program
expect_error 1 "chmod +x" --num_procs 1 "$T/hf_local"
if "$ZT" --version 2>/dev/null | grep -q " 0 GPU(s)"; then
  expect_error 1 "pass --num_procs N" "$T/show.sh"
fi
if command -v python3 >/dev/null; then
  P=$(port)
  python3 -c "
import socket, subprocess, sys
s = socket.socket(); s.bind(('127.0.0.1', $P)); s.listen(1)
r = subprocess.run(['$ZT', 'launch', '--num_procs', '1', '--master_port', '$P', '$T/show.sh'],
                   capture_output=True, text=True)
sys.stderr.write(r.stderr); sys.exit(r.returncode)
" 2>"$T/err" && fail "a busy --master_port was not detected"
  grep -q "already in use by pid" "$T/err" || fail "busy port message: $(cat "$T/err")"
fi
echo "launch_basic: ok"
