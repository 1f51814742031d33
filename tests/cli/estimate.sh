#!/usr/bin/env bash
# `zt estimate`: DeepSpeed's two model-state tables, ZeroTrain's per-GPU prediction and the
# largest micro-batch per stage print; --json is one object with the same numbers; a config file
# is read; bad flags are one-line errors that name the flag.
# Usage: estimate.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

out=$("$zt" estimate --model gpt2 --num-gpus 8 --stage 2 --micro-batch 4 --seq-len 512 \
  --gpu-memory 80 2>&1) || bad "zt estimate exited $?: $out"
for s in "estimate_zero2_model_states_mem_needs_all_cold" "estimate_zero3_model_states_mem_needs_all_cold" \
  "  per CPU  |  per GPU |   Options" "offload_optimizer=none" \
  "offload_param=cpu , offload_optimizer=cpu , zero_init=1" "HW: Setup with 1 node, 8 GPUs per node." \
  "SW: Model with 124M total params." "ZeroTrain, per GPU" "peak allocated" "Largest micro-batch" \
  "<- this setup" "  1      cpu|nvme"; do
  [[ "$out" == *"$s"* ]] && ok "shows '$s'" || bad "no '$s' in: $out"
done
# DeepSpeed's ZeRO-2 row without offload: 2P + int(18P/G) for P = 124,439,808, G = 8.
want=$(python3 -c 'P=124439808; print(f" {P*4*8*1.5/2**30:7.2f}GB | {(2*P+int(18*P/8))/2**30:6.2f}GB | offload_optimizer=none")')
[[ "$out" == *"$want"* ]] && ok "ZeRO-2 row is DeepSpeed's formula" || bad "no '$want' in the ZeRO-2 table"

"$zt" estimate --model llama-tiny --stage 3 --json >"$tmp/e.json" 2>"$tmp/e.err" || bad "--json exited $?: $(cat "$tmp/e.err")"
python3 - "$tmp/e.json" <<'EOF' && ok "--json is one object with both predictions" || bad "--json: $(head -c 400 "$tmp/e.json")"
import json, sys
d = json.load(open(sys.argv[1]))
z = d["zerotrain"]
a, b = z["without_checkpointing"], z["with_checkpointing"]
assert d["setup"]["stage"] == 3 and d["setup"]["seq_len"] == 128, d["setup"]
assert len(d["deepspeed"]["zero2"]["rows"]) == 2 and len(d["deepspeed"]["zero3"]["rows"]) == 6
assert a["peak_allocated_bytes"] >= a["model_states"]["total"] > 0
assert b["at_peak"]["activations"] <= a["at_peak"]["activations"]
assert len(d["largest_micro_batch"]) == 7 and all(f["with_checkpointing"] >= f["without_checkpointing"] for f in d["largest_micro_batch"])
EOF

# A ds_config.json is read (comments allowed) and the command line overrides it.
cat >"$tmp/ds.json" <<'EOF'
{
  // bf16 and stage 1 with offload; the command line asks for stage 2
  "train_batch_size": 16, "gradient_accumulation_steps": 2,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu", "pin_memory": true}},
}
EOF
out=$("$zt" estimate --model gpt2 --config "$tmp/ds.json" --num-gpus 4 --stage 2 --json 2>&1) || bad "--config exited $?: $out"
echo "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)["setup"]
assert d["stage"] == 2 and d["offload_optimizer"] and d["micro_batch"] == 2 and d["dtype"] == "bf16", d' &&
  ok "--config read, --stage overrides it" || bad "--config: $out"

# LoRA with frozen base: fewer trained parameters, smaller model states.
full=$("$zt" estimate --model llama-tiny --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["zerotrain"]["without_checkpointing"]["model_states"]["total"])')
lora=$("$zt" estimate --model llama-tiny --lora-dim 8 --only-optimize-lora --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["zerotrain"]["without_checkpointing"]["model_states"]["total"])')
[ "${lora:-0}" -gt 0 ] && [ "$lora" -lt "${full:-0}" ] && ok "LoRA with a frozen base needs less ($lora < $full)" || bad "LoRA states $lora vs $full"

# Bad flags: one line on stderr naming the flag, exit status non-zero.
check_error() {  # expected-text args...
  local want=$1; shift
  local err rc
  err=$("$zt" estimate "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == *"$want"* ]]; then
    ok "'$*' fails naming $want"
  else
    bad "'$*' (rc $rc): $err"
  fi
}
check_error "--model" --stage 2
check_error "--stage" --model gpt2 --stage 4
check_error "--num-gpus" --model gpt2 --num-gpus 0
check_error "--micro-batch" --model gpt2 --micro-batch two
check_error "--offload" --model gpt2 --offload disk
check_error "--offload cpu" --model gpt2 --offload cpu
check_error "--seq-len" --model gpt2 --seq-len 4096
check_error "--gpu-memory" --model gpt2 --gpu-memory -3
check_error "--dtype" --model gpt2 --dtype int8
check_error "--lora-dim" --model gpt2 --only-optimize-lora
check_error "--device" --model gpt2 --device tpu
check_error "--config" --model gpt2 --config "$tmp/missing.json"
check_error "--num-gpus" --model gpt2 --num-gpu 2
check_error "unknown model" --model gpt-7
"$zt" estimate --help | grep -q -- "--gradient-checkpointing" && ok "--help lists the flags" || bad "--help"

[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failure(s)"; exit 1; }
