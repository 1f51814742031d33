#!/usr/bin/env bash
# Runs on the GPU machine, over a bundle made by scripts/gpu_bundle.sh: the GPU test suite, a short
# `zt train` of GPT-2 124M in bf16, the GPT-2 benchmark next to PyTorch (eager and
# torch.compile) with the same model, batch, sequence and precision, the attention benchmark, and
# checkpoint save/load next to PyTorch DCP and the disk's own speed (dd), in the same run. Prints
# a short table last. Results (JSON lines, logs) go to ${OUT:-gpu_out}.
# Sections `llama` (Llama-shaped 1B training next to transformers' Llama, eager and compiled),
# `generate` (greedy decoding next to transformers' generate with its static cache) and `export`
# (a model trained here, exported, loaded by transformers: same logits) cover the model families.
# Section `tasks` trains sft, reward and mlm one step on the CPU and on the GPU (f32: the
# first-step losses must agree) and 40 steps on the GPU (the loss must fall).
# Section `lora` checks LoRA on the GPU against the CPU, activation checkpointing in bf16, and the
# exported adapter against peft (tests/fixtures/hf/llama). Section `monitors` trains GPT-2 with
# the TensorBoard and CSV monitors, wall_clock_breakdown and flops_profiler, and reads the event
# file back with TensorBoard's own EventAccumulator. Section `tune` (not in the default list) runs
# the autotuner over a small space of GPT-2 runs.
# Section `infinity` (not in the default list; one ~9-minute call) measures ZeRO-Infinity on one
# GPU (optimizer and parameter offload to host memory, the optimizer state swapped to NVMe) next
# to PyTorch FSDP2 with CPUOffloadPolicy, the disk's own O_DIRECT speed, and the largest models;
# its comment below lists its knobs (ZT_INF_*).
# Section `tokenize` (CPU only; not in the default list) times tokenizer.json encoding next to
# Hugging Face tokenizers and tiktoken on a ~50 MB text (ZT_TOK_MB), with a 50k-vocabulary
# GPT-2-style BPE trained there and the gpt2 fixture of tests/fixtures/tokenizers, on one thread
# and on all cores; work files go to ZT_TOK_DIR (default /tmp/zt_tok_bench, reused when there).
# Section `vision` trains AlexNet on CIFAR-10's binary format (GPU against the CPU, bf16 next to
# PyTorch) and writes the PyTorch fixture of tests/fixtures/vision.
# Section `rlhf` runs zt train --task ppo on the GPU against the CPU and in bf16 at ZeRO 0 and 3;
# section `rlhf_bench` (not in the default list) times a Llama 1B PPO round next to PyTorch;
# `rlhf_2gpu` (not in the default list; 2 GPUs) DeepSpeed-Chat's 256 + 256 round on 1 and 2 GPUs.
# Section `norms` times LayerNorm and RMSNorm forward and backward next to torch's.
# Section `speed` (not in the default list) times a plan of one-GPU training runs, ZeroTrain's
# variants (GEMM autotuning, kept activations, CUDA graph) next to eager and compiled PyTorch.
# ZT_GPU_SECTIONS (default "tests train bench attention norms ckpt llama generate export tasks lora monitors vision rlhf") picks them;
# ZT_CKPT_MODELS (default "gpt-1.3b gpt-2.7b") the checkpoint benchmark's models, ZT_CKPT_DIR
# where they write (default /tmp/zt_ckpt_bench).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
# torch's multi-process runs keep the library path it was installed for (its own NCCL wins).
torch_ld=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$PWD/gpu_bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
bin=gpu_bundle/bin
model=${ZT_BENCH_MODEL:-gpt2}
batch=${ZT_BENCH_BATCH:-16}
seq=${ZT_BENCH_SEQ:-1024}
steps=${ZT_BENCH_STEPS:-20}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

sections=" ${ZT_GPU_SECTIONS:-tests train bench attention norms ckpt llama generate export tasks lora monitors vision rlhf} "
on() { [[ "$sections" == *" $1 "* ]]; }
gpu_rc=-1
train_rc=-1
: >"$out/bench.jsonl"
: >"$out/attention.jsonl"
: >"$out/norms.jsonl"
: >"$out/ckpt.jsonl"
: >"$out/llama.jsonl"
: >"$out/generate.jsonl"
: >"$out/tokenize.jsonl"
export_rc=-1

if on tests; then
echo "== GPU tests"
"$bin"/zt_gpu_tests --gtest_brief=1 --gtest_output=json:"$out/gpu_tests.json" >"$out/gpu_tests.log" 2>&1
gpu_rc=$?
# The failures (with their context) and the summary; the whole log stays in gpu_tests.log.
grep -B3 -A25 "Failure$\|^\[  FAILED  \]" "$out/gpu_tests.log" | head -150
tail -3 "$out/gpu_tests.log"
fi

if on train; then
echo "== zt train --model gpt2 --device cuda (bf16, micro-batch 16, seq 1024)"
"$bin"/zt train --config examples/ds_config_gpt2_bf16.json --model gpt2 --device cuda \
  --steps "${ZT_TRAIN_STEPS:-30}" ${ZT_TRAIN_DATA:+--data "$ZT_TRAIN_DATA"} --metrics-out "$out/train.jsonl" \
  --sample-tokens 0 >"$out/train.log" 2>&1
train_rc=$?
tail -5 "$out/train.log"
fi

if on bench; then
echo "== benchmark: $model, batch $batch, seq $seq, bf16, median of $steps steps"
# ZT_BENCH_TRACE=N: each run also traces N extra steps kernel by kernel (tables in the logs
# bench_zt.log, bench_torch.log, bench_compile.log).
btrace=()
[ -n "${ZT_BENCH_TRACE:-}" ] && btrace=(--kernel-trace "$ZT_BENCH_TRACE")
"$bin"/zt_bench_gpt2 --model "$model" --batch "$batch" --seq "$seq" --dtype bf16 --steps "$steps" \
  "${btrace[@]}" >>"$out/bench.jsonl" 2>"$out/bench_zt.log" || tail -5 "$out/bench_zt.log"
# ZT_BENCH_GRAPH=0 leaves out the run with the whole step as a CUDA graph (--cuda-graph).
if [ "${ZT_BENCH_GRAPH:-1}" = "1" ]; then
  "$bin"/zt_bench_gpt2 --model "$model" --batch "$batch" --seq "$seq" --dtype bf16 --steps "$steps" \
    --cuda-graph "${btrace[@]}" >>"$out/bench.jsonl" 2>"$out/bench_zt_graph.log" ||
    tail -5 "$out/bench_zt_graph.log"
fi
python3 bench/gpt2_torch.py --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" \
  "${btrace[@]}" >>"$out/bench.jsonl" 2>"$out/bench_torch.log" || tail -5 "$out/bench_torch.log"
if [ "${ZT_BENCH_COMPILE:-1}" = "1" ]; then
  python3 bench/gpt2_torch.py --model "$model" --batch "$batch" --seq "$seq" --steps "$steps" --compile \
    "${btrace[@]}" \
    >>"$out/bench.jsonl" 2>"$out/bench_compile.log" || tail -5 "$out/bench_compile.log"
fi
fi

if on attention; then
echo "== attention fwd+bwd, bf16: own kernels, cuDNN, unfused next to torch SDPA (flash, cuDNN)"
"$bin"/zt_bench_attention >>"$out/attention.jsonl" 2>"$out/attention_zt.log" || tail -5 "$out/attention_zt.log"
python3 bench/attention_torch.py >>"$out/attention.jsonl" 2>"$out/attention_torch.log" ||
  tail -5 "$out/attention_torch.log"
fi

if on norms; then
echo "== LayerNorm / RMSNorm fwd and bwd, bf16, next to torch (eager, compiled)"
"$bin"/zt_bench_norm >>"$out/norms.jsonl" 2>"$out/norms_zt.log" || tail -5 "$out/norms_zt.log"
python3 bench/norm_torch.py >>"$out/norms.jsonl" 2>"$out/norms_torch.log" ||
  tail -5 "$out/norms_torch.log"
fi

if on ckpt; then
ckdir=${ZT_CKPT_DIR:-/tmp/zt_ckpt_bench}
mkdir -p "$ckdir"
echo "== checkpoint save/load: the disk (dd, 4 GiB, O_DIRECT), ZeroTrain, PyTorch DCP"
dd if=/dev/zero of="$ckdir/dd.bin" bs=64M count=64 oflag=direct 2>&1 | tail -1 | tee "$out/dd.txt"
rm -f "$ckdir/dd.bin"
for m in ${ZT_CKPT_MODELS:-gpt-1.3b gpt-2.7b}; do
  async=""
  [ "$m" = "gpt-1.3b" ] || async="--no-async"
  "$bin"/zt_bench_ckpt --dir "$ckdir/zt" --model "$m" --dtype bf16 $async \
    >>"$out/ckpt.jsonl" 2>"$out/ckpt_zt_$m.log" || tail -5 "$out/ckpt_zt_$m.log"
  python3 bench/ckpt_torch.py --dir "$ckdir/dcp" --model "$m" \
    >>"$out/ckpt.jsonl" 2>"$out/ckpt_torch_$m.log" || tail -5 "$out/ckpt_torch_$m.log"
done
fi

if on llama; then
lm=${ZT_LLAMA_MODEL:-llama-1b}
lb=${ZT_LLAMA_BATCH:-4}
ls=${ZT_LLAMA_SEQ:-2048}
echo "== training $lm, batch $lb, seq $ls, bf16: ZeroTrain, transformers eager, torch.compile"
# ZT_LLAMA_TRACE=N: each run also traces N extra steps kernel by kernel (the tables go to the
# logs llama_zt.log, llama_torch.log, llama_compile.log).
trace=()
[ -n "${ZT_LLAMA_TRACE:-}" ] && trace=(--kernel-trace "$ZT_LLAMA_TRACE")
"$bin"/zt_bench_gpt2 --model "$lm" --batch "$lb" --seq "$ls" --dtype bf16 --steps 10 --warmup 3 \
  "${trace[@]}" >>"$out/llama.jsonl" 2>"$out/llama_zt.log" || tail -5 "$out/llama_zt.log"
if [ "${ZT_BENCH_GRAPH:-1}" = "1" ]; then
  "$bin"/zt_bench_gpt2 --model "$lm" --batch "$lb" --seq "$ls" --dtype bf16 --steps 10 --warmup 3 \
    --cuda-graph "${trace[@]}" >>"$out/llama.jsonl" 2>"$out/llama_zt_graph.log" ||
    tail -5 "$out/llama_zt_graph.log"
fi
python3 bench/llama_torch.py --model "$lm" --batch "$lb" --seq "$ls" "${trace[@]}" \
  >>"$out/llama.jsonl" 2>"$out/llama_torch.log" || tail -5 "$out/llama_torch.log"
if [ "${ZT_BENCH_COMPILE:-1}" = "1" ]; then
  python3 bench/llama_torch.py --model "$lm" --batch "$lb" --seq "$ls" --compile "${trace[@]}" \
    >>"$out/llama.jsonl" 2>"$out/llama_compile.log" || tail -5 "$out/llama_compile.log"
fi
fi

if on generate; then
gm=${ZT_GEN_MODEL:-llama-1b}
for gb in ${ZT_GEN_BATCHES:-1 32}; do
  echo "== generate $gm, batch $gb, prompt 128, 256 new tokens, bf16, greedy"
  "$bin"/zt_bench_generate --model "$gm" --batch "$gb" --prompt 128 --new 256 \
    >>"$out/generate.jsonl" 2>"$out/generate_zt_$gb.log" || tail -5 "$out/generate_zt_$gb.log"
  for peer in "--cache static" "--cache dynamic" "--cache static --compile"; do
    [ "${ZT_BENCH_COMPILE:-1}" = "1" ] || [[ "$peer" != *compile* ]] || continue
    # ZT_PEER_TIMEOUT_S bounds each peer (a compiled one can spend minutes compiling).
    timeout "${ZT_PEER_TIMEOUT_S:-0}" \
      python3 bench/generate_torch.py --model "$gm" --batch "$gb" --prompt 128 --new 256 $peer \
      >>"$out/generate.jsonl" 2>>"$out/generate_torch_$gb.log" || tail -5 "$out/generate_torch_$gb.log"
  done
done
fi

if on offload8b; then
echo "== llama-8b, ZeRO-Offload (stage 1, optimizer on the host), batch 1, seq 2048, bf16"
"$bin"/zt_bench_gpt2 --model llama-8b --batch 1 --seq 2048 --dtype bf16 --steps 4 --warmup 2 \
  --stage 1 --offload-optimizer cpu >"$out/offload8b.jsonl" 2>"$out/offload8b.log" ||
  tail -5 "$out/offload8b.log"
fi

if on infinity; then
# Section `infinity` (not in the default list; one call of about 9 minutes): ZeRO-Infinity on one
# GPU next to PyTorch FSDP2 with CPUOffloadPolicy, bf16, ZeRO stage 3, activation checkpointing,
# micro-batch ZT_INF_BATCH (4) x ZT_INF_SEQ (1024), ZT_INF_WARMUP (1) + ZT_INF_STEPS (2) steps:
#   disk     zt_bench_disk in ZT_INF_NVME_DIR (default /tmp/zt_nvme): O_DIRECT write and read of
#            ZT_INF_DISK_GB (8) GB in 1 MiB blocks at each queue depth of ZT_INF_DISK_QDS ("8 32");
#            the swap below uses the depth that moved read + write fastest (ZT_INF_AIO_QD sets it)
#   zt-b     (b) offload_optimizer cpu + offload_param cpu on ZT_INF_MODEL (gpt-6.7b): the row the
#            goal compares with FSDP2's (2x its tokens/s)
#   fsdp2    bench/offload_torch.py, the same model, FSDP2 + CPUOffloadPolicy(pin_memory=True)
#   zt-c     (c) offload_optimizer nvme + offload_param ZT_INF_NVME_PARAM (cpu) on the first of
#            ZT_INF_NVME_MODELS whose swap file (12 bytes a parameter) fits the folder's free space
#            and whose steps the disk's measured speed lets finish in time (ZT_INF_WARMUP +
#            ZT_INF_NVME_STEPS (1) steps); the swap's GB/s (the bytes read and written per step
#            over the host step's time) against the disk's. gpt-6.7b needs 80 GB free (93 GB with
#            ZT_INF_NVME_PARAM=nvme): on a 64 GiB disk a smaller model of the list runs
#   zt-a     (a) offload_optimizer cpu on ZT_INF_MODEL
#   zt-d     (d) offload_optimizer cpu + offload_param nvme on ZT_INF_MODEL (the parameter file, 2
#            bytes a parameter, in ZT_INF_NVME_DIR), when it fits the disk and the time left;
#            ZT_INF_WARMUP + ZT_INF_NVME_STEPS steps, as zt-c
#   largest-a, largest-b  the largest of ZT_INF_LARGEST (GPT shapes above 6.7B) that (a) and (b)
#            train: host memory (12 or 14 bytes a parameter) and `zt estimate`'s GPU peak pick the
#            first that should fit, then a trial of 2 steps; a failure tries the next one down.
#            gpt-Nb-shape names gpt-6.7b's block repeated (inf_shape below), NAME=layers,width,heads
#            any GPT; both are written as a config.json that both sides open
# ZT_INF_PLAN picks and orders them (default "disk zt-b fsdp2 zt-c zt-a largest-a largest-b": the
# goal's figures first); each runs under `timeout`, capped by what is left of ZT_INF_BUDGET_S
# (540) and skipped when too little is left. JSON lines in infinity.jsonl (one per run, with its
# outcome, the benchmark's line, the peak resident host memory of its process and what the engine
# logged of its swap files), logs and bench lines in infinity/, the table in infinity.txt.
# ZT_INF_AIO_THREADS (1): the disk benchmark's --threads and the swap's intra_op_parallelism.
# ZT_INF_GPUS=N (1): every run on N GPUs of this machine, ZeroTrain under `zt launch --num_gpus
# N` and FSDP2 under torchrun (tokens/s of all of them; GPU GiB: rank 0's peak; host GiB: the
# largest rank process's peak resident memory, so about 1/N of the host memory used); the host
# and disk checks count the whole state, the GPU check the estimate for N GPUs.
# A dry run without a GPU (ZT_INF_DEVICE=cpu: a CPU engine, where offload_param does nothing and
# the NVMe swap runs; FSDP2 is skipped; ZT_INF_BIN: a CPU build's binaries), tiny models, ~15 s:
#   ZT_GPU_SECTIONS=infinity ZT_INF_DEVICE=cpu ZT_INF_BIN=build/bin ZT_INF_MODEL=gpt2-tiny \
#     ZT_INF_SEQ=64 ZT_INF_BATCH=2 ZT_INF_DISK_GB=0.25 ZT_INF_NVME_MODELS="t2=4,256,4 gpt2-tiny" \
#     ZT_INF_LARGEST="t3=8,512,8 t2=4,256,4" ZT_INF_NVME_DIR=/tmp/zt_nvme OUT=/tmp/inf_dry \
#     bash scripts/gpu_check.sh
inf_out=$out/infinity.jsonl
inf_dir=$out/infinity
: >"$inf_out"
rm -rf "$inf_dir" && mkdir -p "$inf_dir/shapes"
inf_end=$((SECONDS + ${ZT_INF_BUDGET_S:-540}))
inf_bin=${ZT_INF_BIN:-$bin}
inf_dev=${ZT_INF_DEVICE:-cuda}
inf_nvme=${ZT_INF_NVME_DIR:-/tmp/zt_nvme}
inf_model=${ZT_INF_MODEL:-gpt-6.7b}
inf_batch=${ZT_INF_BATCH:-4}
inf_seq=${ZT_INF_SEQ:-1024}
inf_qd=${ZT_INF_AIO_QD:-}
inf_threads=${ZT_INF_AIO_THREADS:-1}
inf_pparam=${ZT_INF_NVME_PARAM:-cpu}
inf_gpus=${ZT_INF_GPUS:-1}
inf_port=29700
# inf_ranks: the launcher prefix of a ZeroTrain run on ZT_INF_GPUS GPUs (empty on one).
inf_ranks() {
  ((inf_gpus > 1)) || return 0
  inf_port=$((inf_port + 1))
  local n=--num_gpus
  [[ $inf_dev != cpu ]] || n=--num_procs  # the dry run: CPU ranks over Gloo
  echo "$inf_bin/zt launch $n $inf_gpus --master_port $inf_port"
}
mkdir -p "$inf_nvme"
echo "== infinity: ZeRO-Infinity on $inf_gpus GPU(s) ($inf_model, micro-batch $inf_batch x $inf_seq, bf16," \
  "stage 3, activation checkpointing) next to FSDP2 + CPUOffloadPolicy; swap folder $inf_nvme"
# Buckets of 5e7 elements, as scripts/gpu_scaling.py runs stage 3: the default 5e8 holds up to
# 2 GB of fp32 gradient per bucket on the GPU, which the largest-model trials need.
inf_zero='"reduce_bucket_size": 50000000'
inf_pin='"pin_memory": true'
# gpt-Nb-shape: gpt-6.7b's block (width 4096, 32 heads of 128), more or fewer of them, for sizes
# between the named ones; NAME=layers,width,heads for any other. Written as a config.json
# (model_type gpt2, no weights) that zt_bench_gpt2, zt estimate and bench/offload_torch.py open.
inf_shape() {
  case $1 in
    gpt-4b-shape) echo "20 4096 32" ;;   # 4.24B
    gpt-7b-shape) echo "36 4096 32" ;;   # 7.46B
    gpt-8b-shape) echo "40 4096 32" ;;   # 8.27B
    gpt-9b-shape) echo "44 4096 32" ;;   # 9.07B
    gpt-10b-shape) echo "48 4096 32" ;;  # 9.88B
    gpt-11b-shape) echo "52 4096 32" ;;  # 10.69B
    *=*) echo "${1#*=}" | tr ',' ' ' ;;
  esac
}
# The --model argument for NAME: the name itself, or the folder its config.json went to.
inf_path() {
  local name=${1%%=*} shape
  shape=$(inf_shape "$1")
  if [[ -z $shape ]]; then
    echo "$1"
    return
  fi
  mkdir -p "$inf_dir/shapes/$name"
  python3 - "$inf_dir/shapes/$name/config.json" $shape <<'PY'
import json, sys
layers, width, heads = map(int, sys.argv[2:5])
json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": layers,
           "n_embd": width, "n_head": heads, "n_positions": 2048, "vocab_size": 50257,
           "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
           "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "initializer_range": 0.02,
           "tie_word_embeddings": True, "bos_token_id": 50256, "eos_token_id": 50256},
          open(sys.argv[1], "w"), indent=1)
PY
  echo "$inf_dir/shapes/$name"
}
# Runs its arguments and writes the peak resident memory of the largest process it waited for
# (the benchmark under `timeout`; page-locked host memory is resident) to the file in $1.
inf_rss_py='import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024))
sys.exit(rc if rc >= 0 else 128 - rc)'
# inf_run NAME MIN_S CAP_S COMMAND...: COMMAND under timeout min(CAP_S, time left); stdout in
# $inf_dir/NAME.json, stderr in NAME.log, peak RSS in NAME.rss. Sets inf_outcome (ok, failed
# (exit N), timed out, or skipped) and inf_wall.
inf_run() {
  local name=$1 min=$2 cap=$3 left=$((inf_end - SECONDS)) t0=$SECONDS rc
  shift 3
  inf_wall=0
  if ((left < min)); then
    inf_outcome="skipped: ${left} s of the budget left, needs ${min}"
    echo "infinity $name: $inf_outcome"
    return
  fi
  ((cap <= left)) || cap=$left
  python3 -c "$inf_rss_py" "$inf_dir/$name.rss" timeout -k 10 "$cap" "$@" \
    >"$inf_dir/$name.json" 2>"$inf_dir/$name.log"
  rc=$?
  inf_wall=$((SECONDS - t0))
  if ((rc == 0)) && grep -q '^{' "$inf_dir/$name.json"; then
    inf_outcome=ok
  elif ((rc == 124 || (rc == 137 && inf_wall >= cap))); then
    inf_outcome="timed out after $inf_wall s"
  elif ((rc == 137)); then
    inf_outcome="killed (SIGKILL; out of host memory?)"
  else
    inf_outcome="failed (exit $rc)"
  fi
  echo "infinity $name: $inf_outcome ($inf_wall s)"
  [[ $inf_outcome == ok ]] || grep -v '^\[zt\].* INFO ' "$inf_dir/$name.log" | tail -3
}
# inf_row NAME CASE MODEL [EXTRA_JSON]: one line of infinity.jsonl for run NAME: its outcome and
# wall time, the benchmark's JSON line ("bench"), peak RSS, and from the engine's log the swap
# files' sizes (MiB per rank: the optimizer's, the parameters') and its last error line.
inf_row() {
  local extra=${4:-}
  [[ -n $extra ]] || extra='{}'
  python3 - "$inf_dir" "$1" "$2" "$3" "$inf_outcome" "$inf_wall" "$extra" >>"$inf_out" <<'PY'
import json, re, sys
d, name, case, model, outcome, wall, extra = sys.argv[1:8]
row = {"case": case, "model": model, "run": name, "outcome": outcome, "wall_s": int(wall),
       **json.loads(extra)}
try:
    row["bench"] = next(json.loads(l) for l in open(f"{d}/{name}.json") if l.startswith("{"))
except Exception:
    pass
try:
    row["host_peak_rss_bytes"] = int(open(f"{d}/{name}.rss").read())
except Exception:
    pass
try:
    log = open(f"{d}/{name}.log", errors="replace").read()
    m = re.search(r"swapped to NVMe: ([0-9.]+) MiB per rank", log)
    p = re.search(r"offload_param: sharded 16-bit chunks at rest in the parameter swap file "
                  r"\(([0-9.]+) MiB\)", log)
    note = re.search(r"optimizer state swapped to \S+ \(([^)]*)\)", log)
    if note:  # the aio backend and settings the swap file got
        row["swap_note"] = note.group(1)
    if m:  # the engine's figure counts both files; the optimizer's is the rest
        param = float(p.group(1)) if p else 0.0
        row["nvme_param_mib"] = param
        row["nvme_optimizer_mib"] = float(m.group(1)) - param
    if outcome != "ok":
        err = [l for l in log.splitlines() if l.strip() and " INFO " not in l]
        row["last_log_line"] = err[-1][-400:] if err else ""
except OSError:
    pass
print(json.dumps(row))
PY
}
# inf_predict NAME MODEL_PATH MODE: whether MODE (a, b or c) should fit this machine, as
# "fits|no PARAMS REASON...": zt estimate's GPU peak for stage 3 + offload_optimizer cpu with
# checkpointing (an upper bound for b and c, which keep 2 bytes a parameter less on the GPU),
# host memory (master and Adam state 12 bytes a parameter, the bf16 chunks 2 more with
# offload_param cpu) within 92% of MemAvailable less 4 GiB (CUDA context, staging, the process),
# and for c the swap file (12 bytes a parameter, 14 with offload_param nvme) within 95% of the
# folder's free space and its steps within the time left at the disk's measured speed.
inf_predict() {
  local name=$1 mp=$2 mode=$3 est=$inf_dir/estimate_$1.json
  local edev=()
  [[ $inf_dev == cpu ]] && edev=(--device cpu)
  if [[ ! -s $est ]]; then
    printf '{"train_micro_batch_size_per_gpu": %s, "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 6e-4}}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, %s}}' \
      "$inf_batch" "$inf_zero" >"$inf_dir/estimate_ds.json"
    timeout 60 "$inf_bin"/zt estimate --model "$mp" --config "$inf_dir/estimate_ds.json" \
      --seq-len "$inf_seq" --gradient-checkpointing --num-gpus "$inf_gpus" "${edev[@]}" --json \
      >"$est" 2>"$est.log"
  fi
  python3 - "$est" "$mode" "$inf_nvme" "$inf_pparam" "$((inf_end - SECONDS))" "$inf_out" \
    "${inf_qd:-8}" "${ZT_INF_WARMUP:-1}" "${ZT_INF_NVME_STEPS:-1}" <<'PY'
import json, os, sys
est, mode, nvme, pparam, left, rows, qd, warm, steps = sys.argv[1:10]
GIB = 2**30
try:
    j = json.load(open(est))
except Exception:
    print("fits 0 no zt estimate: trying")  # let the engine's start-up checks judge
    sys.exit()
n = j["model"]["params"]
z = j["zerotrain"]["with_checkpointing"]
avail = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable:"))
host = {"a": 12, "b": 14, "c": 2 if pparam == "cpu" else 0, "d": 12}[mode] * n
host_cap = 0.92 * avail - 4 * GIB
why = []
if not z["fits"]:
    why.append(f"GPU {z['device_total_bytes'] / GIB:.1f} GiB predicted")
if host > host_cap:
    why.append(f"host {host / GIB:.1f} GiB > {host_cap / GIB:.1f}")
if mode in ("c", "d"):
    # c: the optimizer state (12 bytes a parameter, 14 with the parameters) written once, then
    # read and written every step. d: the 16-bit parameter file (2 bytes a parameter) written
    # once, then each unit's chunk read for its forward, its recomputed forward and its backward
    # (3 x 2 bytes) and written after the step. Both at the disk's speed at this queue depth, plus
    # start-up (drawing the initial values, page-locking: about 10 s a billion parameters on 16
    # cores, 20 s more for the rest).
    st = os.statvfs(nvme)
    free = st.f_bavail * st.f_frsize
    size = (12 + (2 if pparam == "nvme" else 0)) * n if mode == "c" else 2 * n
    read = size if mode == "c" else 3 * size
    if size > 0.95 * free:
        why.append(f"swap {size / 1e9:.0f} GB > 95% of {free / 1e9:.0f} GB free")
    d = [r["bench"] for r in map(json.loads, open(rows)) if r.get("case") == "disk" and "bench" in r]
    d = [b for b in d if str(b["queue_depth"]) == qd] or d
    if d:
        w, r = d[0]["write_gbs"] * 1e9, d[0]["read_gbs"] * 1e9
        t = size / w + (int(warm) + int(steps)) * (read / r + size / w) + 10 * n / 1e9 + 20
        if t > int(left):
            why.append(f"about {t:.0f} s at the disk's speed > {left} s left")
print("fits" if not why else "no", n, "; ".join(why) or f"GPU {z['device_total_bytes'] / GIB:.1f} GiB, host {host / GIB:.1f} GiB")
PY
}
# inf_zt MODE NAME MODEL_PATH MIN_S CAP_S [bench flags]: zt_bench_gpt2 in mode a, b, c or d.
inf_zt() {
  local mode=$1 name=$2 mp=$3 min=$4 cap=$5 zk=$inf_zero off=() dk=""
  shift 5
  case $mode in
    a) off=(--offload-optimizer cpu) ;;
    b) off=(--offload-optimizer cpu)
       zk+=", \"offload_param\": {\"device\": \"cpu\", $inf_pin}" ;;
    c) rm -rf "$inf_nvme/$name" && mkdir -p "$inf_nvme/$name"
       zk+=", \"sub_group_size\": 100000000, \"offload_optimizer\": {\"device\": \"nvme\","
       zk+=" \"nvme_path\": \"$inf_nvme/$name\", $inf_pin, \"pipeline_read\": true,"
       zk+=" \"pipeline_write\": true}, \"offload_param\": {\"device\": \"$inf_pparam\","
       zk+=" \"nvme_path\": \"$inf_nvme/$name\", $inf_pin}"
       dk="\"aio\": {\"block_size\": 1048576, \"queue_depth\": ${inf_qd:-8},"
       dk+=" \"intra_op_parallelism\": $inf_threads, \"single_submit\": false, \"overlap_events\": true}" ;;
    d) rm -rf "$inf_nvme/$name" && mkdir -p "$inf_nvme/$name"
       off=(--offload-optimizer cpu)
       zk+=", \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$inf_nvme/$name\", $inf_pin}"
       dk="\"aio\": {\"block_size\": 1048576, \"queue_depth\": ${inf_qd:-8},"
       dk+=" \"intra_op_parallelism\": $inf_threads, \"single_submit\": false, \"overlap_events\": true}" ;;
  esac
  if [[ -n $dk ]]; then off+=(--ds-keys "$dk"); fi
  # shellcheck disable=SC2046  # the launcher prefix splits into its words
  inf_run "$name" "$min" "$cap" $(inf_ranks) "$inf_bin"/zt_bench_gpt2 --model "$mp" --batch "$inf_batch" \
    --seq "$inf_seq" --dtype bf16 --stage 3 --gradient-checkpointing --device "$inf_dev" \
    --warmup "${ZT_INF_WARMUP:-1}" --steps "${ZT_INF_STEPS:-2}" "${off[@]}" --zero-keys "$zk" "$@"
  # A killed run leaves its swap files behind: they would fill the disk for the next.
  [[ $mode != [cd] ]] || rm -rf "${inf_nvme:?}/$name"
}
# inf_ladder MODE: the largest of ZT_INF_LARGEST (largest first) that MODE trains; candidates
# predicted not to fit are recorded untried; a trial that fails hands on to the next one.
inf_ladder() {
  local mode=$1 m mp name verdict n why found=""
  for m in ${ZT_INF_LARGEST:-gpt-13b gpt-11b-shape gpt-10b-shape gpt-9b-shape gpt-8b-shape gpt-7b-shape}; do
    name=${m%%=*}
    mp=$(inf_path "$m")
    read -r verdict n why <<<"$(inf_predict "$name" "$mp" "$mode")"
    if [[ $verdict != fits ]]; then
      inf_outcome="not tried: predicted not to fit ($why)" inf_wall=0
    else
      echo "infinity largest-$mode $name ($n parameters): $why; trial"
      inf_zt "$mode" "largest_${mode}_$name" "$mp" 90 200 --warmup 1 --steps 1
      [[ $inf_outcome != ok ]] || found=$name
    fi
    inf_row "largest_${mode}_$name" "largest-$mode" "$name" "{\"params\": ${n:-0}}"
    [[ -z $found ]] || return 0
  done
  echo "infinity largest-$mode: none of the candidates trained"
}

inf_mp=$(inf_path "$inf_model")
for inf_job in ${ZT_INF_PLAN:-disk zt-b fsdp2 zt-c zt-a largest-a largest-b}; do
  case $inf_job in
    disk)
      for inf_q in ${ZT_INF_DISK_QDS:-8 32}; do
        inf_run "disk_qd$inf_q" 20 120 "$inf_bin"/zt_bench_disk --dir "$inf_nvme" \
          --size-gb "${ZT_INF_DISK_GB:-8}" --block-size 1048576 \
          --queue-depth "$inf_q" --threads "$inf_threads"
        inf_row "disk_qd$inf_q" disk "-"
      done
      # The queue depth that moved a read and a write of the same bytes fastest.
      [[ -n $inf_qd ]] || inf_qd=$(python3 - "$inf_out" <<'PY'
import json, sys
d = [r["bench"] for r in map(json.loads, open(sys.argv[1])) if r["case"] == "disk" and "bench" in r]
print(min(d, key=lambda b: 1 / b["write_gbs"] + 1 / b["read_gbs"])["queue_depth"] if d else 8)
PY
)
      echo "infinity: the swap uses queue depth ${inf_qd:-8}" ;;
    zt-a | zt-b)
      inf_zt "${inf_job#zt-}" "${inf_job/-/_}" "$inf_mp" 60 200
      inf_row "${inf_job/-/_}" "${inf_job#zt-}" "$inf_model" ;;
    zt-d)
      read -r inf_v inf_n inf_why <<<"$(inf_predict "$inf_model" "$inf_mp" d)"
      if [[ $inf_v == fits ]]; then
        inf_zt d zt_d "$inf_mp" 60 300 --warmup "${ZT_INF_WARMUP:-1}" --steps "${ZT_INF_NVME_STEPS:-1}"
      else
        echo "infinity zt-d: $inf_model not tried ($inf_why)"
        inf_outcome="not tried: predicted not to fit ($inf_why)" inf_wall=0
      fi
      inf_row zt_d d "$inf_model" "{\"params\": ${inf_n:-0}}" ;;
    zt-c)
      inf_c=""
      for inf_m in ${ZT_INF_NVME_MODELS:-gpt-6.7b gpt-4b-shape gpt-2.7b gpt-1.3b}; do
        read -r inf_v inf_n inf_why <<<"$(inf_predict "${inf_m%%=*}" "$(inf_path "$inf_m")" c)"
        if [[ $inf_v == fits ]]; then inf_c=$inf_m; break; fi
        echo "infinity zt-c: ${inf_m%%=*} not tried ($inf_why)"
        inf_outcome="not tried: predicted not to fit ($inf_why)" inf_wall=0
        inf_row "zt_c_${inf_m%%=*}" c "${inf_m%%=*}" "{\"params\": ${inf_n:-0}}"
      done
      if [[ -n $inf_c ]]; then
        inf_zt c "zt_c_${inf_c%%=*}" "$(inf_path "$inf_c")" 60 300 \
          --warmup "${ZT_INF_WARMUP:-1}" --steps "${ZT_INF_NVME_STEPS:-1}"
        inf_row "zt_c_${inf_c%%=*}" c "${inf_c%%=*}" \
          "{\"params\": ${inf_n:-0}, \"aio_queue_depth\": ${inf_qd:-8}, \"aio_threads\": $inf_threads, \"offload_param\": \"$inf_pparam\"}"
      fi ;;
    fsdp2)
      if [[ $inf_dev == cpu ]]; then
        echo "infinity fsdp2: skipped on a CPU run"
        continue
      fi
      inf_torch=(python3)
      ((inf_gpus == 1)) ||
        inf_torch=(env LD_LIBRARY_PATH="$torch_ld" python3 -m torch.distributed.run --standalone
                   --nproc_per_node "$inf_gpus")
      inf_run fsdp2 60 "${ZT_INF_FSDP2_CAP_S:-240}" "${inf_torch[@]}" bench/offload_torch.py \
        --model "$inf_mp" --batch "$inf_batch" --seq "$inf_seq" --checkpointing \
        --warmup "${ZT_INF_WARMUP:-1}" --steps "${ZT_INF_STEPS:-2}"
      inf_row fsdp2 fsdp2 "$inf_model" ;;
    largest-a | largest-b) inf_ladder "${inf_job#largest-}" ;;
    *) echo "infinity: unknown job $inf_job (known: disk zt-a zt-b zt-c zt-d fsdp2 largest-a largest-b)" ;;
  esac
done
rm -rf "${inf_nvme:?}"/zt_c_* "${inf_nvme:?}"/largest_c_*
python3 - "$inf_out" "$inf_nvme" "$inf_gpus" <<'PY' | tee "$out/infinity.txt"
# The section's table: the disk, each run, then the goal's two ratios and the largest models.
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
GIB = 2**30
mem = {l.split(":")[0]: int(l.split()[1]) * 1024 for l in open("/proc/meminfo")}
st = os.statvfs(sys.argv[2])
gpus = int(sys.argv[3])
print(f"\nZeRO-Infinity, {gpus} GPU(s): host {mem['MemTotal'] / GIB:.0f} GiB, swap folder {sys.argv[2]} "
      f"{st.f_blocks * st.f_frsize / 1e9:.0f} GB ({st.f_bavail * st.f_frsize / 1e9:.0f} GB free)")
disk = {}
for r in rows:
    if r["case"] != "disk":
        continue
    b = r.get("bench")
    if not b:
        print(f"disk: {r['outcome']}")
        continue
    disk[b["queue_depth"]] = b
    print(f"disk ({b['backend']}, O_DIRECT, {b['bytes'] / 1e9:.1f} GB in {b['block_size'] >> 20} MiB "
          f"blocks, queue depth {b['queue_depth']}, {b['threads']} thread(s)): write "
          f"{b['write_gbs']:.2f} GB/s, read {b['read_gbs']:.2f} GB/s (depth 1: "
          f"{b['write_gbs_qd1']:.2f} / {b['read_gbs_qd1']:.2f})")
labels = {"a": "(a) opt cpu", "b": "(b) opt+param cpu", "c": "(c) opt nvme", "d": "(d) param nvme",
          "fsdp2": "FSDP2 CPUOffload", "largest-a": "(a) largest", "largest-b": "(b) largest"}
print(f"{'case':<19}{'model':<15}{'params':>7}{'tokens/s':>10}{'MFU':>7}{'step ms':>9}"
      f"{'host step':>10}{'GPU GiB':>9}{'host GiB':>9}{'NVMe GB':>9}  outcome")
for r in rows:
    if r["case"] == "disk":
        continue
    b = r.get("bench", {})
    n = b.get("params") or r.get("params") or 0
    host_step = b.get("offload_step_ms_median", b.get("opt_ms_median"))
    cells = (f"{b['tokens_per_s']:>10.0f}{b.get('mfu', 0):>7.3f}{b['step_ms_median']:>9.0f}"
             + (f"{host_step:>10.0f}" if host_step is not None else f"{'-':>10}") +
             f"{b['peak_mem_bytes'] / GIB:>9.1f}{r.get('host_peak_rss_bytes', 0) / GIB:>9.1f}"
             f"{b.get('model_state_bytes_nvme', 0) / 1e9:>9.1f}"
             if b else f"{'-':>10}{'-':>7}{'-':>9}{'-':>10}{'-':>9}{'-':>9}{'-':>9}")
    print(f"{labels.get(r['case'], r['case']):<19}{r['model']:<15}"
          + (f"{n / 1e9:>6.2f}B" if n else f"{'-':>7}") + f"{cells}  "
          f"{r['outcome']}" + (f": {r['last_log_line'][-160:]}" if r.get("last_log_line") else ""))
    if r["case"] == "c" and b and r.get("nvme_optimizer_mib"):
        # Per step the host step reads the whole optimizer swap file and writes it back (and,
        # with offload_param nvme, writes the parameter file); the disk alone would need
        # read/R + written/W seconds at its measured R and W.
        # (the engine logs the files of one rank; every rank swaps as much at once)
        rd = r["nvme_optimizer_mib"] * 2**20 * gpus
        wr = rd + r.get("nvme_param_mib", 0) * 2**20 * gpus * (r.get("offload_param") == "nvme")
        t = b["offload_step_ms_median"] / 1000
        line = (f"    swap: {rd / 1e9:.1f} GB read and {wr / 1e9:.1f} GB written per step in "
                f"{t:.2f} s: {rd / t / 1e9:.2f} GB/s read, {wr / t / 1e9:.2f} GB/s write "
                f"(CPU Adam {b.get('offload_cpu_ms_median', 0) / 1000:.2f} s of it)")
        d = disk.get(r.get("aio_queue_depth"))
        if d:
            eff = (rd / (d["read_gbs"] * 1e9) + wr / (d["write_gbs"] * 1e9)) / t
            r["swap_efficiency"] = eff
            line += (f"; {eff:.0%} of the disk's O_DIRECT speed at queue depth {d['queue_depth']} "
                     "(goal 80%; above 100%: reads and writes overlapped)")
        print(line)
        if r.get("swap_note"):
            print(f"    swap file: {r['swap_note']}")
print("(host step: ZeroTrain's offloaded optimizer step, FSDP2's clipping + AdamW + zero_grad; "
      "host GiB: the peak resident memory of the process, or of the largest rank's on several "
      "GPUs, page-locked included; NVMe GB: one rank's swap files)")
ok = lambda c: next((r for r in rows if r["case"] == c and r["outcome"] == "ok"), None)
zb, fs = ok("b"), ok("fsdp2")
if zb and fs:
    print(f"(b) / FSDP2 CPUOffload on {zb['model']}: {zb['bench']['tokens_per_s'] / fs['bench']['tokens_per_s']:.2f}x "
          f"tokens/s (goal 2x), GPU memory {zb['bench']['peak_mem_bytes'] / fs['bench']['peak_mem_bytes']:.2f}x")
for mode in "abc":
    trained = [r for r in rows if r["case"] in (mode, f"largest-{mode}") and r["outcome"] == "ok"]
    if trained:
        best = max(trained, key=lambda r: r["bench"]["params"])
        print(f"largest trained with {labels[mode]}: {best['model']} "
              f"({best['bench']['params'] / 1e9:.2f}B, {best['bench']['tokens_per_s']:.0f} tokens/s)")
PY
fi

if on export; then
echo "== export: fixtures fine-tuned 5 steps on the GPU, saved, export-hf, transformers' logits"
ex=$out/export
rm -rf "$ex" && mkdir -p "$ex"
export_rc=0
python3 - "$ex/tokens.bin" <<'PY'
import struct, sys, random
random.seed(1)
toks = [random.randrange(0, 250) for _ in range(20000)]
with open(sys.argv[1], "wb") as f:  # llm.c header: magic, version 1 (uint16 tokens), count
    f.write(struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
for fxn in llama qwen2 opt gpt2; do
  python3 - tests/fixtures/hf/$fxn/expected.safetensors "$ex/$fxn.jsonl" <<'PY'
import json, sys
from safetensors.numpy import load_file
ids = load_file(sys.argv[1])["input_ids"]
with open(sys.argv[2], "w") as f:
    for row in ids.tolist():
        f.write(json.dumps({"input_ids": row}) + "\n")
PY
  if "$bin"/zt train --config examples/ds_config_tiny.json --model tests/fixtures/hf/$fxn \
       --device cuda --data "$ex/tokens.bin" --seq-len 12 --steps 5 --sample-tokens 0 \
       --save "$ex/ckpt_$fxn" >"$ex/train_$fxn.log" 2>&1 &&
     "$bin"/zt ckpt export-hf "$ex/ckpt_$fxn" "$ex/hf_$fxn" >"$ex/export_$fxn.log" 2>&1 &&
     "$bin"/zt eval --model "$ex/hf_$fxn" --data "$ex/$fxn.jsonl" --device cpu \
       --logits-out "$ex/logits_$fxn.safetensors" >"$ex/eval_$fxn.log" 2>&1 &&
     python3 tests/fixtures/hf/check_export.py "$ex/hf_$fxn" "$ex/logits_$fxn.safetensors" \
       --task causal >"$ex/check_$fxn.log" 2>&1; then
    echo "$fxn: $(tail -1 "$ex/check_$fxn.log")"
  else
    export_rc=1
    echo "$fxn: FAILED"; tail -3 "$ex"/*_"$fxn".log
  fi
done
fi

if on tasks; then
echo "== tasks: sft, reward and mlm, first-step loss on the GPU (f32) against the CPU, then 40 steps"
tt=$(mktemp -d)
python3 - "$tt" <<'PY'
import array, json, random, struct, sys
d = sys.argv[1]
rng = random.Random(0)
w = lambda: "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
with open(f"{d}/sft.jsonl", "w") as f:
    for _ in range(2000):
        x = w(); f.write(json.dumps({"prompt": f"copy {x} =", "response": f" {x}"}) + "\n")
with open(f"{d}/pairs.jsonl", "w") as f:
    for _ in range(2000):
        x = w(); f.write(json.dumps({"prompt": "say:", "chosen": f" {x}", "rejected": f" {x.upper()}"}) + "\n")
toks = []
while len(toks) < 100000:
    toks += [rng.randint(10, 249)] * rng.randint(4, 8)
with open(f"{d}/mlm.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(array.array("H", toks).tobytes())
PY
printf '{"train_micro_batch_size_per_gpu": 16, "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.0}}}' >"$tt/ds.json"
tasks_rc=0
for task in sft reward mlm; do
  case $task in
    sft) args=(--task sft --model llama-tiny --data "$tt/sft.jsonl") ;;
    reward) args=(--task reward --model llama-tiny --data "$tt/pairs.jsonl") ;;
    mlm) args=(--task mlm --model tests/fixtures/hf/bert_mlm --mask-id 4 --data "$tt/mlm.bin") ;;
  esac
  for dev in cpu cuda; do
    "$bin"/zt train "${args[@]}" --config "$tt/ds.json" --seq-len 24 --steps 1 --device $dev \
      --sample-tokens 0 --metrics-out "$tt/${task}_$dev.jsonl" >/dev/null 2>"$tt/${task}_$dev.err" ||
      { echo "$task $dev: FAILED"; tail -3 "$tt/${task}_$dev.err"; tasks_rc=1; }
  done
  "$bin"/zt train "${args[@]}" --config "$tt/ds.json" --seq-len 24 --steps 40 --device cuda \
    --sample-tokens 0 --metrics-out "$tt/${task}_long.jsonl" >/dev/null 2>"$tt/${task}_long.err" ||
    { echo "$task 40 steps: FAILED"; tail -3 "$tt/${task}_long.err"; tasks_rc=1; }
  python3 - "$tt" "$task" <<'PY' | tee -a "$out/tasks.txt" || tasks_rc=1
import json, sys
d, t = sys.argv[1], sys.argv[2]
loss = lambda f: [json.loads(l)["loss"] for l in open(f"{d}/{f}") if '"loss"' in l]
c, g, long = loss(f"{t}_cpu.jsonl")[0], loss(f"{t}_cuda.jsonl")[0], loss(f"{t}_long.jsonl")
ok = abs(c - g) <= 1e-4 * max(1.0, abs(c)) and long[-1] < long[0]
print(f"{t}: first-step loss cpu {c:.6f} cuda {g:.6f}; 40 GPU steps {long[0]:.4f} -> {long[-1]:.4f}: {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
done
rm -rf "$tt"
fi

if on lora; then
echo "== lora: LoRA fine-tuning on the GPU against the CPU, activation checkpointing, and peft"
# (1) first-step loss with adapters and dropout, CPU vs GPU (f32: the dropout masks are the same
# function of the seed on both); (2) 30 bf16 GPU steps with and without --gradient-checkpointing
# (the same losses); (3) a LoRA run of the llama fixture saved, exported merged and as a PEFT
# adapter: peft loads the adapter onto the fixture model, and its loss on the fixture's SFT rows
# equals transformers' on the merged export and zt eval's, its logits the merged model's.
lt=$(mktemp -d)
fx=tests/fixtures/hf/llama
printf '{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}}, "zero_optimization": {"stage": 2}}' >"$lt/f32.json"
printf '{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}, "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}}' >"$lt/bf16.json"
lora=(--lora-dim 8 --lora-alpha 16 --only-optimize-lora)
common=(train --task sft --model "$fx" --data "$fx/sft.jsonl" --seq-len 16 --sample-tokens 0 --order sequential)
lora_rc=0
for dev in cpu cuda; do
  "$bin"/zt "${common[@]}" "${lora[@]}" --lora-dropout 0.1 --config "$lt/f32.json" --steps 1 \
    --device $dev --metrics-out "$lt/first_$dev.jsonl" >/dev/null 2>"$lt/first_$dev.err" ||
    { echo "lora first step $dev: FAILED"; tail -3 "$lt/first_$dev.err"; lora_rc=1; }
done
for gc in plain ckpt; do
  extra=(); [ $gc = ckpt ] && extra=(--gradient-checkpointing)
  "$bin"/zt "${common[@]}" "${lora[@]}" "${extra[@]}" --config "$lt/bf16.json" --steps 30 \
    --device cuda --metrics-out "$lt/gc_$gc.jsonl" >/dev/null 2>"$lt/gc_$gc.err" ||
    { echo "lora bf16 $gc: FAILED"; tail -3 "$lt/gc_$gc.err"; lora_rc=1; }
done
"$bin"/zt "${common[@]}" "${lora[@]}" --config "$lt/f32.json" --steps 20 --device cuda \
  --save "$lt/ck" >/dev/null 2>"$lt/run.err" || { echo "lora run: FAILED"; tail -3 "$lt/run.err"; lora_rc=1; }
"$bin"/zt ckpt export-hf "$lt/ck" "$lt/merged" >/dev/null 2>&1 || { echo "merged export FAILED"; lora_rc=1; }
"$bin"/zt ckpt export-hf "$lt/ck" "$lt/adapter" --adapter-only >/dev/null 2>&1 || { echo "adapter export FAILED"; lora_rc=1; }
"$bin"/zt eval --task sft --model "$lt/merged" --data "$fx/sft.jsonl" --device cpu \
  --metrics-out "$lt/zt_eval.json" >/dev/null 2>&1 || { echo "zt eval FAILED"; lora_rc=1; }
python3 - "$lt" "$fx" <<'PY' | tee -a "$out/lora.txt" || lora_rc=1
import json, sys
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
d, fx = sys.argv[1], sys.argv[2]
loss = lambda f: [json.loads(l)["loss"] for l in open(f"{d}/{f}") if '"loss"' in l]
ok = True
c, g = loss("first_cpu.jsonl")[0], loss("first_cuda.jsonl")[0]
good = abs(c - g) <= 1e-4 * max(1.0, abs(c)); ok &= good
print(f"lora first-step loss (dropout 0.1) cpu {c:.6f} cuda {g:.6f}: {'ok' if good else 'FAIL'}")
a, b = loss("gc_plain.jsonl"), loss("gc_ckpt.jsonl")
worst = max(abs(x - y) for x, y in zip(a, b))
good = len(a) == len(b) == 30 and worst <= 1e-3 * max(1.0, abs(a[0])) and a[-1] < a[0]; ok &= good
print(f"bf16 ZeRO-3 LoRA, 30 steps with/without activation checkpointing: {a[0]:.4f} -> {a[-1]:.4f}, "
      f"worst difference {worst:.2e}: {'ok' if good else 'FAIL'}")
rows = [json.loads(l) for l in open(f"{fx}/sft.jsonl")]
base = AutoModelForCausalLM.from_pretrained(fx, dtype=torch.float32)
peft_model = PeftModel.from_pretrained(base, f"{d}/adapter").eval()
merged = AutoModelForCausalLM.from_pretrained(f"{d}/merged", dtype=torch.float32).eval()
def file_loss(m):
    tot, n, logits = 0.0, 0, []
    for r in rows:
        ids = torch.tensor([r["input_ids"]]); lab = torch.tensor([r["labels"]])
        with torch.no_grad():
            lg = m(input_ids=ids).logits
        logits.append(lg)
        sl, tl = lg[0, :-1], lab[0, 1:]
        keep = tl != -100
        tot += torch.nn.functional.cross_entropy(sl[keep], tl[keep], reduction="sum").item()
        n += int(keep.sum())
    return tot / n, logits
pl, plog = file_loss(peft_model)
ml, mlog = file_loss(merged)
zl = json.load(open(f"{d}/zt_eval.json"))["loss"]
dlog = max((x - y).abs().max().item() for x, y in zip(plog, mlog))
good = dlog <= 1e-4 and abs(pl - ml) <= 1e-5 and abs(zl - pl) <= 1e-4 * max(1.0, pl); ok &= good
print(f"peft adapter on the fixture: loss {pl:.6f}; transformers on the merged export {ml:.6f}; "
      f"zt eval {zl:.6f}; logits differ by {dlog:.2e}: {'ok' if good else 'FAIL'}")
sd = peft_model.merge_and_unload().state_dict()
from safetensors.torch import load_file
mw = load_file(f"{d}/merged/model.safetensors")
dw = max((sd[k].float() - v.float()).abs().max().item() for k, v in mw.items() if k in sd)
good = dw <= 1e-5; ok &= good
print(f"peft's merge_and_unload weights vs the merged export: max difference {dw:.2e}: {'ok' if good else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
rm -rf "$lt"
fi

if on lora_bench; then
# Section `lora_bench` (not in the default list): fine-tuning on one GPU next to transformers,
# eager and torch.compile (bench/llama_torch.py), bf16, sequence 2048, 6 timed steps after 2
# warm-up: (1) LoRA on llama-8b, rank 16, alpha 32, on every linear module of the blocks, the base
# frozen (both sides keep bf16 base weights and fp32 adapters with their AdamW state), batch 1 and
# 2, with and without activation checkpointing; (2) the cost of activation checkpointing in full
# fine-tuning of llama-1b, batch 4. Runs go in order of interest while ZT_LB_BUDGET_S (default
# 360) lasts: each under `timeout` (its cap or the time left), skipped when less than its minimum
# is left. JSON lines in lora_bench.jsonl, logs in lb_*.log, the table in lora_bench.txt.
lbo=$out/lora_bench.jsonl
: >"$lbo"
lb_end=$((SECONDS + ${ZT_LB_BUDGET_S:-360}))
lb_steps=(--seq 2048 --steps "${ZT_LB_STEPS:-6}" --warmup "${ZT_LB_WARMUP:-2}")
# lb_run MIN_S CAP_S LOG COMMAND...: COMMAND under timeout min(CAP_S, time left), stdout to $lbo.
lb_run() {
  local min=$1 cap=$2 log=$3 left=$((lb_end - SECONDS)) rc
  shift 3
  if [ "$left" -lt "$min" ]; then echo "lora_bench: ${left}s left, skipped: $*"; return; fi
  [ "$cap" -le "$left" ] || cap=$left
  timeout "$cap" "$@" >>"$lbo" 2>"$log"
  rc=$?
  [ "$rc" = 0 ] || { echo "lora_bench: exit $rc$([ "$rc" = 124 ] && echo ' (timed out)') of: $*"; tail -3 "$log"; }
}
echo "== lora_bench: llama-8b LoRA r16 (batch 1, 2) and llama-1b full (batch 4), seq 2048, bf16," \
  "with and without activation checkpointing: ZeroTrain, transformers eager, torch.compile"
# impl model batch lora-rank checkpointing
lb_plan=("zt llama-8b 1 16 1" "eager llama-8b 1 16 1" "compile llama-8b 1 16 1"
  "zt llama-8b 2 16 0" "eager llama-8b 2 16 0"
  "zt llama-1b 4 0 1" "eager llama-1b 4 0 1" "zt llama-1b 4 0 0" "eager llama-1b 4 0 0"
  "zt llama-8b 1 16 0" "eager llama-8b 1 16 0" "zt llama-8b 2 16 1" "eager llama-8b 2 16 1"
  "compile llama-1b 4 0 1" "compile llama-1b 4 0 0" "compile llama-8b 2 16 0")
# ZT_LB_PLAN="zt llama-8b 1 16 0;eager llama-8b 1 16 0": another list of runs, ';'-separated.
if [ -n "${ZT_LB_PLAN:-}" ]; then IFS=';' read -r -a lb_plan <<<"$ZT_LB_PLAN"; fi
for lb_p in "${lb_plan[@]}"; do
  read -r lb_i lb_m lb_b lb_r lb_k <<<"$lb_p"
  lb_tag=${lb_m}_b${lb_b}_r${lb_r}_ckpt${lb_k}
  lb_zt=(--model "$lb_m" --batch "$lb_b" --dtype bf16 "${lb_steps[@]}")
  lb_pt=(--model "$lb_m" --batch "$lb_b" "${lb_steps[@]}")
  if [ "$lb_r" != 0 ]; then
    lb_zt+=(--lora-dim "$lb_r" --lora-alpha $((2 * lb_r)) --only-optimize-lora)
    lb_pt+=(--lora "$lb_r")
  fi
  [ "$lb_k" = 0 ] || { lb_zt+=(--gradient-checkpointing); lb_pt+=(--checkpointing); }
  case $lb_i in
    zt) lb_run 30 150 "$out/lb_zt_$lb_tag.log" "$bin"/zt_bench_gpt2 "${lb_zt[@]}" ;;
    eager) lb_run 30 150 "$out/lb_eager_$lb_tag.log" python3 bench/llama_torch.py "${lb_pt[@]}" ;;
    compile)
      [ "${ZT_BENCH_COMPILE:-1}" = "1" ] || continue
      lb_min=60; [ "$lb_m" = llama-1b ] || lb_min=100
      lb_run "$lb_min" 300 "$out/lb_compile_$lb_tag.log" python3 bench/llama_torch.py "${lb_pt[@]}" --compile ;;
  esac
done
python3 - "$lbo" <<'PY' | tee "$out/lora_bench.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.lstrip().startswith("{")]
key = lambda r: (r["model"], r.get("lora_dim", 0), bool(r.get("checkpointing")), r["batch"])
find = lambda k, impl: next((r for r in rows if key(r) == k and r["impl"] == impl), None)
order = {"zerotrain": 0, "torch-eager": 1, "torch.compile": 2}
print(f"\n{'impl':<14}{'model':<10}{'lora':>5}{'ckpt':>5}{'batch':>6}{'tokens/s':>10}{'MFU':>7}"
      f"{'peak GiB':>10}{'zt/eager':>10}{'zt/compile':>12}{'mem zt/eager':>14}")
for k in sorted(dict.fromkeys(key(r) for r in rows), key=lambda k: (k[0] != "llama-8b", k)):
    z = find(k, "zerotrain")
    for r in sorted((r for r in rows if key(r) == k), key=lambda r: order.get(r["impl"], 3)):
        cells = []
        for peer, field in (("torch-eager", "tokens_per_s"), ("torch.compile", "tokens_per_s"),
                            ("torch-eager", "peak_mem_bytes")):
            t = find(k, peer)
            cells.append(f"{z[field] / t[field]:.2f}x" if r is z and t else "-")
        print(f"{r['impl']:<14}{r['model']:<10}{k[1] or 'full':>5}{'yes' if k[2] else 'no':>5}{r['batch']:>6}"
              f"{r['tokens_per_s']:>10.0f}{r['mfu']:>7.3f}{r['peak_mem_bytes'] / 2**30:>10.2f}"
              f"{cells[0]:>10}{cells[1]:>12}{cells[2]:>14}")
print("(zt/eager, zt/compile: ZeroTrain's tokens/s over the peer's, same model, LoRA rank, "
      "checkpointing and batch; mem: ZeroTrain's peak over eager's; MFU counts 4 FLOPs per frozen "
      "parameter, 6 per trained one)")
print("activation checkpointing: tokens/s with it over without, peak GiB without -> with")
for impl in order:
    for m, lr, b in dict.fromkeys((k[0], k[1], k[3]) for k in map(key, rows)):
        on, off = find((m, lr, True, b), impl), find((m, lr, False, b), impl)
        if on and off:
            print(f"  {impl:<14}{m} {f'LoRA r{lr}' if lr else 'full'}, batch {b}: {on['tokens_per_s'] / off['tokens_per_s']:.3f}x, "
                  f"{off['peak_mem_bytes'] / 2**30:.1f} -> {on['peak_mem_bytes'] / 2**30:.1f} GiB")
PY
fi

if on speed; then
# Section `speed` (not in the default list): one-GPU training speed, ZeroTrain's variants next to
# the peers in one call. ZT_SPEED_PLAN is a ';'-separated list of runs "IMPL MODEL BATCH SEQ
# [ARG...]": IMPL zt (zt_bench_gpt2; ARGs are its flags, or VAR=VALUE set in its environment,
# e.g. ZT_GEMM_AUTOTUNE=1 --keep-activations --cuda-graph), eager or compile (bench/gpt2_torch.py
# for gpt2 and gpt-*, bench/llama_torch.py for llama-*). ZT_SPEED_STEPS (default 20) timed steps
# after 5 warm-up; ZT_SPEED_TRACE=N traces N more steps of each zt run kernel by kernel (the table
# in its log). JSON lines in speed.jsonl, logs in speed_*.log, the table in speed.txt.
so=$out/speed.jsonl
: >"$so"
sp_plan=${ZT_SPEED_PLAN:-"zt gpt2 16 1024;zt gpt2 16 1024 ZT_GEMM_AUTOTUNE=1;compile gpt2 16 1024"}
IFS=';' read -r -a sp_runs <<<"$sp_plan"
sp_n=0
for sp_r in "${sp_runs[@]}"; do
  read -r -a sp_w <<<"$sp_r"
  sp_i=${sp_w[0]} sp_m=${sp_w[1]} sp_b=${sp_w[2]} sp_s=${sp_w[3]}
  sp_n=$((sp_n + 1))
  sp_env=() sp_args=()
  for sp_a in "${sp_w[@]:4}"; do
    if [[ "$sp_a" == *=* && "$sp_a" != --* ]]; then sp_env+=("$sp_a"); else sp_args+=("$sp_a"); fi
  done
  sp_log=$out/speed_${sp_n}_${sp_i}_${sp_m}.log
  echo "== speed $sp_n: $sp_r"
  case $sp_i in
    zt)
      sp_t=()
      [ -n "${ZT_SPEED_TRACE:-}" ] && sp_t=(--kernel-trace "$ZT_SPEED_TRACE")
      env "${sp_env[@]}" "$bin"/zt_bench_gpt2 --model "$sp_m" --batch "$sp_b" --seq "$sp_s" \
        --dtype bf16 --steps "${ZT_SPEED_STEPS:-20}" --warmup 5 "${sp_t[@]}" "${sp_args[@]}" \
        2>"$sp_log" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); r['variant'] = sys.argv[1]; print(json.dumps(r))" "${sp_w[*]:4}" >>"$so" ||
        tail -5 "$sp_log" ;;
    eager | compile)
      sp_py=bench/gpt2_torch.py
      [[ "$sp_m" == llama* ]] && sp_py=bench/llama_torch.py
      sp_c=()
      [ "$sp_i" = compile ] && sp_c=(--compile)
      python3 "$sp_py" --model "$sp_m" --batch "$sp_b" --seq "$sp_s" --steps "${ZT_SPEED_STEPS:-20}" \
        "${sp_c[@]}" "${sp_args[@]}" >>"$so" 2>"$sp_log" || tail -5 "$sp_log" ;;
  esac
done
python3 - "$so" <<'PY' | tee "$out/speed.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.lstrip().startswith("{")]
key = lambda r: (r["model"], r["batch"], r["seq"])
comp = {key(r): r for r in rows if r["impl"] == "torch.compile"}
print(f"\n{'impl':<14}{'model':<10}{'batch':>6}{'seq':>6}  {'variant':<42}{'tokens/s':>10}{'MFU':>7}"
      f"{'step ms':>9}{'peak GiB':>10}{'÷ compile':>11}")
for r in rows:
    c = comp.get(key(r))
    ratio = f"{r['tokens_per_s'] / c['tokens_per_s']:.3f}" if c and r is not c else "-"
    print(f"{r['impl']:<14}{r['model']:<10}{r['batch']:>6}{r['seq']:>6}  {r.get('variant', '')[:41]:<42}"
          f"{r['tokens_per_s']:>10.0f}{r.get('mfu', 0):>7.3f}{r['step_ms_median']:>9.2f}"
          f"{r['peak_mem_bytes'] / 2**30:>10.2f}{ratio:>11}")
PY
fi

if on monitors; then
echo "== monitors: gpt2 bf16 on the GPU with tensorboard, csv, wall_clock_breakdown and flops_profiler"
# TensorBoard's own reader (EventAccumulator) loads the event file and finds the run's values;
# the breakdown's forward + backward + step fit inside each step's wall time; the profiler's
# report comes at profile_step with the unit latencies inside the forward it times.
mt=$(mktemp -d)
cat >"$mt/ds.json" <<EOF2
{"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": true}, "wall_clock_breakdown": true,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
 "tensorboard": {"enabled": true, "output_path": "$mt/tb", "job_name": "gpt2"},
 "csv_monitor": {"enabled": true, "output_path": "$mt/csv", "job_name": "gpt2"},
 "flops_profiler": {"enabled": true, "profile_step": 10, "output_file": "$mt/profile.txt"}}
EOF2
monitors_rc=0
"$bin"/zt train --model gpt2 --config "$mt/ds.json" --steps 20 --seq-len 1024 --device cuda \
  --sample-tokens 0 --metrics-out "$mt/m.jsonl" >/dev/null 2>"$mt/err" ||
  { echo "monitors run FAILED"; tail -3 "$mt/err"; monitors_rc=1; }
python3 - "$mt" <<'PY' | tee -a "$out/monitors.txt" || monitors_rc=1
import glob, json, re, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
d = sys.argv[1]
recs = [json.loads(l) for l in open(f"{d}/m.jsonl") if '"loss"' in l]
ev = EventAccumulator(glob.glob(f"{d}/tb/gpt2/events.out.tfevents.*")[0]); ev.Reload()
tags = ev.Tags()["scalars"]
loss = [(e.step, e.value) for e in ev.Scalars("Train/Samples/train_loss")]
want = [(r["samples"], r["loss"]) for r in recs]
same = len(loss) == len(want) and all(a[0] == b[0] and abs(a[1] - b[1]) <= 1e-5 * abs(b[1]) for a, b in zip(loss, want))
has = all(f"Train/Samples/elapsed_time_ms_{t}" in tags for t in ("forward", "backward", "backward_inner", "backward_allreduce", "step"))
print(f"tensorboard's EventAccumulator: {len(tags)} scalar tags, train_loss {len(loss)} points equal to the metrics file: {'ok' if same and has else 'FAIL'}")
inside = []
for r in recs[2:]:
    parts = r["elapsed_time_ms_forward"] + r["elapsed_time_ms_backward"] + r["elapsed_time_ms_step"]
    wall = 8 * 1024 / r["tokens_per_s"] * 1000
    inside.append(parts / wall)
ok_wc = all(0.5 <= x <= 1.01 for x in inside)
print(f"wall_clock_breakdown: fwd+bwd+step over the step's wall time {min(inside):.3f}..{max(inside):.3f}: {'ok' if ok_wc else 'FAIL'}")
p = open(f"{d}/profile.txt").read()
fl = re.search(r"fwd flops per GPU:\s+([0-9.]+ \w)", p).group(1)
tf = re.search(r"fwd\+bwd FLOPS per GPU[^:]*:\s+([0-9.]+ \w)FLOPS", p).group(1)
fwd = re.search(r"fwd latency:\s+([0-9.]+) ms", p).group(1)
units = re.search(r"fwd latency - \{'gpt2': '([0-9.]+) ms'\}", p).group(1)
ok_p = "Profile Summary at step 10" in p and float(units) <= float(fwd) * 1.01
print(f"flops_profiler at step 10: fwd flops {fl}, fwd+bwd {tf}FLOPS, units {units} ms of fwd {fwd} ms: {'ok' if ok_p else 'FAIL'}")
sys.exit(0 if same and has and ok_wc and ok_p else 1)
PY
cp "$mt/profile.txt" "$out/flops_profile.txt" 2>/dev/null
rm -rf "$mt"
fi

if on tune; then
echo "== tune: the autotuner on the GPU: gpt2 at seq 1024, stages 0 and 3, two micro-batch sizes"
# The estimator prunes the micro-batches that would not fit; every trial left must run.
td=$(mktemp -d)
cat >"$td/ds.json" <<EOF2
{"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
 "zero_optimization": {"stage": [0, 3]},
 "autotuning": {"enabled": true, "num_tuning_micro_batch_sizes": 2, "start_profile_step": 3,
                "end_profile_step": 5, "results_dir": "$td/results", "exps_dir": "$td/exps"}}
EOF2
timeout 280 "$bin"/zt tune --num_gpus 1 --trial-timeout 90 -- "$bin"/zt train --model gpt2 \
  --config "$td/ds.json" --seq-len 1024 --steps 100 --sample-tokens 0 >"$td/tune.log" 2>&1 ||
  { echo "zt tune FAILED"; tail -5 "$td/tune.log"; }
cp "$td/results/summary.txt" "$out/tune_summary.txt" 2>/dev/null && cat "$out/tune_summary.txt"
rm -rf "$td"
fi

if on tokenize; then
tk=${ZT_TOK_DIR:-/tmp/zt_tok_bench}
nt=$(nproc)
mkdir -p "$tk"
echo "== tokenize: tokenizer.json encoding, 1 and $nt threads: ZeroTrain, tokenizers, tiktoken (CPU)"
# The text: /usr/share/common-licenses and the Python standard library's sources, repeated to
# ZT_TOK_MB MB (the recipe of tests/fixtures/tokenizers/make_fixtures.py).
[ -s "$tk/text.txt" ] ||
  python3 tests/fixtures/tokenizers/make_fixtures.py --corpus "$tk/text.txt" --mb "${ZT_TOK_MB:-50}" ||
  echo "tokenize: could not write the text"
# A GPT-2-sized byte-level BPE (GPT-2's pipeline, 50257 tokens) trained on that text.
if [ ! -s "$tk/gpt2_50k/tokenizer.json" ]; then
  python3 bench/tokenizer_train_gpt2.py "$tk/text.txt" "$tk/gpt2_50k" >"$out/tokenize_train.log" 2>&1 || tail -5 "$out/tokenize_train.log"
fi
# Every peer variant on the 50k tokenizer, only the fastest ones on the 3k fixture: the
# section takes about 7 minutes on the 16-core H100 machine (one-core `tokenizers` runs near
# 2 MB/s there, and each variant makes a cold and a warm pass over the whole text).
for t in "$tk/gpt2_50k" tests/fixtures/tokenizers/gpt2; do
  [ -s "$t/tokenizer.json" ] || continue
  name=$(basename "$t")
  variants=""
  [ "$name" = gpt2_50k ] || variants=${ZT_TOK_FIXTURE_VARIANTS:-tokenizers-encode,tokenizers-batch-fast@N,tiktoken}
  "$bin"/zt_bench_tokenizer --tokenizer "$t" --text "$tk/text.txt" --threads "$nt" \
    >>"$out/tokenize.jsonl" 2>"$out/tokenize_zt_$name.log" || tail -5 "$out/tokenize_zt_$name.log"
  python3 bench/tokenize_peer.py --tokenizer "$t" --text "$tk/text.txt" --threads "$nt" \
    ${variants:+--variants "$variants"} \
    >>"$out/tokenize.jsonl" 2>"$out/tokenize_peer_$name.log" || tail -5 "$out/tokenize_peer_$name.log"
done
fi

if on vision; then
# AlexNet on CIFAR-10's binary format (zt train --model alexnet): the tutorial network's fixture
# computed by PyTorch (tests/fixtures/vision; copied back under $out), f32 SGD training on the
# GPU against the CPU (cuDNN's convolutions vs the CPU reference: every step's loss within 1e-4;
# SGD is linear in the gradients, where Adam's first steps magnify tiny ones), bf16 training whose
# loss must fall, and its images/s next to PyTorch's eager loop with
# the same model, batch and precision (bench/alexnet_torch.py).
echo "== vision: AlexNet (CIFAR-10 format): fixture, GPU vs CPU, bf16 training next to PyTorch"
vd=${ZT_VISION_DIR:-/tmp/zt_vision}
python3 tests/fixtures/vision/make_alexnet_fixture.py "$out/alexnet_fixture" >"$out/vision_fixture.log" 2>&1 ||
  tail -5 "$out/vision_fixture.log"
python3 bench/alexnet_torch.py --make-data "$vd" --images "${ZT_VISION_IMAGES:-20000}"
vb=${ZT_VISION_BATCH:-256}
cat >"$vd/f32.json" <<JSON
{"train_batch_size": 32, "gradient_clipping": 1.0, "zero_allow_untested_optimizer": true,
 "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9}}}
JSON
cat >"$vd/bf16.json" <<JSON
{"train_batch_size": $vb, "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}}}
JSON
for d in cpu cuda; do
  "$bin"/zt train --config "$vd/f32.json" --model alexnet --data "$vd" --device $d --steps 6 \
    --order sequential --metrics-out "$out/vision_f32_$d.jsonl" >"$out/vision_f32_$d.log" 2>&1 ||
    tail -5 "$out/vision_f32_$d.log"
done
"$bin"/zt train --config "$vd/bf16.json" --model alexnet --data "$vd" --device cuda \
  --steps "${ZT_VISION_STEPS:-70}" --eval-data "$vd/test_batch.bin" --eval-interval 1000 \
  --metrics-out "$out/vision_bf16.jsonl" >"$out/vision_bf16.log" 2>&1 || tail -5 "$out/vision_bf16.log"
python3 bench/alexnet_torch.py --data "$vd" --batch "$vb" --steps 60 \
  >"$out/vision_torch.jsonl" 2>"$out/vision_torch.log" || tail -5 "$out/vision_torch.log"
python3 - "$out" "$vb" <<'VPY' | tee "$out/vision.txt"
import json, statistics, sys
out, vb = sys.argv[1], int(sys.argv[2])
def recs(name):
    try:
        return [json.loads(l) for l in open(f"{out}/{name}") if l.strip()]
    except OSError:
        return []
cpu = [r for r in recs("vision_f32_cpu.jsonl") if "loss" in r]
gpu = [r for r in recs("vision_f32_cuda.jsonl") if "loss" in r]
if cpu and len(cpu) == len(gpu):
    worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(cpu, gpu))
    print(f"vision: alexnet f32 GPU vs CPU, {len(gpu)} steps: worst loss rel diff {worst:.2e} "
          f"(tol 1e-4) {'ok' if worst <= 1e-4 else 'FAIL'}")
else:
    print(f"vision: alexnet f32 GPU vs CPU: runs missing ({len(cpu)} / {len(gpu)} steps) FAIL")
bf = recs("vision_bf16.jsonl")
tr = [r for r in bf if "loss" in r]
ev = [r for r in bf if "eval_accuracy" in r]
if tr:
    falls = tr[-1]["loss"] < tr[0]["loss"] - 0.3
    acc = f", test accuracy {ev[-1]['eval_accuracy']:.3f}" if ev else ""
    print(f"vision: alexnet bf16 batch {vb}, {len(tr)} steps: loss {tr[0]['loss']:.4f} -> "
          f"{tr[-1]['loss']:.4f}{acc} {'ok' if falls else 'FAIL'}")
    z = statistics.median(r["images_per_s"] for r in tr[10:]) if len(tr) > 10 else float("nan")
    t = recs("vision_torch.jsonl")
    tp = t[0]["images_per_s"] if t else float("nan")
    print(f"vision: alexnet bf16 batch {vb} images/s: zerotrain {z:.0f}, torch eager {tp:.0f}, "
          f"ratio {z / tp:.2f}x")
else:
    print("vision: alexnet bf16: no steps FAIL")
VPY
fi

if on rlhf; then
# zt train --task ppo (DeepSpeed-Chat step 3) with llama-tiny as actor and critic: the first
# rounds in f32 on the GPU against the CPU (greedy answers of near-equal logits are the same
# tokens, so the rounds' numbers agree), and bf16 rounds at ZeRO 0 and 3 with finite numbers.
echo "== rlhf: zt train --task ppo, GPU against CPU (f32), bf16 at ZeRO 0 and 3"
rd=${ZT_RLHF_DIR:-/tmp/zt_rlhf}
mkdir -p "$rd"
python3 - "$rd" <<'RPY'
import json, random, sys
random.seed(0)
with open(f"{sys.argv[1]}/prompts.jsonl", "w") as f:
    for _ in range(256):
        f.write(json.dumps({"prompt": "say: " + "".join(random.choice("abcdef") for _ in range(3))}) + "\n")
RPY
for p in f32 bf16; do
  bf=false; [ $p = bf16 ] && bf=true
  cat >"$rd/$p.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "bf16": {"enabled": $bf}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}}}
JSON
done
rcommon=(--task ppo --actor llama-tiny --critic llama-tiny --data "$rd/prompts.jsonl"
  --max-prompt-seq-len 16 --max-answer-seq-len 32 --seed 3)
for d in cpu cuda; do
  "$bin"/zt train --config "$rd/f32.json" "${rcommon[@]}" --steps 3 --device $d \
    --metrics-out "$out/rlhf_f32_$d.jsonl" >"$out/rlhf_f32_$d.log" 2>&1 || tail -3 "$out/rlhf_f32_$d.log"
done
for st in 0 3; do
  "$bin"/zt train --config "$rd/bf16.json" "${rcommon[@]}" --steps 10 --device cuda \
    --actor-zero-stage $st --critic-zero-stage $st --metrics-out "$out/rlhf_bf16_z$st.jsonl" \
    >"$out/rlhf_bf16_z$st.log" 2>&1 || tail -3 "$out/rlhf_bf16_z$st.log"
done
python3 - "$out" <<'RPY' | tee "$out/rlhf.txt"
import json, math, sys
out = sys.argv[1]
def recs(n):
    try:
        return [json.loads(l) for l in open(f"{out}/{n}") if l.strip()]
    except OSError:
        return []
c, g = recs("rlhf_f32_cpu.jsonl"), recs("rlhf_f32_cuda.jsonl")
keys = ["reward_mean", "actor_loss", "critic_loss"]
if c and len(c) == len(g):
    worst = max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-3) for a, b in zip(c[:1], g[:1]) for k in keys)
    print(f"rlhf: ppo f32 GPU vs CPU, round 1 (reward, actor and critic loss): worst rel diff "
          f"{worst:.2e} (tol 1e-3) {'ok' if worst <= 1e-3 else 'FAIL'}")
else:
    print(f"rlhf: ppo f32 GPU vs CPU: runs missing ({len(c)} / {len(g)} rounds) FAIL")
for st in (0, 3):
    r = recs(f"rlhf_bf16_z{st}.jsonl")
    fin = len(r) == 10 and all(math.isfinite(x[k]) for x in r for k in keys + ["kl"])
    gen = sorted(x["generate_tokens_per_s"] for x in r)[len(r) // 2] if r else float("nan")
    print(f"rlhf: ppo bf16 ZeRO {st}, {len(r)} rounds of 16 prompts: finite {fin}, generation "
          f"{gen:.0f} tokens/s (median) {'ok' if fin else 'FAIL'}")
RPY
fi

if on rlhf_bench; then
# One PPO round of a Llama-shaped actor and critic (ZT_RLHF_MODEL, default llama-1b; 16 prompts of
# 64 tokens, 64-token answers, bf16, AdamW) by zt train --task ppo next to the same round in
# PyTorch + transformers (bench/ppo_torch.py): the median round's wall time and generation speed.
rm_=${ZT_RLHF_MODEL:-llama-1b}
rd=${ZT_RLHF_DIR:-/tmp/zt_rlhf}
mkdir -p "$rd"
echo "== rlhf_bench: $rm_ PPO round, zt train --task ppo next to PyTorch + transformers"
python3 - "$rd" <<'RPY'
import json, random, sys
random.seed(0)
with open(f"{sys.argv[1]}/ids64.jsonl", "w") as f:
    for _ in range(512):
        f.write(json.dumps({"input_ids": [random.randrange(3, 32000) for _ in range(64)]}) + "\n")
RPY
cat >"$rd/bench.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}
JSON
"$bin"/zt train --config "$rd/bench.json" --task ppo --actor "$rm_" --critic "$rm_" \
  --data "$rd/ids64.jsonl" --max-prompt-seq-len 64 --max-answer-seq-len 64 --critic-lr 5e-6 \
  --steps 6 --device cuda --metrics-out "$out/rlhf_bench_zt.jsonl" >"$out/rlhf_bench_zt.log" 2>&1 ||
  tail -5 "$out/rlhf_bench_zt.log"
python3 bench/ppo_torch.py --model "$rm_" --batch 16 --prompt 64 --answer 64 --rounds 5 \
  >"$out/rlhf_bench_torch.jsonl" 2>"$out/rlhf_bench_torch.log" || tail -5 "$out/rlhf_bench_torch.log"
python3 - "$out" <<'RPY' | tee "$out/rlhf_bench.txt"
import json, statistics, sys
out = sys.argv[1]
try:
    z = [json.loads(l) for l in open(f"{out}/rlhf_bench_zt.jsonl") if l.strip()][1:]
    t = json.loads(open(f"{out}/rlhf_bench_torch.jsonl").read())
except Exception as e:
    print(f"rlhf_bench: missing results ({e}) FAIL")
    sys.exit(0)
zr = statistics.median(r["round_s"] for r in z)
zg = statistics.median(r["generate_tokens_per_s"] for r in z)
print(f"rlhf_bench: PPO round, 16 x (64 + 64) tokens: zerotrain {zr:.3f} s (generation {zg:.0f} "
      f"tokens/s), torch + transformers {t['round_s']:.3f} s (generation "
      f"{t['generate_tokens_per_s']:.0f} tokens/s, peak {t['peak_mem_bytes'] / 2**30:.1f} GiB): "
      f"round {t['round_s'] / zr:.2f}x, generation {zg / t['generate_tokens_per_s']:.2f}x")
RPY
fi

if on rlhf_2gpu; then
# DeepSpeed-Chat's shape of step 3 (prompts of 256 tokens, answers of 256) with a Llama-shaped
# actor and critic (ZT_RLHF_MODEL, default llama-1b), 16 prompts a GPU a round, bf16, AdamW:
# zt train --task ppo on one GPU (ZeRO 0), on two at ZeRO 3 without and with
# --enable-hybrid-engine, next to the same round in PyTorch + transformers on one GPU and on two
# (DDP, torchrun). Needs 2 GPUs.
rm_=${ZT_RLHF_MODEL:-llama-1b}
rd=${ZT_RLHF_DIR:-/tmp/zt_rlhf}
mkdir -p "$rd"
echo "== rlhf_2gpu: $rm_ PPO rounds (256 + 256 tokens) on 1 and 2 GPUs next to PyTorch"
python3 - "$rd" <<'RPY'
import json, random, sys
random.seed(0)
with open(f"{sys.argv[1]}/ids256.jsonl", "w") as f:
    for _ in range(512):
        f.write(json.dumps({"input_ids": [random.randrange(3, 32000) for _ in range(256)]}) + "\n")
RPY
cat >"$rd/bench16.json" <<JSON
{"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "bf16": {"enabled": true}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}}
JSON
ppo_args=(train --config "$rd/bench16.json" --task ppo --actor "$rm_" --critic "$rm_"
  --data "$rd/ids256.jsonl" --max-prompt-seq-len 256 --max-answer-seq-len 256 --critic-lr 5e-6
  --steps 5 --device cuda)
# ZT_RLHF2_TIMING=0 skips the timed runs (only the f32 check below).
if [ "${ZT_RLHF2_TIMING:-1}" = 1 ]; then
"$bin"/zt "${ppo_args[@]}" --metrics-out "$out/rlhf2_zt1.jsonl" >"$out/rlhf2_zt1.log" 2>&1 ||
  tail -5 "$out/rlhf2_zt1.log"
for v in z3 he tp; do
  extra=(--actor-zero-stage 3 --critic-zero-stage 3)
  [ $v = he ] && extra+=(--enable-hybrid-engine)
  [ $v = tp ] && extra+=(--enable-hybrid-engine --inference-tp-size 2)
  "$bin"/zt launch --num_procs 2 "$bin"/zt "${ppo_args[@]}" "${extra[@]}" \
    --metrics-out "$out/rlhf2_zt2_$v.jsonl" >"$out/rlhf2_zt2_$v.log" 2>&1 || tail -5 "$out/rlhf2_zt2_$v.log"
done
LD_LIBRARY_PATH="$torch_ld" python3 bench/ppo_torch.py --model "$rm_" --batch 16 --prompt 256 \
  --answer 256 --rounds 3 >"$out/rlhf2_torch1.jsonl" 2>"$out/rlhf2_torch1.log" || tail -5 "$out/rlhf2_torch1.log"
LD_LIBRARY_PATH="$torch_ld" torchrun --nproc_per_node 2 bench/ppo_torch.py --model "$rm_" \
  --batch 16 --prompt 256 --answer 256 --rounds 3 >"$out/rlhf2_torch2.jsonl" \
  2>"$out/rlhf2_torch2.log" || tail -5 "$out/rlhf2_torch2.log"
python3 - "$out" <<'RPY' | tee "$out/rlhf_2gpu.txt"
import json, statistics, sys
out = sys.argv[1]
def zt(name):
    try:
        rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.strip()][1:]
        return {k: statistics.median(r[k] for r in rows) for k in ("round_s", "generate_s", "train_s", "generate_tokens_per_s")}
    except Exception as e:
        return None
def torch_(name):
    try:
        return json.loads(open(f"{out}/{name}.jsonl").read())
    except Exception:
        return None
runs = {"zt 1 GPU (ZeRO 0)": zt("rlhf2_zt1"), "zt 2 GPUs ZeRO 3": zt("rlhf2_zt2_z3"),
        "zt 2 GPUs ZeRO 3 + hybrid engine": zt("rlhf2_zt2_he"),
        "torch 1 GPU": torch_("rlhf2_torch1"), "torch 2 GPUs DDP": torch_("rlhf2_torch2"),
        "zt 2 GPUs ZeRO 3 + hybrid engine, inference TP 2": zt("rlhf2_zt2_tp")}
for name, r in runs.items():
    if r is None:
        print(f"rlhf_2gpu: {name}: missing FAIL")
        continue
    q = 16 / r["round_s"]
    print(f"rlhf_2gpu: {name}: round {r['round_s']:.3f} s (generate {r['generate_s']:.3f}, train "
          f"{r['train_s']:.3f}), generation {r['generate_tokens_per_s']:.0f} tokens/s per GPU, "
          f"{q:.2f} prompts/s per GPU")
z1, z3, he, t1, t2, tp = runs.values()
try:
    a = [json.loads(l) for l in open(f"{out}/rlhf2_zt2_z3.jsonl") if l.strip()]
    b = [json.loads(l) for l in open(f"{out}/rlhf2_zt2_he.jsonl") if l.strip()]
    keys = ("reward_mean", "kl", "actor_loss", "critic_loss", "answer_len_mean")
    same = all(x[k] == y[k] for x, y in zip(a, b) for k in keys) and len(a) == len(b) > 0
    print(f"rlhf_2gpu: hybrid engine vs per-unit gathers, rounds' rewards, KL and losses: "
          f"{'identical ok' if same else 'differ FAIL'}")
except Exception as e:
    print(f"rlhf_2gpu: hybrid comparison missing ({e}) FAIL")
if he and z3:
    print(f"rlhf_2gpu: hybrid engine on 2 GPUs: generation {he['generate_tokens_per_s'] / z3['generate_tokens_per_s']:.2f}x "
          f"ZeRO-3's per-unit gathers, round {z3['round_s'] / he['round_s']:.2f}x")
if he and t2:
    print(f"rlhf_2gpu: 2 GPUs: zt hybrid vs torch DDP: round {t2['round_s'] / he['round_s']:.2f}x, generation "
          f"{he['generate_tokens_per_s'] / t2['generate_tokens_per_s']:.2f}x transformers' generate")
if z1 and t1:
    print(f"rlhf_2gpu: 1 GPU: zt vs torch: round {t1['round_s'] / z1['round_s']:.2f}x, generation "
          f"{z1['generate_tokens_per_s'] / t1['generate_tokens_per_s']:.2f}x")
RPY
fi
# Correctness on 2 GPUs in f32 (llama-tiny, prompts of mixed lengths): the hybrid engine and its
# tensor-parallel generation give the rounds of the per-unit gathers exactly (greedy answers).
python3 - "$rd" <<'RPY'
import json, random, sys
random.seed(4)
with open(f"{sys.argv[1]}/ids_mixed.jsonl", "w") as f:
    for _ in range(256):
        f.write(json.dumps({"input_ids": [random.randrange(3, 250) for _ in range(random.randrange(4, 40))]}) + "\n")
RPY
cat >"$rd/f32.json" <<JSON
{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
JSON
for v in z3 he tp; do
  extra=()
  [ $v = he ] && extra+=(--enable-hybrid-engine)
  [ $v = tp ] && extra+=(--enable-hybrid-engine --inference-tp-size 2)
  "$bin"/zt launch --num_procs 2 "$bin"/zt train --config "$rd/f32.json" --task ppo --actor llama-tiny \
    --critic llama-tiny --data "$rd/ids_mixed.jsonl" --max-prompt-seq-len 40 --max-answer-seq-len 24 \
    --steps 6 --device cuda --actor-zero-stage 3 --critic-zero-stage 3 "${extra[@]}" \
    --metrics-out "$out/rlhf2_f32_$v.jsonl" >"$out/rlhf2_f32_$v.log" 2>&1 || tail -5 "$out/rlhf2_f32_$v.log"
done
python3 - "$out" <<'RPY' | tee -a "$out/rlhf_2gpu.txt"
import json, sys
out = sys.argv[1]
keys = ("reward_mean", "kl", "actor_loss", "critic_loss", "answer_len_mean")
try:
    runs = {v: [json.loads(l) for l in open(f"{out}/rlhf2_f32_{v}.jsonl") if l.strip()] for v in ("z3", "he", "tp")}
    for v in ("he", "tp"):
        # The answers decide the rewards and lengths: those equal exactly; the losses and KL
        # come from training steps whose f32 kernels (the unfused attention's backward) add in
        # no fixed order, so they agree to rounding.
        exact = all(x[k] == y[k] for x, y in zip(runs["z3"], runs[v]) for k in ("reward_mean", "answer_len_mean"))
        worst = max(abs(x[k] - y[k]) / (1 + abs(x[k])) for x, y in zip(runs["z3"], runs[v]) for k in keys)
        same = len(runs[v]) == len(runs["z3"]) == 6 and exact and worst < 1e-5
        print(f"rlhf_2gpu: f32 llama-tiny, mixed-length prompts, 2 GPUs: {v}'s answers equal the "
              f"per-unit gathers', losses within {worst:.1e} {'ok' if same else 'FAIL'}")
except Exception as e:
    print(f"rlhf_2gpu: f32 comparison missing ({e}) FAIL")
RPY
fi

echo
python3 - "$out" "$gpu_rc" "$train_rc" "$export_rc" <<'PY'
import json, sys
out, gpu_rc, train_rc, export_rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try:
    t = json.load(open(f"{out}/gpu_tests.json"))
    tests = f"{t['tests'] - t['failures'] - t.get('disabled', 0)} passed, {t['failures']} failed"
except Exception as e:
    tests = f"no report ({e})"
rows = [json.loads(l) for l in open(f"{out}/bench.jsonl") if l.strip()]
for r in rows:  # the CUDA-graph run of ZeroTrain gets a row of its own
    if r.get("cuda_graph"):
        r["impl"] += "+graph"
ck = [json.loads(l) for l in open(f"{out}/ckpt.jsonl") if l.strip()]
zt = next((r for r in rows if r["impl"] == "zerotrain"), None)
ran = lambda rc: "not run" if rc == -1 else f"exit {rc}"  # -1: the section was not selected
if gpu_rc == -1:
    tests = "not run"
print(f"GPU tests: {tests}{'' if gpu_rc == -1 else f' ({ran(gpu_rc)})'};  "
      f"zt train gpt2 bf16: {ran(train_rc)};  "
      f"export to transformers: {ran(export_rc)}")
for name in ("tasks.txt", "lora.txt", "monitors.txt", "vision.txt", "rlhf.txt", "rlhf_bench.txt", "rlhf_2gpu.txt"):  # one line per check, ending ok or FAIL
    try:
        for line in open(f"{out}/{name}"):
            print(line.rstrip())
    except OSError:
        pass
print(f"{'impl':<14}{'tokens/s':>12}{'step ms':>10}{'peak GiB':>10}{'vs zerotrain':>14}")
for r in rows:
    ratio = (zt["tokens_per_s"] / r["tokens_per_s"]) if zt else float("nan")
    print(f"{r['impl']:<14}{r['tokens_per_s']:>12.0f}{r['step_ms_median']:>10.1f}"
          f"{r['peak_mem_bytes']/2**30:>10.2f}{ratio:>13.2f}x")
print("(last column: ZeroTrain tokens/s divided by that row's tokens/s)")
att = [json.loads(l) for l in open(f"{out}/attention.jsonl") if l.strip()]
print(f"\n{'attention (B,NH,T,HS)':<24}{'mask':<7}{'impl':<24}{'ms':>8}{'TFLOP/s':>9}{'torch/this':>12}")
akey = lambda x: (x["B"], x["NH"], x["T"], x["HS"], x.get("causal", True))
for r in att:
    t = next((x for x in att if x["impl"] == "torch-sdpa" and akey(x) == akey(r)), None)
    ratio = t["ms_median"] / r["ms_median"] if t else float("nan")
    mask = "causal" if r.get("causal", True) else "none"
    print(f"{str(akey(r)[:4]):<24}{mask:<7}{r['impl']:<24}{r['ms_median']:>8.3f}{r['tflops']:>9.1f}{ratio:>11.2f}x")
print("(last column: the faster torch SDPA backend's time divided by that row's time; above 1 is faster than torch)")
nm = [json.loads(l) for l in open(f"{out}/norms.jsonl") if l.strip()]
if nm:
    print(f"\n{'norm (rows, C)':<26}{'impl':<15}{'fwd ms':>8}{'GB/s':>6}{'bwd ms':>8}{'GB/s':>6}{'best torch/this':>17}")
    nkey = lambda x: (x["op"], x["rows"], x["C"])
    for r in nm:
        ts = [x for x in nm if x["impl"].startswith("torch") and nkey(x) == nkey(r)]
        best = min((x["fwd_ms"] + x["bwd_ms"] for x in ts), default=float("nan"))
        print(f"{r['op'] + ' ' + str((r['rows'], r['C'])):<26}{r['impl']:<15}{r['fwd_ms']:>8.3f}"
              f"{r['fwd_gbs']:>6}{r['bwd_ms']:>8.3f}{r['bwd_gbs']:>6}{best / (r['fwd_ms'] + r['bwd_ms']):>16.2f}x")
    print("(last column: the faster torch's fwd+bwd time divided by that row's; above 1 is faster than torch)")
lm = [json.loads(l) for l in open(f"{out}/llama.jsonl") if l.strip()]
for r in lm:
    if r.get("cuda_graph"):
        r["impl"] += "+graph"
if lm:
    z = next((r for r in lm if r["impl"] == "zerotrain"), None)
    print(f"\n{'training ' + lm[0]['model']:<22}{'tokens/s':>10}{'MFU':>7}{'step ms':>9}{'peak GiB':>10}{'zt vs this':>12}")
    for r in lm:
        ratio = z["tokens_per_s"] / r["tokens_per_s"] if z else float("nan")
        print(f"{r['impl']:<22}{r['tokens_per_s']:>10.0f}{r['mfu']:>7.3f}{r['step_ms_median']:>9.1f}"
              f"{r['peak_mem_bytes']/2**30:>10.2f}{ratio:>11.2f}x")
try:
    o8 = [json.loads(l) for l in open(f"{out}/offload8b.jsonl") if l.strip()]
except OSError:
    o8 = []
for r in o8:
    print(f"{r['model']} with ZeRO-Offload: {r['tokens_per_s']:.0f} tokens/s, MFU {r['mfu']:.3f}, "
          f"step {r['step_ms_median']:.0f} ms (host step {r.get('offload_step_ms_median', 0):.0f} ms), "
          f"GPU peak {r['peak_mem_bytes']/2**30:.1f} GiB, host state "
          f"{r['model_state_bytes_host']/2**30:.1f} GiB")
gen = [json.loads(l) for l in open(f"{out}/generate.jsonl") if l.strip()]
if gen:
    print(f"\n{'generate':<38}{'batch':>6}{'tokens/s':>10}{'step ms':>9}{'weights GB/s':>14}{'zt vs this':>12}")
    for r in gen:
        z = next((x for x in gen if x["impl"] == "zerotrain" and x["batch"] == r["batch"]), None)
        ratio = z["tokens_per_s"] / r["tokens_per_s"] if z else float("nan")
        print(f"{r['impl'] + ' ' + r['model']:<38}{r['batch']:>6}{r['tokens_per_s']:>10.0f}"
              f"{r['decode_step_ms']:>9.2f}{r['weight_GBps']:>14.0f}{ratio:>11.2f}x")
    print("(weights GB/s: the weights' bytes over one decode step; HBM peaks at 3350 on the H100 "
          "SXM, 4800 on the H200)")
tok = [json.loads(l) for l in open(f"{out}/tokenize.jsonl") if l.strip()]
for name in dict.fromkeys(r["tokenizer"].rstrip("/") for r in tok):
    rs = [r for r in tok if r["tokenizer"].rstrip("/") == name]
    z = next((r for r in rs if r["impl"] == "zerotrain"), None)
    p = next((r for r in rs if r["impl"] == "peers"), None)
    best = (p or {}).get("tokenizers_best_MBps", {})
    mb = rs[0]["text_bytes"] / 1e6
    print(f"\ntokenize {name} ({mb:.0f} MB, {rs[0]['docs']} documents)")
    print(f"{'engine':<24}{'threads':>8}{'cold MB/s':>11}{'MB/s':>10}{'tokens':>12}{'vs tokenizers':>15}")
    for r in [x for q in rs for x in q.get("results", [])]:
        if "MBps" not in r:
            print(f"{r['engine']:<24}{r['threads']:>8}  {r.get('skipped') or r.get('error')}")
            continue
        b = best.get(str(r["threads"]))
        ratio = r["MBps"] / b if b else float("nan")
        print(f"{r['engine']:<24}{r['threads']:>8}{r['cold_MBps']:>11.2f}{r['MBps']:>10.2f}"
              f"{r['tokens']:>12}{ratio:>14.2f}x")
    if z and p:
        same = z["ids_crc32"] == p.get("ids_crc32") and z["tokens"] == p.get("tokens_tokenizers")
        print(f"ids: ZeroTrain {z['tokens']} tokens crc32 {z['ids_crc32']}, tokenizers "
              f"{p.get('tokens_tokenizers')} tokens crc32 {p.get('ids_crc32')}: "
              f"{'SAME' if same else 'DIFFERENT'}")
    if p and p.get("tokens_tiktoken") is not None:
        print(f"tiktoken (same ranks) gives {p['tokens_tiktoken']} tokens, "
              f"{p.get('token_count_rel_diff', 0):.3%} from tokenizers")
if tok:
    print("(vs tokenizers: this row's warm MB/s over the fastest tokenizers variant at the same "
          "thread count; cold: the first pass, before any cache is filled)")
if ck:
    try:
        print("\ndisk:", open(f"{out}/dd.txt").read().strip())
    except OSError:
        pass
    print(f"{'checkpoint':<22}{'GB':>7}{'save s':>8}{'GB/s':>7}{'load s':>8}{'GB/s':>7}"
          f"{'async stall s':>15}{'save vs dcp':>12}{'load vs dcp':>12}")
    for r in ck:
        d = next((x for x in ck if x["impl"] == "torch-dcp" and x["model"] == r["model"]), None)
        sv = d["save_s"] / r["save_s"] if d else float("nan")
        ld = d["load_s"] / r["load_s"] if d else float("nan")
        print(f"{r['impl'] + ' ' + r['model']:<22}{r['bytes']/1e9:>7.1f}{r['save_s']:>8.2f}"
              f"{r['save_GBps']:>7.2f}{r['load_s']:>8.2f}{r['load_GBps']:>7.2f}"
              f"{r['async_stall_s']:>15.3f}{sv:>11.2f}x{ld:>11.2f}x")
    print("(vs dcp: DCP's time divided by this row's; above 1 is faster than DCP)")
try:  # section infinity's own table (it prints it when it runs, too)
    print(open(f"{out}/infinity.txt").read().rstrip())
except OSError:
    pass
PY
