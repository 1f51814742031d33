#!/usr/bin/env bash
# `zt train --task ppo` (DeepSpeed-Chat step 3) on the CPU with llama-tiny as actor and critic:
# a run writes one metrics record per round with finite numbers and saves both models; the same
# rounds on 2 ranks with the actor and critic at ZeRO 3 (each rank answering half of every
# round's prompts) end with the same actor and critic weights as the one-process run at ZeRO 0
# (to-fp32 of both checkpoints within 1e-4 of the largest weight, observed 9e-6 after 8 AdamW
# steps; a step is lr = 1e-3, so a wrong average or a missed reduction is far outside: every
# answer runs its full length, so the per-rank means average to the whole batch's), and so does
# their --enable-ema average (actor_ema); with --enable-hybrid-engine the 2-rank actor is the same
# bit for bit; answers that end at the model's eos at different steps on 2 ranks at ZeRO 3
# (pre-tokenized prompts) run through (the ranks keep decoding together; with the hybrid engine
# each stops on its own) with the same rounds either way; --inference-tp-size 2 generates on
# halves of the actor (the hybrid run bit for bit on 2 ranks, the one-process run on 4 ranks in
# 2 groups); --generation-batches 2 answers two batches a round; misused flags are refused by
# name.
# Usage: ppo.sh ZT_BINARY SOURCE_DIR
set -u
zt=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails+1)); }

python3 - "$tmp" <<'PY'
import json, random, sys
random.seed(0)
with open(f"{sys.argv[1]}/prompts.jsonl", "w") as f:
    for _ in range(48):
        f.write(json.dumps({"prompt": "say: " + "".join(random.choice("abcdef") for _ in range(3))}) + "\n")
PY
cat >"$tmp/ds8.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}}}
EOF2
cat >"$tmp/ds4.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}}}
EOF2
# compare.py A B NAME TOL: two f32 safetensors files hold the same tensors, each value within
# TOL x the largest weight of A.
cat >"$tmp/compare.py" <<'PY'
import array, json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a = array.array("f"); a.frombytes(d[v["data_offsets"][0]:v["data_offsets"][1]]); out[k] = a
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), (sorted(a)[:3], sorted(b)[:3])
scale = max(abs(x) for t in a.values() for x in t)
worst = max(abs(x - y) for k in a for x, y in zip(a[k], b[k]))
print(f"{sys.argv[3]}: worst weight difference {worst:.2e} (largest weight {scale:.3f})")
assert worst <= float(sys.argv[4]) * scale
PY
common=(--task ppo --actor llama-tiny --critic llama-tiny --data "$tmp/prompts.jsonl" --steps 4
  --max-prompt-seq-len 16 --max-answer-seq-len 6 --device cpu --ppo-epochs 2 --seed 3)

if "$zt" train --config "$tmp/ds8.json" "${common[@]}" --metrics-out "$tmp/m1.jsonl" \
    --enable-ema --save "$tmp/one" >"$tmp/out1" 2>"$tmp/err1"; then
  if python3 - "$tmp/m1.jsonl" <<'PY'
import json, math, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
keys = ["reward_mean", "kl", "actor_loss", "critic_loss", "generate_tokens_per_s", "train_tokens_per_s"]
assert len(recs) == 4, recs
assert all(math.isfinite(r[k]) for r in recs for k in keys), recs
assert recs[0]["kl"] == 0.0 and recs[-1]["kl"] != 0.0, "the actor leaves its reference"
PY
  then ok "one process: 4 rounds, finite metrics, KL 0 at the start and not after"; else bad "metrics"; fi
  [ -f "$tmp/one/actor/latest" ] && [ -f "$tmp/one/critic/latest" ] && ok "actor and critic saved" || bad "checkpoints"
else
  bad "one-process run: $(tail -3 "$tmp/err1")"
fi

if "$zt" launch --num_procs 2 "$zt" train --config "$tmp/ds4.json" "${common[@]}" \
    --actor-zero-stage 3 --critic-zero-stage 3 --metrics-out "$tmp/m2.jsonl" --enable-ema \
    --save "$tmp/two" >"$tmp/out2" 2>"$tmp/err2"; then
  same=1
  for m in actor critic; do
    "$zt" ckpt to-fp32 "$tmp/one/$m" "$tmp/fp_one_$m" >/dev/null 2>&1 &&
      "$zt" ckpt to-fp32 "$tmp/two/$m" "$tmp/fp_two_$m" >/dev/null 2>&1 || { same=0; continue; }
    python3 "$tmp/compare.py" "$tmp/fp_one_$m/model.safetensors" "$tmp/fp_two_$m/model.safetensors" "$m" 1e-4 || same=0
  done
  [ $same = 1 ] && ok "2 ranks at ZeRO 3 end with the one-process weights" || bad "2-rank weights differ (see above)"
  # --enable-ema: the moving average (Hugging Face layout, f32 here) gathered from the ZeRO-3
  # shards equals the one-process run's.
  if [ -f "$tmp/one/actor_ema/config.json" ] &&
      python3 "$tmp/compare.py" "$tmp/one/actor_ema/model.safetensors" "$tmp/two/actor_ema/model.safetensors" actor_ema 1e-4; then
    ok "--enable-ema: actor_ema saved, the same on 2 ranks at ZeRO 3 as on one process"
  else
    bad "--enable-ema: $(ls "$tmp/one" "$tmp/two" 2>&1 | tr '\n' ' ')"
  fi
else
  bad "2-rank run: $(tail -3 "$tmp/err2")"
fi

# The hybrid engine: the same 2-rank ZeRO-3 run with the actor gathered once per generation
# phase ends with the same weights bit for bit (generation and the actor's log-probs run on the
# same values, only gathered once).
if "$zt" launch --num_procs 2 "$zt" train --config "$tmp/ds4.json" "${common[@]}" \
    --actor-zero-stage 3 --critic-zero-stage 3 --enable-hybrid-engine --save "$tmp/hyb" \
    >"$tmp/out7" 2>"$tmp/err7" && grep -q "hybrid engine" "$tmp/err7" &&
    "$zt" ckpt to-fp32 "$tmp/hyb/actor" "$tmp/fp_hyb_actor" >/dev/null 2>&1 &&
    python3 "$tmp/compare.py" "$tmp/fp_two_actor/model.safetensors" "$tmp/fp_hyb_actor/model.safetensors" hybrid 0; then
  ok "--enable-hybrid-engine on 2 ranks at ZeRO 3: the same actor, bit for bit"
else
  bad "--enable-hybrid-engine: $(tail -3 "$tmp/err7")"
fi
# --inference-tp-size 2: the 2 ranks generate together on their halves of the actor (heads, MLP
# width, vocabulary split); greedy f32 answers equal the whole model's here, so the run is the
# hybrid run bit for bit. Then 4 ranks in 2 groups of 2 against the one-process run.
if "$zt" launch --num_procs 2 "$zt" train --config "$tmp/ds4.json" "${common[@]}" \
    --actor-zero-stage 3 --critic-zero-stage 3 --enable-hybrid-engine --inference-tp-size 2 \
    --save "$tmp/tp2" >"$tmp/out10" 2>"$tmp/err10" && grep -q "generating over 2 ranks" "$tmp/err10" &&
    "$zt" ckpt to-fp32 "$tmp/tp2/actor" "$tmp/fp_tp2_actor" >/dev/null 2>&1 &&
    python3 "$tmp/compare.py" "$tmp/fp_hyb_actor/model.safetensors" "$tmp/fp_tp2_actor/model.safetensors" tp2 0; then
  ok "--inference-tp-size 2 on 2 ranks: the hybrid run's actor, bit for bit"
else
  bad "--inference-tp-size 2: $(tail -3 "$tmp/err10")"
fi
cat >"$tmp/ds2.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}}}
EOF2
if "$zt" launch --num_procs 4 "$zt" train --config "$tmp/ds2.json" "${common[@]}" \
    --actor-zero-stage 3 --critic-zero-stage 3 --enable-hybrid-engine --inference-tp-size 2 \
    --save "$tmp/tp4" >"$tmp/out11" 2>"$tmp/err11" &&
    "$zt" ckpt to-fp32 "$tmp/tp4/actor" "$tmp/fp_tp4_actor" >/dev/null 2>&1 &&
    python3 "$tmp/compare.py" "$tmp/fp_one_actor/model.safetensors" "$tmp/fp_tp4_actor/model.safetensors" tp2x2 1e-4; then
  ok "--inference-tp-size 2 on 4 ranks (2 groups): the one-process actor"
else
  bad "--inference-tp-size 2 on 4 ranks: $(tail -3 "$tmp/err11")"
fi
# A model whose answers end at its eos (the llama fixture: eos_token_id 2) with pre-tokenized
# prompts of 3 to 8 tokens, on 2 ranks at ZeRO 3: rows finish at different steps on the two
# ranks, whose decode steps must still pair up (every rank steps until the last row anywhere has
# finished, from the shortest prompt of any rank).
python3 - "$tmp" <<'PY'
import json, random, sys
random.seed(4)  # (a draw whose answers end at eos in some round: 13 tokens in round 6)
with open(f"{sys.argv[1]}/ids.jsonl", "w") as f:
    for _ in range(64):
        n = random.randrange(3, 9)  # prompts of different lengths, in one round
        f.write(json.dumps({"input_ids": [random.randrange(3, 256) for _ in range(n)]}) + "\n")
PY
# One prompt a rank, and every parameter gathered for each forward (no persistent ones): a rank
# that stopped at its row's eos would pair its next collective with the other rank's gather
# (with prompts of one length, an earlier draw of this test died without the agreement).
cat >"$tmp/ds1.json" <<'EOF2'
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "zero_optimization": {"stage3_param_persistence_threshold": 0},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}}}
EOF2
llama=$2/tests/fixtures/hf/llama
if timeout 300 "$zt" launch --num_procs 2 "$zt" train --config "$tmp/ds1.json" --task ppo \
    --actor "$llama" --critic "$llama" --data "$tmp/ids.jsonl" --steps 6 --max-prompt-seq-len 8 \
    --max-answer-seq-len 24 --device cpu --actor-zero-stage 3 --critic-zero-stage 3 \
    --metrics-out "$tmp/m3.jsonl" >"$tmp/out3" 2>"$tmp/err3"; then
  python3 - "$tmp/m3.jsonl" <<'PY' && ok "eos-ended answers on 2 ranks at ZeRO 3" || bad "eos-ended answers: metrics"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 6 and any(r["answer_len_mean"] < 24 for r in recs), recs
print("answer lengths (rank 0):", [r["answer_len_mean"] for r in recs])
PY
else
  bad "eos-ended answers on 2 ranks at ZeRO 3: $(tail -3 "$tmp/err3")"
fi
# The same with the hybrid engine: each rank stops at its own rows' end (no collective while it
# generates), and the rounds still pair up.
if timeout 300 "$zt" launch --num_procs 2 "$zt" train --config "$tmp/ds1.json" --task ppo \
    --actor "$llama" --critic "$llama" --data "$tmp/ids.jsonl" --steps 6 --max-prompt-seq-len 8 \
    --max-answer-seq-len 24 --device cpu --actor-zero-stage 3 --critic-zero-stage 3 \
    --enable-hybrid-engine --metrics-out "$tmp/m9.jsonl" >"$tmp/out9" 2>"$tmp/err9" &&
    cmp -s <(cut -d, -f1-3 "$tmp/m3.jsonl") <(cut -d, -f1-3 "$tmp/m9.jsonl"); then
  ok "eos-ended answers on 2 ranks at ZeRO 3 with the hybrid engine: the same rounds"
else
  bad "eos-ended answers, hybrid engine: $(tail -3 "$tmp/err9")"
fi
# And generated by the 2 ranks together on halves of the actor (--inference-tp-size 2).
if timeout 300 "$zt" launch --num_procs 2 "$zt" train --config "$tmp/ds1.json" --task ppo \
    --actor "$llama" --critic "$llama" --data "$tmp/ids.jsonl" --steps 6 --max-prompt-seq-len 8 \
    --max-answer-seq-len 24 --device cpu --actor-zero-stage 3 --critic-zero-stage 3 \
    --enable-hybrid-engine --inference-tp-size 2 --metrics-out "$tmp/m12.jsonl" \
    >"$tmp/out12" 2>"$tmp/err12" &&
    cmp -s <(cut -d, -f1-3 "$tmp/m3.jsonl") <(cut -d, -f1-3 "$tmp/m12.jsonl"); then
  ok "eos-ended answers to prompts of mixed lengths, --inference-tp-size 2: the same rounds"
else
  bad "eos-ended answers, --inference-tp-size 2: $(tail -3 "$tmp/err12")"
fi

# The config's monitors: a CSV per number of the round's record.
cat >"$tmp/ds_csv.json" <<EOF2
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "csv_monitor": {"enabled": true, "output_path": "$tmp/csv", "job_name": "ppo"}}
EOF2
if "$zt" train --config "$tmp/ds_csv.json" "${common[@]}" --steps 2 >"$tmp/out6" 2>"$tmp/err6" &&
    [ "$(wc -l <"$tmp/csv/ppo/Train_Samples_reward_mean.csv")" = 3 ] &&
    [ -s "$tmp/csv/ppo/Train_Samples_kl.csv" ]; then
  ok "csv_monitor: reward_mean and kl per round"
else
  bad "csv_monitor: $(ls "$tmp/csv/ppo" 2>&1 | head -3) $(tail -2 "$tmp/err6")"
fi

# LoRA on the actor (only the adapters trained) with the reference on the host.
if "$zt" train --config "$tmp/ds8.json" "${common[@]}" --steps 2 --actor-lora-dim 4 \
    --only-optimize-lora --offload-reference-model --metrics-out "$tmp/m4.jsonl" \
    >"$tmp/out4" 2>"$tmp/err4" && grep -q "parameters, [0-9]* trained (" "$tmp/err4" && [ "$(wc -l <"$tmp/m4.jsonl")" = 2 ]; then
  ok "--actor-lora-dim with --only-optimize-lora and --offload-reference-model"
else
  bad "LoRA actor: $(tail -3 "$tmp/err4")"
fi

# The unsupervised mix: a token file (nanoGPT's raw uint16) whose language-model loss trains the
# actor too.
python3 -c "
import array, random, sys
random.seed(2)
array.array('H', [random.randrange(257) for _ in range(20000)]).tofile(open(sys.argv[1], 'wb'))
" "$tmp/unsup.bin"
if "$zt" train --config "$tmp/ds8.json" "${common[@]}" --steps 2 --unsupervised-dataset \
    "$tmp/unsup.bin" --unsup-coef 2.0 --metrics-out "$tmp/m5.jsonl" >"$tmp/out5" 2>"$tmp/err5" &&
    python3 -c "
import json, math, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert len(r) == 2 and all(5.0 < x['unsup_loss'] < 6.0 for x in r), r
" "$tmp/m5.jsonl"; then
  ok "--unsupervised-dataset: the LM loss of random bytes, about ln 257 = 5.55"
else
  bad "--unsupervised-dataset: $(tail -3 "$tmp/err5")"
fi

# --generation-batches 2: two batches answered a round, the PPO epochs over both (4 rounds: 64
# prompts answered, read from the monitor's sample counts).
if "$zt" train --config "$tmp/ds_csv.json" "${common[@]}" --generation-batches 2 \
    --metrics-out "$tmp/m8.jsonl" >"$tmp/out8" 2>"$tmp/err8" &&
    [ "$(wc -l <"$tmp/m8.jsonl")" = 4 ] &&
    [ "$(tail -1 "$tmp/csv/ppo/Train_Samples_kl.csv" | cut -d, -f1)" = 64 ]; then
  ok "--generation-batches 2: 16 prompts a round"
else
  bad "--generation-batches 2: $(tail -1 "$tmp/csv/ppo/Train_Samples_kl.csv") $(tail -2 "$tmp/err8")"
fi

expect_error() {  # name, text, command...
  local name=$1 want=$2; shift 2
  if "$@" >"$tmp/o" 2>"$tmp/e"; then bad "$name: succeeded"; return; fi
  grep -q -- "$want" "$tmp/e" && ok "$name" || bad "$name: $(tail -1 "$tmp/e")"
}
expect_error "--inference-tp-size needs the hybrid engine" "give --enable-hybrid-engine too" \
  "$zt" train --config "$tmp/ds8.json" "${common[@]}" --inference-tp-size 2
expect_error "--inference-tp-size must divide the ranks" "must divide the 1 ranks" \
  "$zt" train --config "$tmp/ds8.json" "${common[@]}" --enable-hybrid-engine --inference-tp-size 2
expect_error "needs --critic" "needs --actor DIR" \
  "$zt" train --config "$tmp/ds8.json" --task ppo --actor llama-tiny --data "$tmp/prompts.jsonl"
expect_error "PPO flags need --task ppo" "--kl-ctl belongs to --task ppo" \
  "$zt" train --config "$tmp/ds8.json" --model llama-tiny --kl-ctl 0.2
expect_error "a context too short" "exceed the actor's context" \
  "$zt" train --config "$tmp/ds8.json" "${common[@]}" --max-answer-seq-len 250
exit $((fails > 0))
