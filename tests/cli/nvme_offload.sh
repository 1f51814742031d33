#!/usr/bin/env bash
# ZeRO-Infinity's optimizer swap through `zt train` on CPU ranks: offload_optimizer {device: nvme}
# keeps the fp32 master weights and the optimizer state in files under nvme_path. The oracle is
# the same run with the state in memory: every loss must be the same to the bit, for 1 process
# and 2 Gloo ranks at stages 1-3 (the pieces a swapped step reads, steps and writes back change
# no arithmetic), and the checkpoints of both runs consolidate to the same bytes. A checkpoint of
# a swapped run resumes in memory and the reverse. Bad nvme_paths are refused by name before any
# work, and a disk too small for the swap files is refused at start naming what is needed.
# Usage: nvme_offload.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
tmp=$(mktemp -d)
cleanup() { mountpoint -q "$tmp/small" 2>/dev/null && umount "$tmp/small"; rm -rf "$tmp"; }
trap cleanup EXIT
export OMP_NUM_THREADS=1 XDG_CACHE_HOME=$tmp/cache
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }
mkdir -p "$tmp/nvme"

# $1 stage, $2 nvme path or "", $3 extra zero keys
cfg() {
  local off=""
  [ -n "$2" ] && off=", \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$2\", \"pipeline_read\": true, \"pipeline_write\": true}"
  echo "{\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 2,
   \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-3, \"weight_decay\": 0.1}},
   \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 4}},
   \"aio\": {\"queue_depth\": 1, \"block_size\": 65536},
   \"zero_optimization\": {\"stage\": $1, \"sub_group_size\": 3000, \"stage3_param_persistence_threshold\": 0 ${3:-} $off}}"
}
train() {  # $1 ranks, $2 config, then zt train flags
  local n=$1 c=$2
  shift 2
  if [ "$n" = 1 ]; then
    "$zt" train --config "$c" --device cpu --seq-len 32 --sample-tokens 0 "$@"
  else
    "$zt" launch --num_procs "$n" --master_port $((29000 + RANDOM % 2000)) "$zt" train \
      --config "$c" --device cpu --seq-len 32 --sample-tokens 0 "$@"
  fi
}
losses() { python3 -c 'import json,sys; print(" ".join(repr(r["loss"]) for r in map(json.loads, open(sys.argv[1])) if "loss" in r))' "$1"; }

for n in 1 2; do
  for stage in 1 2 3; do
    k=n${n}s$stage
    cfg $stage "" >"$tmp/$k.mem.json"
    cfg $stage "$tmp/nvme" >"$tmp/$k.nvme.json"
    train $n "$tmp/$k.mem.json" --steps 5 --metrics-out "$tmp/$k.mem.jsonl" --save "$tmp/$k.mem.ck" >/dev/null 2>"$tmp/$k.mem.err" ||
      bad "$k in memory: $(tail -3 "$tmp/$k.mem.err")"
    train $n "$tmp/$k.nvme.json" --steps 5 --metrics-out "$tmp/$k.nvme.jsonl" --save "$tmp/$k.nvme.ck" >/dev/null 2>"$tmp/$k.nvme.err" ||
      bad "$k swapped: $(tail -3 "$tmp/$k.nvme.err")"
    a=$(losses "$tmp/$k.mem.jsonl" 2>/dev/null); b=$(losses "$tmp/$k.nvme.jsonl" 2>/dev/null)
    [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(echo $a | wc -w)" = 5 ] &&
      ok "$n rank(s), stage $stage: the swapped run's losses are the in-memory run's, bitwise ($a)" ||
      bad "$n rank(s), stage $stage: losses differ: memory [$a] nvme [$b]"
    grep -q "swapped to .*optimizer_state.swp" "$tmp/$k.nvme.err" && ok "$k: the log names the swap file" ||
      bad "$k: no swap line: $(grep -i swap "$tmp/$k.nvme.err" | head -2)"
    "$zt" ckpt to-fp32 "$tmp/$k.mem.ck" "$tmp/$k.mem.fp32" >/dev/null 2>&1 &&
      "$zt" ckpt to-fp32 "$tmp/$k.nvme.ck" "$tmp/$k.nvme.fp32" >/dev/null 2>&1 &&
      diff -r "$tmp/$k.mem.fp32" "$tmp/$k.nvme.fp32" >/dev/null && [ -n "$(ls "$tmp/$k.mem.fp32"/*.safetensors 2>/dev/null)" ] && ok "$k: the checkpoints' fp32 weights are the same bytes" ||
      bad "$k: consolidated checkpoints differ"
  done
done
# ZeRO-Infinity's full form on 2 ranks at stage 3: the parameters' own chunks in a swap file too
# (offload_param nvme), each gathered from it; the losses are still the in-memory run's.
cfg 3 "$tmp/nvme" ", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$tmp/nvme\"}" >"$tmp/inf.json"
train 2 "$tmp/inf.json" --steps 5 --metrics-out "$tmp/inf.jsonl" >/dev/null 2>"$tmp/inf.err" || bad "offload_param nvme run: $(tail -3 "$tmp/inf.err")"
a=$(losses "$tmp/n2s3.mem.jsonl" 2>/dev/null); b=$(losses "$tmp/inf.jsonl" 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && grep -q "chunks at rest in the parameter swap file" "$tmp/inf.err" &&
  ok "2 ranks, stage 3, parameters and optimizer state swapped: the in-memory run's losses, bitwise" ||
  bad "offload_param nvme: memory [$a] swapped [$b]"
[ -z "$(find "$tmp/nvme" -name '*.swp')" ] && ok "the swap files are removed when the runs end" ||
  bad "swap files left behind: $(find "$tmp/nvme" -name '*.swp')"

# Resume across placements on 2 ranks at stage 3: the swapped run's checkpoint of step 5 goes on
# in memory, and the in-memory one swapped; both reproduce the uninterrupted 8-step run's losses
# of steps 6-8 to the bit.
cfg 3 "" >"$tmp/r.mem.json"
cfg 3 "$tmp/nvme" >"$tmp/r.nvme.json"
train 2 "$tmp/r.mem.json" --steps 8 --metrics-out "$tmp/full.jsonl" >/dev/null 2>"$tmp/full.err" || bad "8-step run: $(tail -3 "$tmp/full.err")"
train 2 "$tmp/r.mem.json" --steps 8 --load "$tmp/n2s3.nvme.ck" --metrics-out "$tmp/r1.jsonl" >/dev/null 2>"$tmp/r1.err" || bad "nvme -> memory: $(tail -3 "$tmp/r1.err")"
train 2 "$tmp/r.nvme.json" --steps 8 --load "$tmp/n2s3.mem.ck" --metrics-out "$tmp/r2.jsonl" >/dev/null 2>"$tmp/r2.err" || bad "memory -> nvme: $(tail -3 "$tmp/r2.err")"
python3 - "$tmp/full.jsonl" "$tmp/r1.jsonl" "$tmp/r2.jsonl" <<'PY' && ok "resumes across placements reproduce steps 6-8 bitwise" || bad "resumed losses differ"
import json, sys
def l(p): return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
full, a, b = (l(p) for p in sys.argv[1:])
want = {s: full[s] for s in (6, 7, 8)}
print("full", want, "nvme->mem", a, "mem->nvme", b)
assert sorted(a) == sorted(b) == [6, 7, 8] and a == want and b == want
PY

# Bad nvme_paths: refused by name at start, before any training.
cfg 2 "$tmp/no/such/folder" >"$tmp/bad1.json"
train 1 "$tmp/bad1.json" --steps 1 >/dev/null 2>"$tmp/bad1.err" && bad "a missing nvme_path was accepted" ||
  { grep -q "$tmp/no/such/folder" "$tmp/bad1.err" && grep -q "nvme_path" "$tmp/bad1.err" &&
    ok "a missing nvme_path is refused by name: $(grep -m1 'no/such' "$tmp/bad1.err" | cut -c1-160)" ||
    bad "missing nvme_path message: $(tail -2 "$tmp/bad1.err")"; }
touch "$tmp/afile"
cfg 2 "$tmp/afile" >"$tmp/bad2.json"
train 1 "$tmp/bad2.json" --steps 1 >/dev/null 2>"$tmp/bad2.err" && bad "a file as nvme_path was accepted" ||
  { grep -q "$tmp/afile" "$tmp/bad2.err" && ok "a regular file as nvme_path is refused by name" ||
    bad "file nvme_path message: $(tail -2 "$tmp/bad2.err")"; }

# A disk too small: a 1 MiB tmpfs (where this machine lets us mount one; tmpfs takes O_DIRECT
# from Linux 6.6) cannot hold the tiny model's ~2.6 MB of swapped state.
mkdir -p "$tmp/small"
if mount -t tmpfs -o size=1m tmpfs "$tmp/small" 2>/dev/null; then
  cfg 2 "$tmp/small" >"$tmp/small.json"
  train 1 "$tmp/small.json" --steps 1 >/dev/null 2>"$tmp/small.err" && bad "a full disk was accepted" ||
    { grep -q "$tmp/small" "$tmp/small.err" && grep -Eqi "free|full|O_DIRECT" "$tmp/small.err" &&
      ok "a disk too small is refused at start: $(grep -m1 "$tmp/small" "$tmp/small.err" | cut -c1-200)" ||
      bad "small disk message: $(tail -2 "$tmp/small.err")"; }
else
  echo "skip: cannot mount a tmpfs here (not root), the small-disk case is not run"
fi
[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
