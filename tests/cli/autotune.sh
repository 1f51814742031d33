#!/usr/bin/env bash
# The autotuner end to end on CPU ranks (docs/autotuning.md): `zt tune` over ZeRO stages 0 and 2
# x three micro-batches of gpt2-tiny on 2 CPU ranks, where every micro-batch-8 trial is given a
# memory limit it cannot start under; the search must go on, summary.txt must list every trial
# with its status, and ds_config_optimal.json must be the trial whose throughput, recomputed here
# from its own metrics file, is the best. Then `zt launch --autotuning run` with an invalid
# combination (fp16_master_weights_and_grads outside stage 2, which the parser refuses) and the
# ZeRO knobs (fast: false) must tune, and train with the optimal config it wrote.
# Usage: bash autotune.sh ZT_BINARY SOURCE_DIR
set -u
ZT=$(readlink -f "$1")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export XDG_CACHE_HOME=$T/cache OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
passed=0
ok() {
  echo "ok: $*"
  passed=$((passed + 1))
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
port() { echo $((20000 + RANDOM % 12000)); }
cd "$T" || fail "cannot enter $T"

# The user's training command: zt train, except that a trial of micro-batch 8 runs under a memory
# limit too small to start (as a GPU too small for that micro-batch would stop it).
cat >train.sh <<EOF
#!/bin/sh
cfg=""; prev=""
for a in "\$@"; do [ "\$prev" = "--config" ] && cfg=\$a; prev=\$a; done
if grep -q '"train_micro_batch_size_per_gpu": 8' "\$cfg"; then ulimit -v 20000; fi
exec "$ZT" train "\$@"
EOF
chmod +x train.sh

# --- errors: one line naming the key or flag ---
cat >bad.json <<'EOF'
{"train_micro_batch_size_per_gpu": 1, "autotuning": {"tuner_type": "grid"}}
EOF
"$ZT" tune --num_procs 2 --device cpu -- "$ZT" train --config bad.json >out 2>err
rc=$?
[ "$rc" -eq 2 ] || fail "a bad tuner_type: exit $rc, want 2 ($(cat err))"
grep -q "autotuning.tuner_type" err || fail "the error does not name autotuning.tuner_type: $(cat err)"
[ "$(wc -l <err)" -eq 1 ] || fail "the error is not one line: $(cat err)"
"$ZT" tune --num_procs 2 --device cpu -- "$ZT" train --model gpt2-tiny >out 2>err &&
  fail "a command without --config was accepted"
grep -q -- "--config" err || fail "the missing-config error does not name --config: $(cat err)"
"$ZT" launch --autotuning fast --num_procs 2 "$ZT" train --config bad.json >out 2>err &&
  fail "--autotuning fast was accepted"
grep -q -- "--autotuning" err || fail "the --autotuning error does not name the flag: $(cat err)"
ok "errors name the key or flag"

# --- zt tune: stages 0 and 2 x micro-batches 2, 4, 8 (8 cannot start) ---
cat >ds.json <<'EOF'
{
  "train_micro_batch_size_per_gpu": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": [0, 2]},
  "autotuning": {"enabled": true, "max_train_micro_batch_size_per_gpu": 8,
                 "num_tuning_micro_batch_sizes": 3, "start_profile_step": 2,
                 "end_profile_step": 4}
}
EOF
start=$(date +%s)
"$ZT" tune --num_procs 2 --device cpu --master_port "$(port)" --trial-timeout 60 -- \
  ./train.sh --config ds.json --model gpt2-tiny --seq-len 32 --steps 100 --save ckpt \
  >tune.out 2>tune.err || fail "zt tune: exit $? ($(tail -5 tune.err))"
echo "zt tune: $(($(date +%s) - start)) s"
for f in summary.txt summary.json ds_config_optimal.json cmd_optimal.txt; do
  [ -s "autotuning_results/$f" ] || fail "autotuning_results/$f is missing"
done
grep -q "^zt tune: \[6/6\] phase 1 " tune.err || fail "no progress line per trial: $(cat tune.err)"
[ ! -e ckpt ] || fail "a trial saved a checkpoint into the user's --save folder"
python3 - "$T" <<'PY' || fail "zt tune results"
import json, os, sys
T = sys.argv[1]
res, exps = os.path.join(T, "autotuning_results"), os.path.join(T, "autotuning_exps")
summary = open(os.path.join(res, "summary.txt")).read()
want = {(s, b): f"z{s}_gas{8 // b}_tmbspg{b}" for s in (0, 2) for b in (2, 4, 8)}
rows = {}
for line in summary.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 9 and cells[1].startswith("z"):
        rows[cells[1]] = cells
assert sorted(rows) == sorted(want.values()), f"summary trials {sorted(rows)}"
# Throughput recomputed from each trial's own metrics file: steps 2..4, samples / mean step time.
best, best_name = -1.0, None
for (s, b), name in want.items():
    status = rows[name][8]
    if b == 8:
        assert status in ("failed", "oom"), f"{name}: {status}"
        continue
    assert status == "ok", f"{name}: {status}: {rows[name]}"
    recs = [json.loads(l) for l in open(os.path.join(exps, name, "metrics.jsonl"))]
    run = recs[0]
    assert run["type"] == "run" and run["zero_stage"] == s, run
    assert run["train_micro_batch_size_per_gpu"] == b and run["world_size"] == 2, run
    secs = [run["train_batch_size"] * run["seq_len"] / r["tokens_per_s"]
            for r in recs[1:] if "tokens_per_s" in r and 2 <= r["step"] <= 4]
    assert len(secs) == 3, secs
    thr = run["train_batch_size"] / (sum(secs) / len(secs))
    shown = float(rows[name][7])
    assert abs(thr - shown) <= 0.01 * thr + 0.01, f"{name}: summary {shown}, metrics {thr}"
    if thr > best:
        best, best_name = thr, name
opt = json.load(open(os.path.join(res, "ds_config_optimal.json")))
trial = json.load(open(os.path.join(exps, best_name, "ds_config.json")))
assert opt == trial, f"ds_config_optimal.json is not {best_name}'s config"
assert "autotuning" not in opt
assert json.load(open(os.path.join(res, "summary.json")))["best"] == best_name
assert "best" in rows[best_name][9], rows[best_name]
cmd = open(os.path.join(res, "cmd_optimal.txt")).read()
assert "ds_config_optimal.json" in cmd and "--save ckpt" in cmd and "--steps 100" in cmd, cmd
print(f"best {best_name}: {best:.1f} samples/s")
PY
"$ZT" config check autotuning_results/ds_config_optimal.json --world-size 2 >/dev/null ||
  fail "zt config check rejects ds_config_optimal.json"
ok "zt tune: 6 trials, the micro-batch-8 ones failed and were skipped, the optimum is the best measured"

# --- zt launch --autotuning run: an invalid stage, ZeRO knobs, random tuner; then training ---
mkdir run && cd run || fail "mkdir run"
cat >ds.json <<'EOF'
{
  "train_micro_batch_size_per_gpu": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "fp16": {"enabled": true, "fp16_master_weights_and_grads": true},
  "zero_optimization": {"stage": [1, 2]},
  "autotuning": {"fast": false, "tuner_type": "random", "tuner_num_trials": 7,
                 "tuner_early_stopping": 2, "max_train_micro_batch_size_per_gpu": 2,
                 "num_tuning_micro_batch_sizes": 2, "results_dir": "res", "exps_dir": "exps"}
}
EOF
start=$(date +%s)
"$ZT" launch --autotuning run --num_procs 2 --master_port "$(port)" "$ZT" train --config ds.json \
  --device cpu --model gpt2-tiny --seq-len 32 --steps 3 --sample-tokens 0 \
  --metrics-out final.jsonl >run.out 2>run.err || fail "zt launch --autotuning run: exit $? ($(tail -5 run.err))"
echo "zt launch --autotuning run: $(($(date +%s) - start)) s"
grep -q "trained 3 steps" run.out || fail "the optimal training did not run: $(tail -5 run.out)"
python3 - <<'PY' || fail "zt launch --autotuning run results"
import json
s = json.load(open("res/summary.json"))
trials = {t["name"]: t for t in s["trials"]}
for b in (1, 2):
    t = trials[f"z1_gas{2 // b}_tmbspg{b}"]
    assert t["status"] == "invalid" and "Stage 2" in t["message"], t
assert all(t["status"] == "ok" for n, t in trials.items() if n.startswith("z2_gas")), trials
phase2 = [t for t in s["trials"] if t["phase"] == 2]
assert phase2 and len(s["trials"]) <= 7, s["trials"]
assert all(t["knobs"] for t in phase2), phase2
ok = [t for t in s["trials"] if t["status"] == "ok"]
best = max(ok, key=lambda t: t["metric"])
assert s["best"] == best["name"], (s["best"], best["name"])
opt = json.load(open("res/ds_config_optimal.json"))
run = json.loads(open("final.jsonl").readline())
assert run["zero_stage"] == opt["zero_optimization"]["stage"] == best["stage"], (run, opt)
assert run["train_micro_batch_size_per_gpu"] == best["micro_batch"], (run, best)
steps = [json.loads(l) for l in open("final.jsonl")][1:]
assert [r["step"] for r in steps] == [1, 2, 3], steps
print(f"{len(s['trials'])} trials ({len(phase2)} in phase 2), trained with {best['name']}")
PY
ok "zt launch --autotuning run: invalid stage recorded, knobs tuned, trained with the optimum"
echo "$passed passed, 0 failed"
