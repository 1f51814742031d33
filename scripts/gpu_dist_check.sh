#!/usr/bin/env bash
# Runs on a machine with two GPUs (H100s or H200s), over a bundle made by scripts/gpu_bundle.sh,
# from the repository root's copy that holds gpu_bundle/ and bench/:
#   (a) the NCCL communicator tests (zt_unit_tests --gtest_filter='Nccl*');
#   (b) ZeRO stages 0-3 over NCCL against the single-GPU run with the same global batch: gpt2-tiny,
#       fp32, SGD with momentum (linear in the gradients, so only summation order differs; see
#       tests/dist/zero_equivalence.py), 10 steps; every step's loss within 1e-4 relative and the
#       final parameters within 1e-4 in relative norm (looser than the CPU test's 1e-5: cuBLAS may
#       pick another fp32 algorithm for the halved per-GPU batch). Two configs per stage: "unit"
#       (reduce_bucket_size 50000: every unit reduced alone; overlap_comm unset, so on at stage 3
#       only) and "bucket" (vocabulary 4000 and reduce_bucket_size 420000: the head and two blocks
#       share a bucket, two blocks another, the embedding is larger than the bucket; overlap_comm
#       on: reductions and stage-3 gathers on the communication stream);
#   (c) collective bus bandwidth, ZeroTrain (bench/comm_bench.cc) next to torch.distributed
#       (bench/comm_torch.py), bf16, 1 MiB .. 1 GiB;
#   (d) ZeRO training throughput: ZeroTrain stages 0-3 (bench/gpt2_bench.cc --stage N) next to
#       torch DDP and FSDP2 with reshard_after_forward True (~ZeRO-3) and False (~ZeRO-2)
#       (bench/zero_torch.py), bf16, gpt2 and gpt-1.3b, seq 1024: tokens/s, peak GiB, ratios;
#   (e) checkpoints across GPU counts at ZeRO-3 through `zt train --save/--load`: gpt2-tiny as in
#       (b) (fp32, SGD with momentum, sequential order, global batch 16, seq 64). Uninterrupted
#       10-step runs on 2 GPUs and on 1 (the references); 5-step runs on 2 and on 1 that save;
#       then resumes to step 10 from the 2-GPU checkpoint on 1 GPU (w2->w1) and on 2 (w2->w2), and
#       from the 1-GPU checkpoint on 2 (w1->w2). A resume must start at step 6, its log must say
#       where the checkpoint came from, its losses of steps 6-10 must be within 1e-4 relative of
#       both uninterrupted runs' (the saving and the resuming GPU count; they differ only by
#       summation order, as in (b)) and its final parameters within 1e-4 in relative norm. The
#       same in bf16 with AdamW and a warm-up LR schedule that crosses the resume, within 5e-3
#       relative (parameters 2e-2), or twice the two uninterrupted runs' own difference where that
#       is larger: bf16 rounds every activation to 8 bits of mantissa, so the other GEMM shapes of
#       another GPU count move each loss by up to ~1e-3 before any checkpoint is involved, and
#       Adam divides by sqrt(v), so where a gradient element is a near-cancelling sum the
#       summation order decides an update of size lr (tests/dist/zero_equivalence.py): the
#       uninterrupted runs drift apart at that level (the table prints it as "noise"). So that
#       the looser bound still means something, a control resume without the optimizer state
#       (--no-load-optimizer-states: Adam restarts, its first update is lr * sign(g)) must land
#       outside it (on 2 CPU ranks: noise 6e-5, control 0.13);
#   (f) checkpoint speed at ZeRO-3 on both GPUs, bf16 training state (fp32 master + AdamW: 12
#       bytes per parameter, sharded over the 2 ranks): `zt launch zt_bench_ckpt --stage 3` (each
#       rank writes and reads its shard; bytes = the whole folder over the slowest rank's time)
#       next to torch.distributed.checkpoint of an FSDP2 model + AdamW over torchrun's 2 ranks
#       (bench/ckpt_torch.py --fsdp2: get_state_dict, dcp.save / dcp.load, set_state_dict), on
#       local disk (ZT_CKPT_DIST_DIR, default /tmp/zt_dist_ckpt, emptied after each run), the page
#       cache dropped before each load where the process may (root), with the disk's own write
#       speed (dd, 4 GiB, O_DIRECT). gpt-1.3b (15.8 GB; ZeroTrain also times the asynchronous
#       save's stall) and gpt-6.7b (80 GB; skipped when the disk has no room);
#   (g) the compiled peer of (d): FSDP2 with torch.compile (bench/zero_torch.py --compile: each
#       block compiled alone before fully_shard, torchtitan's recipe; the warm-up steps, which
#       compile, are not timed), reshard True and False, for (d)'s models; without (d) in the same
#       call ZeroTrain's stages 2 and 3 run here too, so that the ratios come from one call;
#   (h) the GPU test suite (zt_gpu_tests, all of it) and the unit tests that use two GPUs or test
#       checkpoints (zt_unit_tests --gtest_filter=ZT_DIST_UNIT_FILTER, default
#       'Nccl*:*Checkpoint*:HfExport*:StateBytes*:LrScheduler.ResumeAndState');
#   (i) Llama 8B at sequence 8192, micro-batch 1 per GPU, bf16: ZeroTrain's ZeRO-3
#       (zt_bench_gpt2 --model llama-8b --stage 3) with activation checkpointing, and without it
#       when `zt estimate` says it fits the GPU (an H200 yes, an H100 no), next to FSDP2 on
#       transformers' LlamaForCausalLM of the same config (bench/llama_dist_torch.py: fully_shard
#       per decoder layer, SDPA, checkpoint_wrapper per layer; eager, and each layer compiled
#       before fully_shard as in g; also eager without checkpointing, last): tokens/s per GPU, MFU,
#       peak GiB, ratios, and the target: torchtitan's 6,667 tokens/s per GPU for Llama 3 8B on
#       H100s (FSDP, full activation checkpointing) times the H200's memory bandwidth over the
#       H100's (4.8 / 3.35), 9,553;
#   (j) fine-tuning Llama 8B at sequence 2048, micro-batch 1 per GPU, bf16, with and without
#       activation checkpointing: full (ZeRO-3 / FSDP2, AdamW over every parameter) and LoRA
#       (rank ZT_DIST_LORA_RANK, default 16, alpha 2R, on q, k, v, o, gate, up and down, the base
#       frozen in bf16; ZeRO-3 / FSDP2 + peft). The ZeroTrain side is zt_bench_gpt2 on random
#       tokens (an SFT step costs the same: the prompt's -100 labels change no FLOPs) and also
#       `zt train --task sft` itself on pre-tokenized records (half prompt, half response) of
#       the same shape, with random weights (a config.json without weights: nothing of 16 GB is
#       written), timed by its own per-step clock;
#   (k) the largest Llama shape that fine-tunes on the two GPUs, with LoRA, with full ZeRO-3 +
#       CPU optimizer offload, and with ZeRO-Infinity (job `infinity`: offload_param cpu too),
#       sequence 2048, micro-batch 1, activation checkpointing: for each candidate, largest first
#       (registry sizes and the llama-*-shape sizes between them), `zt estimate` predicts the GPU
#       peak and the host memory per node; the first predicted to fit (GPU, and 95% of
#       MemAvailable) is tried for 3 steps (1 warm-up, 2 timed), then the next while none trains.
#       With offload the host bounds it (12 bytes a parameter pinned: 20B needs 227 GiB); with
#       LoRA the GPU (1 byte a parameter a GPU for the bf16 base) and, in a 10-minute call, the
#       start-up (each rank draws its half of the initial values, ~200M a second: 5 min at 119B).
#   (l) pipeline and tensor parallelism (docs/parallelism.md): `zt train --pipeline-parallel-size
#       2`, `--tensor-parallel-size 2` and the latter with `--sequence-parallel` on the two GPUs
#       against the 1-GPU run (gpt2-tiny, fp32
#       SGD, 4 micro-batches a step, losses and gradient norms within 1e-4 relative; the groups,
#       sends and all-reduces over NCCL), tensor (and sequence) parallelism's tokens/s next to ZeRO-1 data
#       parallelism (ZT_DIST_TP_MODELS, default "gpt2 gpt-1.3b"), then zt_bench_pipe
#       (ZT_DIST_PIPE_MODELS, default "gpt2:8 gpt-1.3b:2" as model:micro-batch; seq
#       ZT_DIST_PIPE_SEQ, micro-batch counts ZT_DIST_PIPE_COUNTS, default 1,2,4,8,16): each
#       stage's idle share of a batch next to the bubble's theory, (P-1)/(m+P-1).
#   (m) Llama 8B (ZT_DIST_LLAMA_MODEL) at sequence 8192 (ZT_DIST_LLAMA_SEQ) with activation
#       checkpointing: `zt train --task sft --tensor-parallel-size 2` (ZeRO 1 over one data rank)
#       and `--pipeline-parallel-size 2` (4 micro-batches a step) next to PyTorch's Megatron-style
#       tensor parallelism (bench/llama_dist_torch.py --tp: DTensor parallelize_module), plan
#       ZT_DIST_3D_PLAN as part (i)'s; ZeRO-3's figures are part (i)'s.
# Each part runs whatever happened to the others; results (JSON lines, logs) go to
# ${OUT:-gpu_out}, and a short table comes last. NVLink SHARP stays off (NCCL_NVLS_ENABLE=0: the
# lent machines do not support NVLS multicast). Exits non-zero when a part failed.
#
# Wall time per part on two H100s (estimates: (a)-(d) from earlier calls, the others from their
# run counts, the disk's speed and compile times; the CPU dry run of (e) takes 15-40 s):
#   a 0.5 min; b 2-3 min (16 short runs); c 1.5 min; d 4 min (2 min per model);
#   e 2-3 min (15 short runs of gpt2-tiny, 5-10 s each, mostly start-up);
#   f 2 min for gpt-1.3b (2 x 16 GB written and read, ZeroTrain's two asynchronous saves, dd)
#     and 5-8 min for gpt-6.7b (2 x 80 GB at 1-2 GB/s: alone in its call);
#   g 2.5-3.5 min per model (two compiled runs, 40-90 s of compilation each, plus ZeroTrain
#     stages 2 and 3 when d is not in the call);
#   h 3-5 min (zt_gpu_tests, whose tests use the first GPU, then the unit tests, about 10 s);
#   i 6-8 min on two H200s (not measured yet; from the 8B start-up, ~25 s a run, and ~1.5 s a
#     step: ZeroTrain 1 min per run, FSDP2 eager 1-1.5 min, compiled 2.5-3 min);
#   j 6-8 min (ten runs of 35-50 s, start-up most of each: 8B at seq 2048 steps in ~0.5 s);
#   k 5-6 min for LoRA (the 119B shape's start-up) and 2-3 min for offload (20B: 50 s drawing,
#     114 GiB pinned a rank, a 7 s CPU Adam step).
# A device call has 10 minutes, so run the parts in groups, e.g.
#   ZT_DIST_PARTS=abcd
#   ZT_DIST_PARTS=eh
#   ZT_DIST_PARTS=f ZT_DIST_CKPT_MODELS=gpt-1.3b      ZT_DIST_PARTS=f ZT_DIST_CKPT_MODELS=gpt-6.7b
#   ZT_DIST_PARTS=dg ZT_DIST_MODELS=gpt2:16           ZT_DIST_PARTS=dg ZT_DIST_MODELS=gpt-1.3b:4
#   ZT_DIST_PARTS=i                                   ZT_DIST_PARTS=j
#   ZT_DIST_PARTS=j ZT_DIST_SFT_PLAN="zt 0 16;fsdp2-compile 0 16;zt 0 0;fsdp2-compile 0 0"
#   ZT_DIST_PARTS=k ZT_DIST_LARGEST_JOBS=lora         ZT_DIST_PARTS=k ZT_DIST_LARGEST_JOBS=offload
# Every command is also cut to the call's deadline (ZT_DIST_DEADLINE_S, default 570 s from the
# start; 0: none), so that the table still comes out when a part runs long.
#
# Knobs: ZT_DIST_PARTS (default abcd), ZT_BENCH_STEPS (timed steps, default 20),
# ZT_DIST_MODELS (model:micro-batch list for d and g, default "gpt2:16 gpt-1.3b:4"),
# ZT_BENCH_ZERO_KEYS (d's and g's extra zero_optimization members for ZeroTrain),
# ZT_DIST_CKPT_VARIANTS (e, default "fp32-sgd bf16-adamw"), ZT_DIST_CKPT_MODELS (f, default
# "gpt-1.3b gpt-6.7b"), ZT_DIST_CKPT_IMPLS (f, default "zt torch"), ZT_CKPT_DIST_DIR (f),
# ZT_DIST_COMPILE_IMPLS (g, default "fsdp2-reshard fsdp2-noreshard"; ddp compiles DDP's model),
# ZT_DIST_UNIT_FILTER (h), ZT_DIST_DEADLINE_S;
# i: ZT_DIST_LLAMA_MODEL (llama-8b), ZT_DIST_LLAMA_SEQ (8192), ZT_DIST_LLAMA_STEPS (10),
#    ZT_DIST_LLAMA_PLAN (';'-separated "impl checkpointing [lora-rank [stage]]" runs, in order;
#    impl zt, zt-train, fsdp2 or fsdp2-compile; default "zt 1;fsdp2 1;fsdp2-compile 1;zt 0;fsdp2 0");
# i, j: ZT_DIST_TRACE=N: each zt run also traces N extra steps kernel by kernel on rank 0 (the
#    table and the GPU's idle stretches in the run's log; "kernels" in its JSON line);
# j: ZT_DIST_SFT_MODEL (llama-8b), ZT_DIST_SFT_SEQ (2048), ZT_DIST_SFT_STEPS (10),
#    ZT_DIST_SFT_PLAN (the same form; default "zt 0 R;fsdp2 0 R;zt 0 0;fsdp2 0 0;zt 1 R;fsdp2 1 R;
#    zt 1 0;fsdp2 1 0;zt-train 0 R;zt-train 0 0" with R = ZT_DIST_LORA_RANK), ZT_DIST_LORA_RANK;
# k: ZT_DIST_LARGEST_JOBS ("lora offload"; also "infinity", candidates ZT_DIST_LARGEST_INFINITY), ZT_DIST_LARGEST_LORA (default "llama-119b-shape
#    llama-98b-shape llama-70b llama-35b-shape"), ZT_DIST_LARGEST_OFFLOAD ("llama-35b-shape
#    llama-20b-shape llama-17b-shape llama-12b-shape llama-8b"), ZT_DIST_LARGEST_SEQ (2048),
#    ZT_DIST_GPU_GIB (the GPU memory zt estimate assumes; default the visible GPU's).
# A model name in i-k is a registry size, a llama-*-shape below, or NAME=layers,hidden,heads,
# kv_heads,intermediate. A dry run of the ZeroTrain side of (e), (f) and (i)-(k) without GPUs:
# ZT_DIST_DEVICE=cpu (2 CPU ranks over Gloo, `zt launch --num_procs 2`; the torch peers are
# skipped) and ZT_DIST_BIN=<a folder with zt, zt_bench_ckpt and zt_bench_gpt2, e.g. build/bin>,
# e.g. (tiny shapes; in k the 8B is predicted not to fit a 1 GiB "GPU"; ~20 s)
#   ZT_DIST_DEVICE=cpu ZT_DIST_BIN=$PWD/build/bin ZT_DIST_PARTS=ef ZT_DIST_CKPT_MODELS=gpt2 \
#     ZT_DIST_CKPT_IMPLS=zt OUT=/tmp/dry bash scripts/gpu_dist_check.sh
#   ZT_DIST_DEVICE=cpu ZT_DIST_BIN=$PWD/build/bin ZT_DIST_PARTS=ijk ZT_DIST_LLAMA_MODEL=llama-tiny \
#     ZT_DIST_LLAMA_SEQ=128 ZT_DIST_SFT_MODEL=llama-tiny ZT_DIST_SFT_SEQ=64 \
#     ZT_DIST_LARGEST_SEQ=64 ZT_DIST_LARGEST_LORA="t3=4,256,4,2,512 llama-tiny" \
#     ZT_DIST_LARGEST_OFFLOAD="llama-8b t3=4,256,4,2,512 llama-tiny" ZT_DIST_GPU_GIB=1 \
#     OUT=/tmp/dry bash scripts/gpu_dist_check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-gpu_out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0
# torch runs with the library path it was installed for (its own NCCL and CUDA libraries win).
torch_ld=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$root/gpu_bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# A hang fails in minutes, not DeepSpeed's 30; a failed rank takes its peer down in 5 s.
export ZT_COMM_TIMEOUT_S=${ZT_COMM_TIMEOUT_S:-300}
export ZT_LAUNCH_GRACE_S=${ZT_LAUNCH_GRACE_S:-5}
bin=${ZT_DIST_BIN:-$root/gpu_bundle/bin}
parts=${ZT_DIST_PARTS:-abcd}
steps=${ZT_BENCH_STEPS:-20}
models=${ZT_DIST_MODELS:-gpt2:16 gpt-1.3b:4}
deadline=${ZT_DIST_DEADLINE_S:-570}
device=${ZT_DIST_DEVICE:-cuda}
# Part d's zero_optimization tuning for every stage: buckets of 5e7 elements reduced on the
# communication stream while backward runs (DeepSpeed's defaults, 5e8 and overlap only at stage 3,
# would reduce all of GPT-2 124M after backward).
zero_keys=${ZT_BENCH_ZERO_KEYS:-\"reduce_bucket_size\": 50000000, \"overlap_comm\": true}
port=29600
ranks=(--num_gpus 2)
ck_dev=()
if [[ $device == cpu ]]; then  # the dry run: 2 CPU ranks over Gloo
  ranks=(--num_procs 2)
  ck_dev=(--device cpu)
fi

# Runs a command (from $2) under timeout: its own limit $1, cut to what is left before the
# call's deadline (less the 15 s that timeout -k grants after it and a few seconds for the
# table); past the deadline it is not started and fails as a timeout would (124).
capped() {
  local c=$1 left
  if ((deadline > 0)); then
    left=$((deadline - SECONDS - 20))
    ((left < c)) && c=$left
    if ((c < 5)); then
      echo "not run: past the call's deadline (ZT_DIST_DEADLINE_S=$deadline): ${*:2}" >&2
      return 124
    fi
  fi
  timeout -k 15 "$c" "${@:2}"
}
# zt launch on both GPUs, a fresh rendezvous port each time (no wait for a closing socket).
zt_launch() {
  port=$((port + 1))
  capped "$1" "$bin"/zt launch "${ranks[@]}" --master_port "$port" "${@:2}"
}
# One process on the first GPU.
one_gpu() {
  capped "$1" env CUDA_VISIBLE_DEVICES=0 "${@:2}"
}
# torchrun (through python3 -m, which needs no script on PATH) with torch's own library path.
torch_run() {
  capped "$1" env LD_LIBRARY_PATH="$torch_ld" \
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 "${@:2}"
}

if [[ $device == cpu ]]; then
  echo "dry run on the CPU (ZT_DIST_DEVICE=cpu): 2 Gloo ranks" | tee "$out/gpu.txt"
else
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
fi
start_s=$SECONDS
a_rc=skipped b_rc=skipped c_rc=skipped d_rc=skipped
e_rc=skipped f_rc=skipped g_rc=skipped h_rc=skipped i_rc=skipped j_rc=skipped k_rc=skipped
m_rc=skipped
l_rc=skipped

if [[ $parts == *a* ]]; then
  echo "== (a) NCCL communicator tests"
  capped 300 "$bin"/zt_unit_tests --gtest_filter='Nccl*' --gtest_brief=1 \
    --gtest_output=json:"$out/nccl_tests.json" >"$out/nccl_tests.log" 2>&1
  a_rc=$?
  tail -5 "$out/nccl_tests.log"
fi

if [[ $parts == *b* ]]; then
  echo "== (b) ZeRO stages 0-3 on 2 GPUs vs 1 GPU: gpt2-tiny, fp32 SGD, 10 steps, global batch" \
    "16, each unit alone and in shared buckets with overlap_comm"
  eq=$out/equivalence
  mkdir -p "$eq"
  b_rc=0
  for stage in 0 1 2 3; do
    for kind in unit bucket; do
      case $kind in
        unit) zero_extra='"reduce_bucket_size": 50000' extra=() ;;
        bucket) zero_extra='"reduce_bucket_size": 420000, "overlap_comm": true'
                extra=(--vocab-size 4000) ;;
      esac
      c=${kind}_s$stage
      cat >"$eq/$c.json" <<EOF
{"train_batch_size": 16, "gradient_clipping": 1.0, "zero_allow_untested_optimizer": true,
 "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $stage, $zero_extra,
                       "stage3_param_persistence_threshold": 5000}}
EOF
      train=(train --config "$eq/$c.json" --model gpt2-tiny --steps 10 --seq-len 64
             --sample-tokens 0 --order sequential "${extra[@]}")
      # The single-GPU run goes first: it also prepares the default corpus, which the two ranks
      # would otherwise both write at once.
      one_gpu 180 "$bin"/zt "${train[@]}" \
        --metrics-out "$eq/w1_$c.jsonl" --dump-params "$eq/w1_$c.bin" \
        >"$eq/w1_$c.log" 2>&1 ||
        { b_rc=1; echo "$c 1-GPU run failed:"; tail -3 "$eq/w1_$c.log"; }
      zt_launch 180 "$bin"/zt "${train[@]}" \
        --metrics-out "$eq/w2_$c.jsonl" --dump-params "$eq/w2_$c.bin" \
        >"$eq/w2_$c.log" 2>&1 ||
        { b_rc=1; echo "$c 2-GPU run failed:"; tail -3 "$eq/w2_$c.log"; }
    done
  done
  python3 - "$eq" <<'PY' || b_rc=1
# Compares each stage's 2-GPU run with the 1-GPU run: losses every step, final parameters.
import array, json, math, os, sys
eq, tol, ok_all, summary = sys.argv[1], 1e-4, True, {}
def steps(path):
    return [r for r in map(json.loads, open(path)) if r.get("type") != "run"]
def floats(path):
    a = array.array("f")
    a.frombytes(open(path, "rb").read())
    return a
for s in [f"{kind}_s{stage}" for stage in range(4) for kind in ("unit", "bucket")]:
    try:
        ref, got = steps(f"{eq}/w1_{s}.jsonl"), steps(f"{eq}/w2_{s}.jsonl")
        pr, pg = floats(f"{eq}/w1_{s}.bin"), floats(f"{eq}/w2_{s}.bin")
        loss = max(abs(g["loss"] - r["loss"]) / abs(r["loss"]) for g, r in zip(got, ref))
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(pg, pr)))
        pnorm = diff / math.sqrt(sum(y * y for y in pr))
        ok = len(ref) == len(got) == 10 and len(pr) == len(pg) > 0 and loss <= tol and pnorm <= tol
        detail = f"worst loss rel diff {loss:.2e}, params rel norm diff {pnorm:.2e} (tol {tol:g})"
    except Exception as e:  # a missing file is a failed stage; the others are still compared
        ok, detail = False, f"no result ({e})"
    ok_all &= ok
    summary[s] = {"ok": ok, "detail": detail}
    print(f"{s}: {'ok' if ok else 'FAIL'}: {detail}")
json.dump(summary, open(f"{eq}/summary.json", "w"))
sys.exit(0 if ok_all else 1)
PY
fi

if [[ $parts == *c* ]]; then
  echo "== (c) collective bus bandwidth, bf16, 2 GPUs: ZeroTrain vs torch.distributed"
  : >"$out/comm.jsonl"
  c_rc=0
  zt_launch 300 "$bin"/zt_comm_bench >>"$out/comm.jsonl" 2>"$out/comm_zt.log" ||
    { c_rc=1; echo "zt_comm_bench failed:"; tail -5 "$out/comm_zt.log"; }
  torch_run 300 bench/comm_torch.py >>"$out/comm.jsonl" 2>"$out/comm_torch.log" ||
    { c_rc=1; echo "comm_torch.py failed:"; tail -5 "$out/comm_torch.log"; }
fi

if [[ $parts == *d* ]]; then
  echo "== (d) ZeRO throughput on 2 GPUs, bf16, seq 1024, median of $steps steps"
  : >"$out/zero.jsonl"
  d_rc=0
  for mb in $models; do
    model=${mb%%:*} batch=${mb##*:}
    for stage in 0 1 2 3; do
      log=$out/zero_zt_${model}_s$stage.log
      zt_launch 240 "$bin"/zt_bench_gpt2 --model "$model" --batch "$batch" --seq 1024 \
        --dtype bf16 --steps "$steps" --stage "$stage" --zero-keys "$zero_keys" \
        >>"$out/zero.jsonl" 2>"$log" ||
        { d_rc=1; echo "zerotrain $model stage $stage failed:"; tail -3 "$log"; }
    done
    for impl in ddp fsdp2-reshard fsdp2-noreshard; do
      log=$out/zero_torch_${model}_$impl.log
      torch_run 240 bench/zero_torch.py --impl "$impl" --model "$model" --batch "$batch" \
        --seq 1024 --steps "$steps" >>"$out/zero.jsonl" 2>"$log" ||
        { d_rc=1; echo "torch $impl $model failed:"; tail -3 "$log"; }
    done
  done
fi

if [[ $parts == *e* ]]; then
  echo "== (e) checkpoints across GPU counts at ZeRO-3: gpt2-tiny saved at step 5 on 2 GPUs (1)," \
    "resumed on 1 (2) to step 10, against the uninterrupted runs"
  ck=$out/ckpt_resume
  rm -rf "$ck"
  mkdir -p "$ck"
  e_rc=0
  variants=${ZT_DIST_CKPT_VARIANTS:-fp32-sgd bf16-adamw}
  # One run of variant $v: name, number of GPUs, then its own flags (steps, save, load).
  e_train() {
    local name=$1 world=$2 log=$ck/${v}_$1.log
    local args=("${e_args[@]}" --metrics-out "$ck/${v}_$name.jsonl" --dump-params "$ck/${v}_$name.bin"
                "${@:3}")
    if ((world == 1)); then
      one_gpu 180 "$bin"/zt "${args[@]}" >"$log" 2>&1
    else
      zt_launch 180 "$bin"/zt "${args[@]}" >"$log" 2>&1
    fi || { e_rc=1; echo "$v $name failed:"; tail -3 "$log"; }
  }
  for v in $variants; do
    case $v in
      fp32-sgd) optim='"optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}}' ;;
      # The warm-up (8 steps) crosses the resume: a lost scheduler state restarts it from 0.
      bf16-adamw) optim='"bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
 "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 8, "warmup_max_lr": 3e-3}}' ;;
      *) echo "(e) unknown variant $v"; e_rc=1; continue ;;
    esac
    cat >"$ck/$v.json" <<EOF
{"train_batch_size": 16, "gradient_clipping": 1.0, "zero_allow_untested_optimizer": true,
 $optim,
 "zero_optimization": {"stage": 3, "reduce_bucket_size": 50000,
                       "stage3_param_persistence_threshold": 5000}}
EOF
    e_args=(train --config "$ck/$v.json" --model gpt2-tiny --seq-len 64 --sample-tokens 0
            --order sequential)
    # The 1-GPU run goes first: it also prepares the default corpus (see part b).
    e_train w1_full 1 --steps 10
    e_train w2_full 2 --steps 10
    e_train w1_first 1 --steps 5 --save "$ck/${v}_ckpt_w1"
    e_train w2_first 2 --steps 5 --save "$ck/${v}_ckpt_w2"
    e_train w2_to_w1 1 --steps 10 --load "$ck/${v}_ckpt_w2"
    e_train w1_to_w2 2 --steps 10 --load "$ck/${v}_ckpt_w1"
    e_train w2_to_w2 2 --steps 10 --load "$ck/${v}_ckpt_w2"
    if [[ $v == bf16-adamw ]]; then
      e_train w2_to_w1_noopt 1 --steps 10 --load "$ck/${v}_ckpt_w2" --no-load-optimizer-states
    fi
    rm -rf "$ck/${v}_ckpt_w1" "$ck/${v}_ckpt_w2"
  done
  python3 - "$ck" "$variants" <<'PY' || e_rc=1
# Each resume against the uninterrupted runs of the saving and of the resuming GPU count.
import array, json, math, sys
ck, variants = sys.argv[1], sys.argv[2].split()
# Loss (relative, every step 6-10) and final-parameter (relative norm) bounds; the header of
# scripts/gpu_dist_check.sh says why bf16 + Adam needs the looser ones. Those are floors: with
# bf16 the bound is twice the uninterrupted runs' own difference where that is larger (a resume
# across GPU counts runs part of the way at each count, so it cannot be expected to agree with
# either better than they agree with each other), and the control must still land outside it.
TOL = {"fp32-sgd": (1e-4, 1e-4), "bf16-adamw": (5e-3, 2e-2)}
ADAPTIVE = {"bf16-adamw"}
CASES = [("w2->w1", 2, 1, "w2_to_w1"), ("w1->w2", 1, 2, "w1_to_w2"), ("w2->w2", 2, 2, "w2_to_w2")]
def steps(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path))
            if r.get("type") != "run" and "loss" in r}
def floats(path):
    a = array.array("f")
    a.frombytes(open(path, "rb").read())
    return a
def loss_diff(got, ref):
    return max(abs(got[s] - ref[s]) / abs(ref[s]) for s in range(6, 11))
def param_diff(got, ref):
    if len(got) != len(ref) or not ref:
        return math.inf
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(got, ref))) / math.sqrt(sum(y * y for y in ref))
ok_all, summary = True, {}
for v in variants:
    tol, ptol = TOL.get(v, (1e-4, 1e-4))
    f = lambda name, ext: f"{ck}/{v}_{name}.{ext}"
    try:
        ref = {w: steps(f(f"w{w}_full", "jsonl")) for w in (1, 2)}
        refp = {w: floats(f(f"w{w}_full", "bin")) for w in (1, 2)}
        noise, pnoise = loss_diff(ref[1], ref[2]), param_diff(refp[1], refp[2])
        print(f"{v}: the uninterrupted 1- and 2-GPU runs differ by {noise:.2e} (steps 6-10), "
              f"{pnoise:.2e} in the final parameters")
        summary[f"{v} noise"] = {"variant": v, "case": "noise", "ok": True,
                                 "detail": f"{noise:.1e}", "value": noise, "params": pnoise}
        if v in ADAPTIVE:
            tol, ptol = max(tol, 2 * noise), max(ptol, 2 * pnoise)
    except Exception as e:
        ref = None
        print(f"{v}: no uninterrupted runs ({type(e).__name__}: {e})")
    cases = CASES + ([("w2->w1 no optimizer state (control)", 2, 1, "w2_to_w1_noopt")]
                     if v == "bf16-adamw" else [])
    for label, ws, wr, name in cases:
        control = "control" in label
        try:
            got, log = steps(f(name, "jsonl")), open(f(name, "log")).read()
            resumed = sorted(got) == list(range(6, 11))
            came = f"saved on {ws} rank(s) at ZeRO stage 3, loaded on {wr}" in log
            dl = max(loss_diff(got, ref[ws]), loss_diff(got, ref[wr]))
            dp = max(param_diff(floats(f(name, "bin")), refp[w]) for w in (ws, wr))
            if control:  # must be told apart from a good resume
                ok = resumed and came and dl > tol
            else:
                ok = resumed and came and dl <= tol and dp <= ptol
            detail = (f"steps {min(got)}-{max(got)}, {'load logged' if came else 'NO LOAD LOGGED'}, "
                      f"worst loss rel diff {dl:.2e} ({'must exceed' if control else 'tol'} {tol:g}), "
                      f"params rel norm diff {dp:.2e}" + ("" if control else f" (tol {ptol:g})"))
        except Exception as e:  # a missing file fails this case; the others are still compared
            ok, detail = False, f"no result ({type(e).__name__}: {e})"
        ok_all &= ok
        summary[f"{v} {label}"] = {"variant": v, "case": label.split(" ")[0] + (
            " control" if control else ""), "ok": ok, "detail": detail}
        print(f"{v} {label}: {'ok' if ok else 'FAIL'}: {detail}")
json.dump(summary, open(f"{ck}/summary.json", "w"))
sys.exit(0 if ok_all else 1)
PY
fi

if [[ $parts == *f* ]]; then
  ckdir=${ZT_CKPT_DIST_DIR:-/tmp/zt_dist_ckpt}
  echo "== (f) checkpoint save/load at ZeRO-3 on 2 GPUs, bf16 training state (fp32 master +" \
    "AdamW, 12 B/param): ZeroTrain vs DCP of FSDP2, in $ckdir"
  : >"$out/ckpt.jsonl"
  f_rc=0
  rm -rf "$ckdir/zt" "$ckdir/dcp"
  mkdir -p "$ckdir"
  dd if=/dev/zero of="$ckdir/dd.bin" bs=64M count=64 oflag=direct 2>&1 | tail -1 | tee "$out/dd.txt"
  rm -f "$ckdir/dd.bin"
  for m in ${ZT_DIST_CKPT_MODELS:-gpt-1.3b gpt-6.7b}; do
    # The checkpoint's size (12 bytes per parameter) against the free space: gpt-6.7b's 80 GB
    # may not fit. ZeroTrain's asynchronous saves (gpt-1.3b only) keep three tags at once.
    case $m in
      gpt2) shape="12 768" ;; gpt2-medium) shape="24 1024" ;; gpt-1.3b) shape="24 2048" ;;
      gpt-2.7b) shape="32 2560" ;; gpt-6.7b) shape="32 4096" ;; *) shape="" ;;
    esac
    async=(--no-async)
    [[ $m == gpt-1.3b ]] && async=()
    limit=240
    [[ $m == gpt-6.7b ]] && limit=330
    if [[ -n $shape ]]; then
      read -r nl nd <<<"$shape"
      need=$(( (12 * nd * nd * nl + 13 * nd * nl + 51330 * nd) * 12 * 21 / 20 ))
      [[ $m == gpt-1.3b ]] && need=$((need * 3))
      avail=$(df --output=avail -B1 "$ckdir" | tail -1)
      if ((avail < need)); then
        echo "$m: skipped: needs about $((need / 1000000000)) GB, $((avail / 1000000000)) GB free"
        f_rc=1
        continue
      fi
    fi
    for impl in ${ZT_DIST_CKPT_IMPLS:-zt torch}; do
      log=$out/ckpt_${impl}_$m.log
      case $impl in
        zt) zt_launch "$limit" "$bin"/zt_bench_ckpt --dir "$ckdir/zt" --model "$m" --dtype bf16 \
              --stage 3 "${async[@]}" "${ck_dev[@]}" >>"$out/ckpt.jsonl" 2>"$log" ;;
        torch) torch_run "$limit" bench/ckpt_torch.py --fsdp2 --dir "$ckdir/dcp" --model "$m" \
                 >>"$out/ckpt.jsonl" 2>"$log" ;;
        *) echo "(f) unknown implementation $impl" >"$log"; false ;;
      esac || { f_rc=1; echo "$impl $m failed:"; tail -3 "$log"; }
      rm -rf "$ckdir/zt" "$ckdir/dcp"  # what a failed or killed run left
    done
  done
  rmdir "$ckdir" 2>/dev/null
fi

if [[ $parts == *g* ]]; then
  echo "== (g) FSDP2 + torch.compile on 2 GPUs, bf16, seq 1024, median of $steps steps after" \
    "the compiling warm-up, next to ZeroTrain stages 2 and 3"
  # With part d in the same call its ZeroTrain rows are the ones compared.
  [[ $parts == *d* ]] || : >"$out/zero.jsonl"
  g_rc=0
  for mb in $models; do
    model=${mb%%:*} batch=${mb##*:}
    if [[ $parts != *d* ]]; then
      for stage in 2 3; do
        log=$out/zero_zt_${model}_s$stage.log
        zt_launch 240 "$bin"/zt_bench_gpt2 --model "$model" --batch "$batch" --seq 1024 \
          --dtype bf16 --steps "$steps" --stage "$stage" --zero-keys "$zero_keys" \
          >>"$out/zero.jsonl" 2>"$log" ||
          { g_rc=1; echo "zerotrain $model stage $stage failed:"; tail -3 "$log"; }
      done
    fi
    for impl in ${ZT_DIST_COMPILE_IMPLS:-fsdp2-reshard fsdp2-noreshard}; do
      log=$out/zero_torch_${model}_$impl-compile.log
      torch_run 360 bench/zero_torch.py --impl "$impl" --compile --model "$model" \
        --batch "$batch" --seq 1024 --steps "$steps" >>"$out/zero.jsonl" 2>"$log" ||
        { g_rc=1; echo "torch $impl --compile $model failed:"; tail -3 "$log"; }
    done
  done
fi

if [[ $parts == *h* ]]; then
  unit_filter=${ZT_DIST_UNIT_FILTER:-Nccl*:*Checkpoint*:HfExport*:StateBytes*:LrScheduler.ResumeAndState}
  echo "== (h) GPU test suite (zt_gpu_tests) and zt_unit_tests --gtest_filter='$unit_filter'"
  h_rc=0
  capped 360 "$bin"/zt_gpu_tests --gtest_brief=1 \
    --gtest_output=json:"$out/gpu_tests.json" >"$out/gpu_tests.log" 2>&1 || h_rc=1
  tail -5 "$out/gpu_tests.log"
  capped 300 "$bin"/zt_unit_tests --gtest_filter="$unit_filter" --gtest_brief=1 \
    --gtest_output=json:"$out/unit_dist_tests.json" >"$out/unit_dist_tests.log" 2>&1 || h_rc=1
  tail -5 "$out/unit_dist_tests.log"
fi

# ---- Parts i-k: Llama shapes. What --model names: a size of the registry (llama-tiny, llama-1b,
# llama-8b, llama-70b), a size between them below (Llama 3's vocabulary and 8 KV heads of head
# size 128, untied head), or NAME=layers,hidden,heads,kv_heads,intermediate. The latter two are
# written as a config.json without weights, which zt_bench_gpt2, zt train and zt estimate open as
# a random initialisation (nothing of 16-200 GB is written or read).
llama_shape() {
  case $1 in
    llama-12b-shape) echo "40 5120 40 8 13824" ;;    # Llama 2 13B's depth and width: 12.3B
    llama-17b-shape) echo "48 5632 44 4 15360" ;;    # 17.2B (44 heads: 4 KV heads divide them)
    llama-20b-shape) echo "48 6144 48 8 16384" ;;    # 20.3B
    llama-35b-shape) echo "48 8192 64 8 22016" ;;    # Code Llama 34B's blocks: 35.3B
    llama-98b-shape) echo "112 8192 64 8 28672" ;;   # Llama 3 70B's block, 112 of them: 98.2B
    llama-119b-shape) echo "136 8192 64 8 28672" ;;  # 136 of them: 118.8B
    *=*) echo "${1#*=}" | tr ',' ' ' ;;
  esac
}
# The --model argument for NAME: the name itself, or the folder its config.json was written to.
model_path() {
  local name=${1%%=*} shape
  shape=$(llama_shape "$1")
  if [[ -z $shape ]]; then
    echo "$1"
    return
  fi
  mkdir -p "$out/shapes/$name"
  python3 - "$out/shapes/$name/config.json" $shape <<'PY'
import json, sys
layers, hidden, heads, kv, inner = map(int, sys.argv[2:7])
json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
           "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
           "num_key_value_heads": kv, "intermediate_size": inner, "vocab_size": 128256,
           "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
           "hidden_act": "silu", "tie_word_embeddings": False, "initializer_range": 0.02,
           "bos_token_id": 128000, "eos_token_id": 128001}, open(sys.argv[1], "w"), indent=1)
PY
  echo "$out/shapes/$name"
}
lora_r=${ZT_DIST_LORA_RANK:-16}
zt_dev=()
est_dev=()
[[ $device == cpu ]] && zt_dev=(--device cpu) est_dev=(--device cpu)
[[ -n ${ZT_DIST_GPU_GIB:-} ]] && est_dev+=(--gpu-memory "$ZT_DIST_GPU_GIB")
# zt estimate of a run on the 2 ranks at micro-batch 1, as JSON in file $1 (flags from $2).
zt_estimate() {
  local f=$1
  capped 60 "$bin"/zt estimate --num-gpus 2 --micro-batch 1 "${est_dev[@]}" --json "${@:2}" \
    >"$f" 2>"$f.log"
}
# Whether that estimate fits, with checkpointing ($2: 1) or without (0): the GPU as zt estimate
# judges it (its peak + 1 GiB for CUDA within the GPU's memory) and the host per node within 95%
# of MemAvailable. Prints "fits|no  <GPU GiB> <host GiB per node> <parameters>".
estimate_verdict() {
  python3 - "$1" "$2" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    z = j["zerotrain"]["with_checkpointing" if sys.argv[2] == "1" else "without_checkpointing"]
    avail = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo")
                 if l.startswith("MemAvailable:"))
    host_ok = z["host_per_node"] <= 0.95 * avail
    print("fits" if z["fits"] and host_ok else "no", f"{z['device_total_bytes'] / 2**30:.1f}",
          f"{z['host_per_node'] / 2**30:.1f}", j["model"]["params"])
except Exception as e:  # no estimate: run it and let the engine judge
    print("fits ? ? 0")
PY
}
# Data of `zt train --task sft` (i, j): pre-tokenized records of SEQ tokens whose first half is
# the prompt (label -100) and second the response, random ids below VOCAB; no tokenizer needed.
sft_data() {
  local f=$out/sft_train/sft_$1_$2.jsonl
  mkdir -p "$out/sft_train"
  [[ -s $f ]] || python3 - "$f" "$1" "$2" <<'PY'
import json, random, sys
f, seq, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
with open(f, "w") as out:
    for _ in range(96):
        ids = [rng.randrange(vocab) for _ in range(seq)]
        out.write(json.dumps({"input_ids": ids, "labels": [-100] * (seq // 2) + ids[seq // 2:]}) + "\n")
PY
  echo "$f"
}
# One Llama training benchmark on both GPUs; its JSON line goes to stdout, everything else to
# stderr. IMPL: zt (zt_bench_gpt2 under zt launch), zt-train (`zt train --task sft` under zt
# launch on sft_data; the median tokens/s of its steps after the first 3), fsdp2 or fsdp2-compile
# (bench/llama_dist_torch.py under torchrun). Then model, sequence, activation checkpointing
# (0/1), LoRA rank (0: full training), ZeRO stage (ZeroTrain), timed steps, the cap in seconds.
# Micro-batch 1 per GPU, bf16 compute with fp32 master weights (LoRA: a bf16 base, fp32
# adapters), AdamW, clipping 1.0, 3 warm-up steps (the compiling ones for fsdp2-compile).
llama_bench() {
  local impl=$1 model=$2 seq=$3 ck=$4 r=$5 stage=$6 n=$7 cap=$8 mp
  mp=$(model_path "$model")
  local zt_args=(--model "$mp" --batch 1 --seq "$seq" --dtype bf16 --warmup 3 --steps "$n"
                 --stage "$stage" --zero-keys "$zero_keys" "${zt_dev[@]}")
  [[ -z ${ZT_DIST_TRACE:-} ]] || zt_args+=(--kernel-trace "$ZT_DIST_TRACE")
  local tr_lora=() pt_args=(--model "$model" --batch 1 --seq "$seq" --warmup 3 --steps "$n")
  if ((ck)); then
    zt_args+=(--gradient-checkpointing)
    tr_lora+=(--gradient-checkpointing)
    pt_args+=(--checkpointing)
  fi
  if ((r)); then
    zt_args+=(--lora-dim "$r" --lora-alpha $((2 * r)) --only-optimize-lora)
    tr_lora+=(--lora-dim "$r" --lora-alpha $((2 * r)) --only-optimize-lora)
    pt_args+=(--lora "$r")
  fi
  case $impl in
    zt) zt_launch "$cap" "$bin"/zt_bench_gpt2 "${zt_args[@]}" ;;
    fsdp2) torch_run "$cap" bench/llama_dist_torch.py "${pt_args[@]}" ;;
    fsdp2-compile) torch_run "$cap" bench/llama_dist_torch.py "${pt_args[@]}" --compile ;;
    torch-tp) torch_run "$cap" bench/llama_dist_torch.py "${pt_args[@]}" --tp ;;
    zt-train|zt-train-tp|zt-train-pp)
      # -tp: --tensor-parallel-size 2; -pp: --pipeline-parallel-size 2 with 4 micro-batches a step.
      local vocab=128256 data cfg m gas=1 par=()
      [[ $impl == zt-train-tp ]] && par=(--tensor-parallel-size 2)
      [[ $impl == zt-train-pp ]] && { par=(--pipeline-parallel-size 2); gas=4; }
      [[ $model == llama-tiny ]] && vocab=257
      data=$(sft_data "$seq" "$vocab")
      cfg=$out/sft_train/ds_s${stage}_g$gas.json
      m=$out/sft_train/metrics_${impl}_${model}_r${r}_ckpt$ck.jsonl
      cat >"$cfg" <<EOF
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": $gas,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 6e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
 "zero_optimization": {"stage": $stage, $zero_keys}}
EOF
      rm -f "$m"
      zt_launch "$cap" "$bin"/zt train --task sft --model "$mp" --data "$data" --config "$cfg" \
        --seq-len "$seq" --steps $((n + 3)) --sample-tokens 0 --order sequential \
        --metrics-out "$m" "${tr_lora[@]}" "${par[@]}" "${zt_dev[@]}" >&2 || return
      python3 - "$m" "$model" "$seq" "$ck" "$r" "$stage" "$n" "$impl" "$gas" <<'PY'
# zt train's per-step tokens/s (wall clock of the step on rank 0), median of the timed steps.
import json, sys
m, model, seq, ck, r, stage, n, impl, gas = sys.argv[1:10]
rows = [json.loads(l) for l in open(m) if l.startswith("{")]
run = next(x for x in rows if x.get("type") == "run")
tps = sorted(x["tokens_per_s"] for x in rows if "tokens_per_s" in x and x["step"] > 3)
med = tps[len(tps) // 2]
# (the run record's world_size counts the data-parallel ranks; the GPUs are all the ranks)
w = run["world_size"] * run.get("pipeline_parallel_size", 1) * run.get("tensor_parallel_size", 1)
suffix = {"zt-train-tp": "-tp2", "zt-train-pp": "-pp2"}.get(impl, "")
print(json.dumps({"impl": "zerotrain-train-sft" + suffix, "model": model, "params": run["parameters"],
                  "batch": 1, "seq": int(seq), "world_size": w, "dtype": run["dtype"],
                  "stage": int(stage), "steps": len(tps),
                  "step_ms_median": 1000 * run["world_size"] * int(gas) * int(seq) / med,
                  "tokens_per_s": med, "tokens_per_s_per_gpu": med / w, "mfu": None,
                  "peak_mem_bytes": None, "checkpointing": ck == "1", "lora_dim": int(r),
                  "first_loss": rows[1]["loss"], "last_loss": rows[-1]["loss"]}))
PY
      ;;
    *) echo "unknown implementation $impl" >&2; return 2 ;;
  esac
}
# Runs the plan $2 (';'-separated "impl checkpointing lora-rank stage" entries) of part $1 with
# model $3, sequence $4, timed steps $5; JSON lines to $6, logs beside it. Returns 1 when a run
# failed. A zt run without checkpointing that zt estimate says does not fit the GPU (an H100 at
# 8B and sequence 8192) is skipped; the torch peers are skipped in the CPU dry run.
llama_plan() {
  local part=$1 model=$3 seq=$4 n=$5 jsonl=$6 rc=0 e impl ck r stage log verdict cap
  local entries=()
  IFS=';' read -r -a entries <<<"$2"
  for e in "${entries[@]}"; do
    read -r impl ck r stage <<<"$e"
    [[ -n $impl ]] || continue
    ck=${ck:-0} r=${r:-0} stage=${stage:-3}
    log=${jsonl%.jsonl}_${impl}_r${r}_ckpt$ck.log
    if [[ $device == cpu && $impl == fsdp2* ]]; then
      echo "($part) $impl skipped: the torch peers need the GPUs (dry run)"
      continue
    fi
    if [[ $impl == zt* ]] && ((!ck)); then
      zt_estimate "$log.estimate.json" --model "$(model_path "$model")" --stage "$stage" \
        --seq-len "$seq" $( ((r)) && echo "--lora-dim $r --only-optimize-lora")
      read -r verdict dev_gib _ <<<"$(estimate_verdict "$log.estimate.json" 0)"
      if [[ $verdict != fits ]]; then
        echo "($part) $impl $model without checkpointing skipped: zt estimate says $dev_gib GiB" \
          "a GPU, more than it has"
        continue
      fi
    fi
    cap=240
    [[ $impl == fsdp2 || $impl == torch-tp ]] && cap=300
    [[ $impl == fsdp2-compile ]] && cap=420
    echo "($part) $impl, $( ((r)) && echo "LoRA r$r" || echo full), checkpointing $ck"
    llama_bench "$impl" "$model" "$seq" "$ck" "$r" "$stage" "$n" "$cap" >>"$jsonl" 2>"$log" ||
      { rc=1; echo "($part) $impl r$r ckpt$ck failed:"; tail -3 "$log"; }
  done
  return $rc
}

if [[ $parts == *i* ]]; then
  lm=${ZT_DIST_LLAMA_MODEL:-llama-8b}
  lseq=${ZT_DIST_LLAMA_SEQ:-8192}
  lsteps=${ZT_DIST_LLAMA_STEPS:-10}
  echo "== (i) $lm at sequence $lseq on 2 GPUs, micro-batch 1, bf16: ZeroTrain ZeRO-3 next to" \
    "FSDP2 on transformers' model, eager and compiled; median of $lsteps steps after 3 warm-up"
  : >"$out/llama8k.jsonl"
  llama_plan i "${ZT_DIST_LLAMA_PLAN:-zt 1;fsdp2 1;fsdp2-compile 1;zt 0;fsdp2 0}" "$lm" "$lseq" \
    "$lsteps" "$out/llama8k.jsonl"
  i_rc=$?
fi

if [[ $parts == *m* ]]; then
  mm=${ZT_DIST_LLAMA_MODEL:-llama-8b}
  mseq=${ZT_DIST_LLAMA_SEQ:-8192}
  echo "== (m) $mm at sequence $mseq on 2 GPUs, bf16, activation checkpointing: zt train with" \
    "--tensor-parallel-size 2 and with --pipeline-parallel-size 2 (4 micro-batches a step) next" \
    "to PyTorch's Megatron-style TP (DTensor parallelize_module); median of the timed steps"
  : >"$out/llama3d.jsonl"
  llama_plan m "${ZT_DIST_3D_PLAN:-zt-train-tp 1 0 1;torch-tp 1 0 0;zt-train-pp 1 0 1}" "$mm" \
    "$mseq" "${ZT_DIST_3D_STEPS:-6}" "$out/llama3d.jsonl"
  m_rc=$?
fi

if [[ $parts == *j* ]]; then
  sm=${ZT_DIST_SFT_MODEL:-llama-8b}
  sseq=${ZT_DIST_SFT_SEQ:-2048}
  ssteps=${ZT_DIST_SFT_STEPS:-10}
  echo "== (j) fine-tuning $sm on 2 GPUs, seq $sseq, micro-batch 1, bf16: full (ZeRO-3) and LoRA" \
    "r$lora_r (alpha $((2 * lora_r)), every linear module, base frozen) next to FSDP2 and" \
    "FSDP2 + peft; median of $ssteps steps after 3 warm-up"
  : >"$out/sft.jsonl"
  llama_plan j "${ZT_DIST_SFT_PLAN:-zt 0 $lora_r;fsdp2 0 $lora_r;zt 0 0;fsdp2 0 0;zt 1 $lora_r;fsdp2 1 $lora_r;zt 1 0;fsdp2 1 0;zt-train 0 $lora_r;zt-train 0 0}" \
    "$sm" "$sseq" "$ssteps" "$out/sft.jsonl"
  j_rc=$?
fi

if [[ $parts == *k* ]]; then
  kseq=${ZT_DIST_LARGEST_SEQ:-2048}
  echo "== (k) the largest Llama shape that fine-tunes on 2 GPUs (LoRA r$lora_r; full ZeRO-3 +" \
    "CPU optimizer offload), seq $kseq, micro-batch 1, activation checkpointing: zt estimate," \
    "then 3-step trials largest-first"
  : >"$out/largest.jsonl"
  mkdir -p "$out/largest"
  k_rc=0
  for job in ${ZT_DIST_LARGEST_JOBS:-lora offload}; do
    case $job in
      lora) cands=${ZT_DIST_LARGEST_LORA:-llama-119b-shape llama-98b-shape llama-70b llama-35b-shape}
            flags=(--lora-dim "$lora_r" --lora-alpha $((2 * lora_r)) --only-optimize-lora)
            est=(--lora-dim "$lora_r" --only-optimize-lora)
            cap=480 ;;
      offload) cands=${ZT_DIST_LARGEST_OFFLOAD:-llama-35b-shape llama-20b-shape llama-17b-shape llama-12b-shape llama-8b}
               flags=(--offload-optimizer cpu)
               est=(--offload cpu)
               cap=360 ;;
      # ZeRO-Infinity across both GPUs: offload_param cpu as well (zt estimate, which does not
      # model parameter offload, judges it as optimizer offload alone: a GPU upper bound).
      infinity) cands=${ZT_DIST_LARGEST_INFINITY:-llama-17b-shape llama-12b-shape llama-8b}
                flags=(--offload-optimizer cpu)
                est=(--offload cpu)
                cap=360 ;;
      *) echo "(k) unknown job $job"; k_rc=1; continue ;;
    esac
    k_keys=""
    [[ $job == infinity ]] && k_keys=', "offload_param": {"device": "cpu", "pin_memory": true}'
    found=""
    for m in $cands; do
      name=${m%%=*}
      mp=$(model_path "$m")
      base=$out/largest/${job}_$name
      zt_estimate "$base.estimate.json" --model "$mp" --stage 3 --seq-len "$kseq" \
        --gradient-checkpointing "${est[@]}"
      read -r verdict dev_gib host_gib nparams <<<"$(estimate_verdict "$base.estimate.json" 1)"
      outcome="" wall=0 rc=""
      if [[ -n $found ]]; then
        outcome="not tried: $found trains"
      elif [[ $verdict != fits ]]; then
        outcome="not tried: predicted not to fit"
      else
        echo "(k) $job $name: zt estimate $dev_gib GiB a GPU, $host_gib GiB of host memory; trial"
        t0=$SECONDS
        zt_launch "$cap" "$bin"/zt_bench_gpt2 --model "$mp" --batch 1 --seq "$kseq" --dtype bf16 \
          --warmup 1 --steps 2 --stage 3 --zero-keys "$zero_keys$k_keys" --gradient-checkpointing \
          "${flags[@]}" "${zt_dev[@]}" >"$base.json" 2>"$base.log"
        rc=$?
        wall=$((SECONDS - t0))
        if ((rc == 0)) && grep -q '^{' "$base.json"; then
          outcome=trains found=$name
        elif ((rc == 124 || rc == 137)); then
          outcome="timed out"
        else
          outcome=failed
        fi
        echo "(k) $job $name: $outcome after $wall s"
        [[ $outcome == trains ]] || tail -2 "$base.log"
      fi
      python3 - "$base" "$job" "$name" "$verdict" "$dev_gib" "$host_gib" "$nparams" "$outcome" \
        "$wall" "$rc" "$kseq" >>"$out/largest.jsonl" <<'PY'
# One row per candidate: zt estimate's prediction and the trial's outcome (its JSON line, or the
# last line of its log).
import json, sys
base, job, name, verdict, dev, host, n, outcome, wall, rc, seq = sys.argv[1:12]
row = {"job": job, "model": name, "seq": int(seq), "params": int(n), "predicted_fit": verdict == "fits",
       "predicted_gpu_gib": dev, "predicted_host_gib_per_node": host, "outcome": outcome,
       "wall_s": int(wall), "rc": rc}
try:
    row["bench"] = next(json.loads(l) for l in open(base + ".json") if l.startswith("{"))
except Exception:
    pass
try:
    lines = [l.strip() for l in open(base + ".log") if l.strip()]
    row["last_log_line"] = lines[-1][-300:] if lines else ""
except OSError:
    pass
print(json.dumps(row))
PY
    done
    if [[ -z $found ]]; then
      k_rc=1
      echo "(k) $job: no candidate trained"
    fi
  done
fi

echo
if [[ $parts == *l* ]]; then
  echo "== (l) pipeline parallelism on 2 GPUs: --pipeline-parallel-size 2 against 1 GPU (gpt2-tiny," \
    "fp32 SGD, 4 micro-batches a step, 10 steps), then the bubble against (P-1)/(m+P-1)"
  pl=$out/pipeline
  mkdir -p "$pl"
  l_rc=0
  cat >"$pl/pp.json" <<EOF
{"train_batch_size": 16, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
 "zero_allow_untested_optimizer": true,
 "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}}}
EOF
  train=(train --config "$pl/pp.json" --model gpt2-tiny --steps 10 --seq-len 64 --sample-tokens 0
         --order sequential "${ck_dev[@]}")
  one_gpu 180 "$bin"/zt "${train[@]}" --metrics-out "$pl/w1.jsonl" >"$pl/w1.log" 2>&1 ||
    { l_rc=1; echo "1-GPU run failed:"; tail -3 "$pl/w1.log"; }
  zt_launch 180 "$bin"/zt "${train[@]}" --pipeline-parallel-size 2 --metrics-out "$pl/pp2.jsonl" \
    >"$pl/pp2.log" 2>&1 || { l_rc=1; echo "pipeline run failed:"; tail -3 "$pl/pp2.log"; }
  zt_launch 180 "$bin"/zt "${train[@]}" --tensor-parallel-size 2 --metrics-out "$pl/tp2.jsonl" \
    >"$pl/tp2.log" 2>&1 || { l_rc=1; echo "tensor-parallel run failed:"; tail -3 "$pl/tp2.log"; }
  zt_launch 180 "$bin"/zt "${train[@]}" --tensor-parallel-size 2 --sequence-parallel \
    --metrics-out "$pl/tp2sp.jsonl" >"$pl/tp2sp.log" 2>&1 ||
    { l_rc=1; echo "sequence-parallel run failed:"; tail -3 "$pl/tp2sp.log"; }
  python3 - "$pl" <<'PY' || l_rc=1
# The same check as tests/dist/pipeline_stages.py, at part (b)'s GPU tolerance (1e-4).
import json, sys
pl, ok_all = sys.argv[1], True
def steps(path):
    return [r for r in map(json.loads, open(path)) if r.get("type") != "run"]
a = steps(f"{pl}/w1.jsonl")
for name, label in (("pp2", "pipeline"), ("tp2", "tensor-parallel"),
                    ("tp2sp", "tensor + sequence-parallel")):
    try:
        b = steps(f"{pl}/{name}.jsonl")
    except OSError:
        print(f"{label} 2 GPUs vs 1 GPU: FAIL: no metrics")
        ok_all = False
        continue
    worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
    norm = max(abs(x["grad_norm"] - y["grad_norm"]) / abs(x["grad_norm"]) for x, y in zip(a, b))
    ok = len(a) == len(b) == 10 and worst <= 1e-4 and norm <= 1e-4 and b[-1]["loss"] < b[0]["loss"]
    ok_all = ok_all and ok
    print(f"{label} 2 GPUs vs 1 GPU: {'ok' if ok else 'FAIL'}: worst loss rel diff {worst:.2e}, "
          f"grad-norm {norm:.2e} (tol 1e-4), loss {b[0]['loss']:.4f} -> {b[-1]['loss']:.4f}")
sys.exit(0 if ok_all else 1)
PY
  # Throughput of tensor parallelism next to ZeRO data parallelism on the same two GPUs (the
  # default corpus), bf16, seq 1024: the median tokens/s of zt train's steps after the first 5.
  cat >"$pl/tput.json" <<EOF
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 1}}
EOF
  for m in ${ZT_DIST_TP_MODELS:-gpt2 gpt-1.3b}; do
    for layout in tp2 tp2sp dp2; do
      extra=()
      [[ $layout == tp2 ]] && extra=(--tensor-parallel-size 2)
      [[ $layout == tp2sp ]] && extra=(--tensor-parallel-size 2 --sequence-parallel)
      zt_launch 150 "$bin"/zt train --config "$pl/tput.json" --model "$m" \
        --seq-len "${ZT_DIST_PIPE_SEQ:-1024}" \
        --steps 15 --sample-tokens 0 "${ck_dev[@]}" "${extra[@]}" \
        --metrics-out "$pl/tput_${m}_$layout.jsonl" >"$pl/tput_${m}_$layout.log" 2>&1 ||
        { echo "throughput $m $layout failed:"; tail -2 "$pl/tput_${m}_$layout.log"; }
    done
  done
  python3 - "$pl" <<'PY'
import glob, json, os, statistics, sys
pl = sys.argv[1]
rows = []
for f in sorted(glob.glob(f"{pl}/tput_*.jsonl")):
    recs = [r for r in map(json.loads, open(f)) if r.get("type") != "run"]
    if len(recs) > 5:
        rows.append((os.path.basename(f)[5:-6], statistics.median(r["tokens_per_s"] for r in recs[5:])))
if rows:
    print("\n(l) tensor parallelism (tp2) next to ZeRO-1 data parallelism (dp2) on 2 GPUs, bf16, "
          "seq 1024, micro-batch 8 per data-parallel rank (tokens/s, both GPUs):")
    for name, tps in rows:
        print(f"  {name:<16}{tps:>12.0f}")
PY
  for spec in ${ZT_DIST_PIPE_MODELS:-gpt2:8 gpt-1.3b:2}; do
    zt_launch 240 "$bin"/zt_bench_pipe --model "${spec%%:*}" --micro-batch "${spec##*:}" \
      --seq "${ZT_DIST_PIPE_SEQ:-1024}" --micro-batches "${ZT_DIST_PIPE_COUNTS:-1,2,4,8,16}" \
      --steps 5 --warmup 2 "${ck_dev[@]}" 2>"$pl/bubble_${spec%%:*}.log" |
      grep '^{' >>"$pl/bubble.jsonl" ||
      { l_rc=1; echo "bubble ${spec%%:*} failed:"; tail -3 "$pl/bubble_${spec%%:*}.log"; }
  done
  python3 - "$pl/bubble.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
if rows:
    print(f"\n(l) pipeline bubble, {rows[0]['stages']} stages ({rows[0]['device']} ...), "
          f"{rows[0]['dtype']}, seq {rows[0]['seq']}: each stage's idle share of a batch "
          "(1 - its forward and backward time / the batch's) next to theory")
    print(f"{'model':<10}{'m':>4}{'batch ms':>10}{'tok/s':>10}{'idle s0':>9}{'idle s1':>9}{'theory':>8}")
    for r in rows:
        idle = r["idle_share"]
        print(f"{r['model']:<10}{r['micro_batches']:>4}{r['batch_ms_median']:>10.1f}"
              f"{r['tokens_per_s']:>10.0f}{idle[0]:>9.3f}{idle[-1]:>9.3f}{r['bubble_theory']:>8.3f}")
PY
fi

secs=$((SECONDS - start_s))
python3 - "$out" "$secs" "$a_rc" "$b_rc" "$c_rc" "$d_rc" "$e_rc" "$f_rc" "$g_rc" "$h_rc" \
  "$i_rc" "$j_rc" "$k_rc" \
  <<'PY' | tee "$out/summary.txt"
# The short table: each part's outcome, then bandwidth, throughput and checkpoint speed side by side.
import json, sys
out, secs = sys.argv[1:3]
rc = dict(zip("abcdefghijk", sys.argv[3:]))

def rows(name):
    res = []
    try:
        for line in open(f"{out}/{name}"):
            if line.startswith("{"):  # launchers may print other lines on stdout
                try:
                    res.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return res

def gtest(name):
    try:
        t = json.load(open(f"{out}/{name}"))
        skipped = sum(c.get("result") == "SKIPPED" for s in t["testsuites"] for c in s["testsuite"])
        passed = t["tests"] - t["failures"] - t.get("disabled", 0) - skipped
        return (f"{passed} passed, {t['failures']} failed"
                + (f", {skipped} skipped" if skipped else ""))
    except Exception as e:
        return f"no report ({type(e).__name__})"

def cases(path):
    return json.load(open(path))

if rc["a"] != "skipped":
    print(f"(a) NCCL tests: {gtest('nccl_tests.json')} (exit {rc['a']})")
if rc["b"] != "skipped":
    try:
        eq = cases(f"{out}/equivalence/summary.json")
        print("(b) 2 GPUs vs 1 GPU: " + ", ".join(
            f"{s} {'ok' if v['ok'] else 'FAIL'}" for s, v in eq.items()) + f" (exit {rc['b']})")
    except Exception:
        print(f"(b) 2 GPUs vs 1 GPU: no comparison (exit {rc['b']})")
if rc["e"] != "skipped":
    try:
        ck = cases(f"{out}/ckpt_resume/summary.json")
        line = []
        for var in dict.fromkeys(c["variant"] for c in ck.values()):
            cs = [c for c in ck.values() if c["variant"] == var]
            line.append(f"{var} " + ", ".join(
                f"{c['case']} {c['detail']}" if c["case"] == "noise" else
                f"{c['case']} {'ok' if c['ok'] else 'FAIL'}" for c in cs))
        print("(e) ZeRO-3 resume across GPU counts: " + "; ".join(line) + f" (exit {rc['e']})")
    except Exception:
        print(f"(e) ZeRO-3 resume across GPU counts: no comparison (exit {rc['e']})")
if rc["h"] != "skipped":
    print(f"(h) GPU tests: {gtest('gpu_tests.json')}; unit tests (NCCL, checkpoints): "
          f"{gtest('unit_dist_tests.json')} (exit {rc['h']})")
ran = ", ".join(f"({p}) exit {r}" for p, r in rc.items() if p in "cdfgijk" and r != "skipped")
print(f"{ran + ';  ' if ran else ''}run time {secs} s")

comm = {(r["impl"], r["op"], r["bytes"]): r for r in rows("comm.jsonl")}
if comm:
    print(f"\n{'op':<16}{'bytes':>8}{'zt GB/s':>10}{'torch GB/s':>12}{'zt/torch':>10}")
    keys = sorted({(op, b) for _, op, b in comm}, key=lambda k: (k[0], k[1]))
    for op, b in keys:
        z, t = comm.get(("zerotrain", op, b)), comm.get(("torch", op, b))
        zb = z["busbw_gbps"] if z else float("nan")
        tb = t["busbw_gbps"] if t else float("nan")
        ratio = zb / tb if z and t and tb > 0 else float("nan")
        size = f"{b >> 20}M" if b < 1 << 30 else f"{b >> 30}G"
        print(f"{op:<16}{size:>8}{zb:>10.1f}{tb:>12.1f}{ratio:>9.2f}x")
    print("(bus bandwidth, nccl-tests' formulas; median of the timed calls)")

zero = rows("zero.jsonl")
for model in dict.fromkeys(r["model"] for r in zero):
    rs = [r for r in zero if r["model"] == model]
    def name(r):
        return f"zerotrain-s{r['stage']}" if r["impl"] == "zerotrain" else r["impl"]
    by = {name(r): r for r in rs}
    print(f"\n{model} (micro-batch {rs[0]['batch']}/GPU, seq {rs[0]['seq']}, 2 GPUs, bf16)")
    print(f"{'impl':<30}{'tokens/s':>11}{'step ms':>9}{'peak GiB':>10}")
    for r in rs:
        print(f"{name(r):<30}{r['tokens_per_s']:>11.0f}{r['step_ms_median']:>9.1f}"
              f"{r['peak_mem_bytes'] / 2**30:>10.2f}")
    for label, a, b in (("ZeRO-3 / own stage 0, zerotrain", "zerotrain-s3", "zerotrain-s0"),
                        ("ZeRO-3 / own stage 0, torch", "torch-fsdp2-reshard", "torch-ddp"),
                        ("zerotrain s3 / FSDP2-reshard", "zerotrain-s3", "torch-fsdp2-reshard"),
                        ("zerotrain s2 / FSDP2-noreshard", "zerotrain-s2", "torch-fsdp2-noreshard"),
                        ("zerotrain s0 / DDP", "zerotrain-s0", "torch-ddp"),
                        ("zerotrain s3 / FSDP2-reshard-compile", "zerotrain-s3",
                         "torch-fsdp2-reshard-compile"),
                        ("zerotrain s2 / FSDP2-noreshard-compile", "zerotrain-s2",
                         "torch-fsdp2-noreshard-compile"),
                        ("zerotrain s0 / DDP-compile", "zerotrain-s0", "torch-ddp-compile"),
                        ("FSDP2-reshard compiled / eager", "torch-fsdp2-reshard-compile",
                         "torch-fsdp2-reshard"),
                        ("FSDP2-noreshard compiled / eager", "torch-fsdp2-noreshard-compile",
                         "torch-fsdp2-noreshard")):
        if a in by and b in by:  # only the pairs this call ran
            print(f"  {label:<40}{by[a]['tokens_per_s'] / by[b]['tokens_per_s']:.2f}x tokens/s, "
                  f"{by[a]['peak_mem_bytes'] / by[b]['peak_mem_bytes']:.2f}x peak")

ck = rows("ckpt.jsonl")
if ck:
    try:
        print("\ndisk:", open(f"{out}/dd.txt").read().strip())
    except OSError:
        pass
    print(f"checkpoint, ZeRO-3 on {ck[0].get('world_size', 2)} ranks (bf16 training state; GB/s = "
          f"the folder's bytes / the slowest rank's time)")
    print(f"{'model':<10}{'impl':<17}{'GB':>6}{'B/param':>8}{'save s':>8}{'GB/s':>7}"
          f"{'load s':>8}{'GB/s':>7}{'async stall s':>14}")
    for r in ck:
        stall = f"{r['async_stall_s']:.3f}" if r.get("async_stall_s", -1) >= 0 else "-"
        print(f"{r['model']:<10}{r['impl']:<17}{r['bytes'] / 1e9:>6.1f}"
              f"{r['bytes'] / r['parameters']:>8.2f}{r['save_s']:>8.2f}{r['save_GBps']:>7.2f}"
              f"{r['load_s']:>8.2f}{r['load_GBps']:>7.2f}{stall:>14}")
    for model in dict.fromkeys(r["model"] for r in ck):
        z = next((r for r in ck if r["model"] == model and r["impl"] == "zerotrain"), None)
        d = next((r for r in ck if r["model"] == model and r["impl"] == "torch-dcp-fsdp2"), None)
        if z and d:
            print(f"  {model}: zerotrain / DCP GB/s: save {z['save_GBps'] / d['save_GBps']:.2f}x, "
                  f"load {z['load_GBps'] / d['load_GBps']:.2f}x"
                  f"{'' if z['drop_caches'] and d['drop_caches'] else ' (page cache NOT dropped)'}")

def gib(r):
    b = r.get("peak_mem_bytes")
    return f"{b / 2**30:.1f}" if b else "-"

def label(r):
    base = {"zerotrain": "zerotrain s{}".format(r.get("stage", 3)),
            "zerotrain-train-sft": "zt train --task sft s{}".format(r.get("stage", 3))}.get(
                r["impl"], r["impl"])
    return base + (", ckpt" if r.get("checkpointing") else "")

def per_gpu(r):
    return r.get("tokens_per_s_per_gpu") or r["tokens_per_s"] / r.get("world_size", 2)

def llama_rows(rs, ratio_to):
    print(f"{'impl':<36}{'tok/s/GPU':>10}{'MFU':>7}{'step ms':>9}{'peak GiB':>10}"
          f"{'zt/this':>9}{'mem zt/this':>12}")
    for r in rs:
        z = ratio_to(r)
        mfu = f"{r['mfu']:.3f}" if r.get("mfu") is not None else "-"
        tp = f"{per_gpu(z) / per_gpu(r):.2f}x" if z and z is not r else "-"
        mem = (f"{z['peak_mem_bytes'] / r['peak_mem_bytes']:.2f}x"
               if z and z is not r and z.get("peak_mem_bytes") and r.get("peak_mem_bytes") else "-")
        print(f"{label(r):<36}{per_gpu(r):>10.0f}{mfu:>7}{r['step_ms_median']:>9.0f}"
              f"{gib(r):>10}{tp:>9}{mem:>12}")

# (m): tensor and pipeline parallelism next to PyTorch's tensor parallelism.
l3 = rows("llama3d.jsonl")
if l3:
    print(f"\n(m) {l3[0]['model']}, seq {l3[0]['seq']}, 2 GPUs, bf16, checkpointing "
          f"(the first row is the reference of the last two columns)")
    llama_rows(l3, lambda r: l3[0])

# (i): ZeroTrain's row with the same checkpointing setting is compared with each peer row.
l8 = rows("llama8k.jsonl")
if l8:
    r0 = l8[0]
    print(f"\n(i) {r0['model']}, seq {r0['seq']}, micro-batch {r0['batch']}/GPU, "
          f"{r0.get('world_size', 2)} GPUs, bf16, ZeRO-3 / FSDP2 reshard")
    zt_of = lambda r: next((z for z in l8 if z["impl"] == "zerotrain"
                            and z.get("checkpointing") == r.get("checkpointing")), None)
    llama_rows(l8, zt_of)
    target = 6667 * 4.8 / 3.35
    best = max((r for r in l8 if r["impl"] == "zerotrain"), key=per_gpu, default=None)
    if best:
        print(f"  target: torchtitan's 6,667 tok/s/GPU (Llama 3 8B, H100) x 4.8/3.35 (HBM) = "
              f"{target:,.0f}; best ZeroTrain row ({label(best)}): {per_gpu(best):,.0f} = "
              f"{per_gpu(best) / target:.2f}x of it: {'MET' if per_gpu(best) > target else 'not met'}")
        peer = max((r for r in l8 if r["impl"] != "zerotrain"), key=per_gpu, default=None)
        if peer:
            print(f"  best ZeroTrain row / best peer row ({label(peer)}): "
                  f"{per_gpu(best) / per_gpu(peer):.2f}x tok/s")
    print("  (zt/this: ZeroTrain's tok/s over the row's, same checkpointing; MFU: 6 FLOPs per "
          "parameter + 12 L T d per token, recomputation not counted, against 989 TFLOP/s)")

# (j): rows grouped by job (full or LoRA) and checkpointing; ZeroTrain's bench row against each.
sft = rows("sft.jsonl")
if sft:
    print(f"\n(j) fine-tuning {sft[0]['model']}, seq {sft[0]['seq']}, micro-batch 1/GPU, "
          f"{sft[0].get('world_size', 2)} GPUs, bf16")
    key = lambda r: (r.get("lora_dim", 0), bool(r.get("checkpointing")))
    for k in dict.fromkeys(map(key, sft)):
        rs = [r for r in sft if key(r) == k]
        print(f"{'LoRA r%d' % k[0] if k[0] else 'full'}{', activation checkpointing' if k[1] else ''}:")
        z = next((r for r in rs if r["impl"] == "zerotrain"), None)
        llama_rows(rs, lambda r: z)
    print("  (zt/this: zt_bench_gpt2's tok/s over the row's, same job and checkpointing; "
          "zt train --task sft rows: the wall clock of each step, no peak kept)")

# (k): every candidate's prediction and outcome, then the largest that trained per job.
big = rows("largest.jsonl")
if big:
    print(f"\n(k) largest Llama shape fine-tuned on 2 GPUs (seq {big[0]['seq']}, micro-batch 1, "
          f"activation checkpointing, ZeRO-3, bf16; 3 steps):")
    print(f"{'job':<9}{'model':<18}{'params':>8}{'est GPU':>9}{'est host':>10}  outcome")
    for r in big:
        b = r.get("bench")
        got = (f", {b['tokens_per_s'] / b.get('world_size', 2):,.0f} tok/s/GPU, peak "
               f"{b['peak_mem_bytes'] / 2**30:.1f} GiB, host state "
               f"{b.get('model_state_bytes_host', 0) / 2**30:.1f} GiB/rank" if b else "")
        why = "" if b or r["outcome"].startswith("not tried") else f" ({r.get('last_log_line', '')[:90]})"
        print(f"{r['job']:<9}{r['model']:<18}{r['params'] / 1e9:>7.1f}B{r['predicted_gpu_gib']:>9}"
              f"{r['predicted_host_gib_per_node']:>10}  {r['outcome']}"
              f"{' in %d s' % r['wall_s'] if r['wall_s'] else ''}{got}{why}")
    for job in dict.fromkeys(r["job"] for r in big):
        t = next((r for r in big if r["job"] == job and r["outcome"] == "trains"), None)
        print(f"  largest with {job}: " + (f"{t['model']} ({t['params'] / 1e9:.1f}B)" if t else "none"))
    print("  (est: zt estimate's GPU peak with checkpointing and host memory per node, GiB)")
PY
# Non-zero when any part that ran failed (the table above says which).
for rc in "$a_rc" "$b_rc" "$c_rc" "$d_rc" "$e_rc" "$f_rc" "$g_rc" "$h_rc" "$i_rc" "$j_rc" "$k_rc" \
  "$l_rc" "$m_rc"; do
  [[ $rc == 0 || $rc == skipped ]] || exit 1
done
exit 0
