#!/usr/bin/env python3
"""Pipeline and tensor parallelism through the real launcher (zt launch, CPU ranks, Gloo): `zt
train --pipeline-parallel-size P --tensor-parallel-size T` on 2, 4 and 8 ranks, each layout
against the single-process run of the same global batch (16 rows of 32 tokens, 4 micro-batches
a step, sequential order).

Layouts: gpt2-tiny (tied head: the last stage holds a copy of the embedding, whose gradient the
two stages sum) at PP=2, PP=4, PP=2 x DP=2 at ZeRO stages 0 and 1, PP=2 with one micro-batch a
step (fewer than the stages: a warning names the bubble), PP=2 with activation checkpointing,
PP=4 with the uniform partition, PP=2 with the compute partition; llama-tiny (RMSNorm, SwiGLU, rotary, grouped-query attention)
at PP=2 and PP=2 x DP=2; and bf16 + AdamW with a warm-up schedule at PP=2 x DP=2, ZeRO 1.
Tensor parallelism (each block's heads and MLP width split; the ranks all-reduce the partial
outputs and input gradients): TP=2 on both families (GPT-2's biases added once, Llama's
grouped-query heads and [gate | up] rows split), TP=4, TP=2 x DP=2 at ZeRO 1, PP=2 x TP=2, and
PP=2 x TP=2 x DP=2 on 8 ranks; llama PP=2 x TP=2 in bf16 with AdamW; the llama fixture
directory (its weights read by each part from the whole files; an untied head split by rows) at
TP=2 and PP=2 x TP=2. Sequence parallelism (--sequence-parallel: each tensor rank keeps half
the tokens outside attention and the MLP, which all-gather their input and reduce-scatter their
output; the norms' gradients summed over the group; the stages send the halves): TP=2 on both
families, PP=2 x TP=2 x DP=2 at ZeRO 1 on 8 ranks, TP=4, the llama fixture at PP=2 x TP=2, and
TP=2 with activation checkpointing (the recompute gathers again).

Oracle: the single-process run (tests/dist/zero_equivalence.py's argument): SGD with momentum
and weight decay is linear in the gradients, and a pipeline computes every micro-batch's
forward and backward with the same kernels on the same rows; what differs is the order of a few
sums (the tied embedding's two partial gradients, the gradient norm's per-stage parts, the
data-parallel average; with tensor parallelism the split GEMMs' sums over heads and MLP width
done in parts and added), so in fp32 every step's loss and gradient norm must agree within 1e-5
relative (observed: ~3e-8). bf16 rounds every activation and Adam divides by sqrt(v), so there
the bound is 2e-3 (observed ~6e-7 for pipelines, where the same GEMM shapes run in both). Every run must also train
(the loss falls), or equal runs would prove nothing, and its record must say the layout asked for.

Fine-tuning on a pipeline (llama-tiny, 4 micro-batches): SFT on prompt/response records, SFT
with LoRA adapters alone trained and dropout 0.1 (the masks follow the micro-step as the engine
counts them), and the reward model on prompt/chosen/rejected pairs, each within 1e-5 of the
single-process run of the same task; and BERT's masked-LM pre-training (the bert_mlm fixture)
on padded rows, whose padding mask every stage's bidirectional attention reads (it travels with
the activations), and on TP=2 and PP=2 x TP=2 (the masked-LM head's bias split with the
vocabulary).

Checkpoints: a pipeline's checkpoint holds the whole model (a file per data-parallel rank and
stage, each unit under the whole model's number with the stage that saved it), so a PP=2 save at
the halfway step resumes on PP=2 and on one process, and a one-process save resumes on PP=2 x
DP=2 at ZeRO 1; each resume's remaining steps must equal the uninterrupted run's within 1e-5
relative (fp32 SGD: the state is restored exactly), while a resume without the optimizer state
(the control) must miss that by far. `zt ckpt to-fp32` of the pipeline checkpoint must equal
that of the one-process checkpoint of the same step (within 1e-5 of the largest weight). The
same for tensor parallelism (a file per tensor rank, every rank's slices in the metadata): a
TP=2 save resumes on TP=2 (with and without sequence parallelism), on one process and on PP=2
x TP=2, a one-process save on TP=2 x DP=2 at ZeRO 1, the control on one process; its to-fp32
and export-hf equal the one-process checkpoint's, and `inspect --verify` reads it.

Refusals, each naming its numbers: ZeRO stage 2 with a pipeline, P that does not divide the
ranks, --save-async with a pipeline and with tensor parallelism, --sequence-parallel without
tensor parallelism or with a sequence length T does not divide. Key/value heads fewer than the
tensor ranks (llama-tiny's 2 on TP=4) are shared by consecutive ranks, which sum their
gradients; the run must equal the single process like every other layout.

Usage: pipeline_stages.py ZT_BINARY SOURCE_DIR [--quick]
"""
import array
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

from _ports import next_port
from _tokens import markov_tokens, write_tokens

ZT, SRC = sys.argv[1], sys.argv[2]
QUICK = "--quick" in sys.argv
STEPS = 4 if QUICK else 6
SEQ, BATCH, VOCAB = 32, 16, 250
TMP = tempfile.mkdtemp(prefix="zt_pipe_")
ENV = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "cache"), ZT_COMM_TIMEOUT_S="120",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
failures, passed = [], 0
LLAMA_DIR = os.path.join(SRC, "tests", "fixtures", "hf", "llama")  # untied head, GQA


def make_data():
    tokens = markov_tokens(STEPS * BATCH * SEQ + 1, VOCAB)
    data = os.path.join(TMP, "train.bin")
    write_tokens(data, tokens)
    return data


DATA = make_data()


def make_jsonl():
    """Prompt/response records whose responses all count 5 targets (4 letters and the eos), so
    micro-batch means agree across layouts, and prompt/chosen/rejected pairs."""
    rng = random.Random(3)
    sft, pairs = os.path.join(TMP, "sft.jsonl"), os.path.join(TMP, "pairs.jsonl")
    with open(sft, "w") as f, open(pairs, "w") as g:
        for _ in range(STEPS * BATCH):
            w = "".join(rng.choice("abcdefgh") for _ in range(4))
            pad = "x" * rng.randint(0, 6)
            f.write(json.dumps({"prompt": f"{pad}copy {w} =", "response": w}) + "\n")
            g.write(json.dumps({"prompt": f"copy {w} =", "chosen": w, "rejected": w[::-1]}) + "\n")
    return sft, pairs


SFT_DATA, PAIRS_DATA = make_jsonl()
BERT_DIR = os.path.join(SRC, "tests", "fixtures", "hf", "bert_mlm")


def make_mlm_jsonl():
    """Records of 6..30 ids of a chain between [CLS]=2 and [SEP]=3 (ids 0..9 are specials), one
    padded row each: rows of different lengths, so every micro-batch has padding."""
    rng = random.Random(7)
    path = os.path.join(TMP, "mlm.jsonl")
    with open(path, "w") as f:
        for _ in range(STEPS * BATCH):
            t, ids = rng.randrange(10, 250), []
            for _ in range(rng.randrange(6, 31)):
                t = 10 + (t * 7 + rng.choice([0, 0, 0, 1])) % 240
                ids.append(t)
            f.write(json.dumps({"input_ids": [2] + ids + [3]}) + "\n")
    return path


MLM_DATA = make_mlm_jsonl()


def config(name, stage, gas, bf16=False):
    cfg = {"train_batch_size": BATCH, "gradient_accumulation_steps": gas, "gradient_clipping": 0.5,
           "zero_allow_untested_optimizer": True,
           "optimizer": {"type": "SGD",
                         "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}},
           "zero_optimization": {"stage": stage}}
    if bf16:
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}}
        cfg["scheduler"] = {"type": "WarmupLR", "params": {"warmup_num_steps": 3}}
        cfg["bf16"] = {"enabled": True}
    path = os.path.join(TMP, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def run(name, world, cfg, model, extra=(), expect_fail=False, steps=STEPS, data=None):
    metrics = os.path.join(TMP, name + ".jsonl")
    train = [ZT, "train", "--config", cfg, "--model", model, "--data", data or DATA, "--device",
             "cpu", "--steps", str(steps), "--seq-len", str(SEQ), "--sample-tokens", "0", "--order",
             "sequential", "--metrics-out", metrics] + list(extra)
    cmd = train
    if world > 1:
        cmd = [ZT, "launch", "--num_procs", str(world), "--master_port", str(next_port())] + train
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if expect_fail:
        return p
    if p.returncode != 0:
        raise RuntimeError(f"{name} exited {p.returncode}:\n{p.stderr[-2000:]}")
    recs = [json.loads(line) for line in open(metrics)]
    return recs[0], recs[1:], p.stderr


def check(name, ok, detail):
    global passed
    if ok:
        passed += 1
        print(f"ok   {name}: {detail}")
    else:
        failures.append(name)
        print(f"FAIL {name}: {detail}")


def load_f32(path):
    """Every tensor of a safetensors file as a list of floats (f32 files only)."""
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header, data = json.loads(blob[8:8 + n]), blob[8 + n:]
    out = {}
    for key, v in header.items():
        if key != "__metadata__":
            a = array.array("f")
            a.frombytes(data[v["data_offsets"][0]:v["data_offsets"][1]])
            out[key] = a
    return out


def to_fp32(ckpt, out):
    p = subprocess.run([ZT, "ckpt", "to-fp32", ckpt, out], env=ENV, capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"to-fp32 {ckpt} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return load_f32(os.path.join(out, "model.safetensors"))


def compare(name, ref, got, tol):
    worst_loss = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(ref, got))
    worst_norm = max(abs(a["grad_norm"] - b["grad_norm"]) / abs(a["grad_norm"])
                     for a, b in zip(ref, got))
    trains = got[-1]["loss"] < got[0]["loss"] - 1e-3
    check(name, len(got) == len(ref) == STEPS and worst_loss <= tol and worst_norm <= tol and trains,
          f"worst loss rel diff {worst_loss:.2e}, grad-norm rel diff {worst_norm:.2e} (tol {tol:g}); "
          f"loss {got[0]['loss']:.4f} -> {got[-1]['loss']:.4f}")


# (name, model, world, pipeline size, tensor size, ZeRO stage, micro-batches a step, extra
# flags, bf16)
LAYOUTS = [
    ("gpt2_pp2", "gpt2-tiny", 2, 2, 1, 0, 4, [], False),
    ("gpt2_pp4", "gpt2-tiny", 4, 4, 1, 0, 4, [], False),
    ("gpt2_pp2_dp2_s1", "gpt2-tiny", 4, 2, 1, 1, 4, [], False),
    ("gpt2_pp2_one_micro_batch", "gpt2-tiny", 2, 2, 1, 0, 1, [], False),
    ("llama_pp2", "llama-tiny", 2, 2, 1, 0, 4, [], False),
    ("llama_pp2_dp2_s0", "llama-tiny", 4, 2, 1, 0, 4, [], False),
    ("gpt2_pp2_dp2_s1_bf16_adamw", "gpt2-tiny", 4, 2, 1, 1, 4, [], True),
    # Tensor parallelism, alone and with the other two.
    ("gpt2_tp2", "gpt2-tiny", 2, 1, 2, 0, 4, [], False),
    ("llama_tp2", "llama-tiny", 2, 1, 2, 0, 4, [], False),
    ("gpt2_tp2_dp2_s1", "gpt2-tiny", 4, 1, 2, 1, 4, [], False),
    ("gpt2_pp2_tp2", "gpt2-tiny", 4, 2, 2, 0, 4, [], False),
    ("gpt2_pp2_tp2_dp2_s1", "gpt2-tiny", 8, 2, 2, 1, 4, [], False),
    # A model directory's weights, each tensor-parallel part read from the whole files.
    ("llama_fixture_tp2", LLAMA_DIR, 2, 1, 2, 0, 4, [], False),
    ("llama_fixture_pp2_tp2", LLAMA_DIR, 4, 2, 2, 0, 4, [], False),
    # Sequence parallelism: norms, residual adds and the stages' messages on half the tokens.
    # Key/value heads fewer than the ranks: llama-tiny's 2 over 4 ranks, each head on two
    # ranks whose query heads read it (their gradients summed, the norm counting it once).
    ("llama_tp4_shared_kv", "llama-tiny", 4, 1, 4, 0, 4, [], False),
    ("gpt2_tp2_sp", "gpt2-tiny", 2, 1, 2, 0, 4, ["--sequence-parallel"], False),
    ("llama_tp2_sp", "llama-tiny", 2, 1, 2, 0, 4, ["--sequence-parallel"], False),
    ("gpt2_pp2_tp2_sp_dp2_s1", "gpt2-tiny", 8, 2, 2, 1, 4, ["--sequence-parallel"], False),
]
if not QUICK:
    LAYOUTS += [
        ("gpt2_pp2_dp2_s0", "gpt2-tiny", 4, 2, 1, 0, 4, [], False),
        ("gpt2_pp2_checkpointing", "gpt2-tiny", 2, 2, 1, 0, 4, ["--gradient-checkpointing"], False),
        ("gpt2_pp4_uniform", "gpt2-tiny", 4, 4, 1, 1, 4, ["--partition-method", "uniform"], False),
        ("gpt2_pp2_compute", "gpt2-tiny", 2, 2, 1, 0, 4, ["--partition-method", "compute"], False),
        ("llama_pp4", "llama-tiny", 4, 4, 1, 1, 4, [], False),
        ("gpt2_tp4", "gpt2-tiny", 4, 1, 4, 0, 4, [], False),
        ("llama_pp2_tp2_bf16_adamw", "llama-tiny", 4, 2, 2, 1, 4, [], True),
        ("gpt2_tp4_sp", "gpt2-tiny", 4, 1, 4, 0, 4, ["--sequence-parallel"], False),
        ("llama_fixture_pp2_tp2_sp", LLAMA_DIR, 4, 2, 2, 0, 4, ["--sequence-parallel"], False),
        ("gpt2_tp2_sp_checkpointing", "gpt2-tiny", 2, 1, 2, 0, 4,
         ["--sequence-parallel", "--gradient-checkpointing"], False),
    ]

try:
    refs = {}
    for name, model, world, pp, tp, stage, gas, extra, bf16 in LAYOUTS:
        dp = world // (pp * tp)
        key = (model, gas * dp, bf16)  # the single process runs the global batch's micro-batches
        if key not in refs:
            ref_name = f"ref_{os.path.basename(model)}_{gas * dp}_{bf16}"
            cfg = config(ref_name, 0, gas * dp, bf16)
            refs[key] = run(ref_name, 1, cfg, model)[1]
        cfg = config(name, stage, gas, bf16)
        rec, steps, log = run(name, world, cfg, model, ["--pipeline-parallel-size", str(pp),
                                                        "--tensor-parallel-size", str(tp)] + extra)
        got_layout = (rec.get("pipeline_parallel_size"), rec.get("tensor_parallel_size"),
                      rec.get("world_size"), rec.get("zero_stage"))
        if got_layout != (pp, tp, dp, stage):
            check(name, False, f"ran as pipeline x tensor x data, stage {got_layout}")
            continue
        # Every rank of data index 0 says its stage, tensor rank and units; the last stage holds
        # the tied copy of the embedding.
        stage_lines = [line for line in log.splitlines() if "pipeline: " in line and "ranks as" in line]
        last = [line for line in stage_lines if f"stage {pp - 1} of {pp}" in line]
        tied = model in ("gpt2-tiny", "llama-tiny")  # (the fixture directory's head is untied)
        copies = ["holds a copy of embedding" in line for line in last]
        sp = "--sequence-parallel" in extra
        check(name + " stage log", len(stage_lines) == pp * tp and len(last) == tp and
              all(c == (tied and pp > 1) for c in copies) and
              all(("sequence-parallel" in line) == sp for line in stage_lines),
              f"{len(stage_lines)} stage lines")
        if gas < pp:
            check(name + " bubble warning", "the bubble" in log, "warning printed")
        compare(name, refs[key], steps, 2e-3 if bf16 else 1e-5)

    # Fine-tuning tasks on a pipeline: SFT, SFT with LoRA adapters only (dropout on: the masks
    # follow the micro-step as the engine counts them, so one pipeline equals one process), and
    # the reward model's pairs, each against the single-process run of the same task.
    lora = ["--lora-dim", "4", "--lora-alpha", "8", "--lora-modules", "q_proj,v_proj,down_proj",
            "--only-optimize-lora", "--lora-dropout", "0.1"]
    for label, task, data, extra, batch in (("sft", "sft", SFT_DATA, [], BATCH),
                                            ("sft lora", "sft", SFT_DATA, lora, BATCH),
                                            ("reward", "reward", PAIRS_DATA, [], BATCH // 2)):
        cfg = config(f"task_{task}", 0, 4)
        with open(cfg) as f:
            c = json.load(f)
        c["train_batch_size"] = batch  # (reward: a row per sequence, two per pair)
        with open(cfg, "w") as f:
            json.dump(c, f)
        args = ["--task", task] + extra
        tag = label.replace(" ", "_")
        ref = run(f"{tag}_one", 1, cfg, "llama-tiny", args, data=data)[1]
        got = run(f"{tag}_pp2", 2, cfg, "llama-tiny", args + ["--pipeline-parallel-size", "2"],
                  data=data)[1]
        compare(f"{label} on pp2", ref, got, 1e-5)
    # BERT's masked-LM pre-training on padded rows: the padding mask travels with the
    # activations, so the middle and last stages' bidirectional attention skips the padding too.
    cfg = config("task_mlm", 0, 4)
    mlm_args = ["--task", "mlm", "--mask-id", "4"]
    ref = run("mlm_one", 1, cfg, BERT_DIR, mlm_args, data=MLM_DATA)[1]
    got = run("mlm_pp4", 4, cfg, BERT_DIR, mlm_args + ["--pipeline-parallel-size", "4"],
              data=MLM_DATA)[1]
    compare("mlm on pp4 (padded rows; the middle stages receive the mask)", ref, got, 1e-5)
    # Tensor-parallel BERT: bidirectional heads, token types, the embedding's norm after the
    # vocabulary-parallel sum, and the masked-LM head's bias split with the tied decoder's
    # columns; with the pipeline too (the padding mask through the stages).
    got = run("mlm_tp2", 2, cfg, BERT_DIR, mlm_args + ["--tensor-parallel-size", "2"],
              data=MLM_DATA)[1]
    compare("mlm on tp2 (the masked-LM head's bias split with the vocabulary)", ref, got, 1e-5)
    got = run("mlm_pp2_tp2", 4, cfg, BERT_DIR, mlm_args + ["--tensor-parallel-size", "2",
                                                           "--pipeline-parallel-size", "2"],
              data=MLM_DATA)[1]
    compare("mlm on pp2 x tp2", ref, got, 1e-5)

    # Checkpoints: a pipeline's checkpoint is the whole model's (one file per data-parallel rank
    # and stage), so it resumes on the pipeline, on one process, and a one-process checkpoint
    # on a pipeline of another shape; each resume's steps 4.. must equal the uninterrupted run's.
    half = STEPS // 2
    full = refs[("gpt2-tiny", 4, False)]
    g4 = config("ck_g4", 0, 4)
    ck_pp, ck_one = os.path.join(TMP, "ck_pp"), os.path.join(TMP, "ck_one")
    run("save_pp2", 2, g4, "gpt2-tiny", ["--pipeline-parallel-size", "2", "--save", ck_pp],
        steps=half)
    run("save_one", 1, g4, "gpt2-tiny", ["--save", ck_one], steps=half)
    tag = f"global_step{half}"
    meta = json.load(open(os.path.join(ck_pp, tag, "mp_rank_00_model_states.json")))
    stages = [u.get("stage") for u in meta["model"]["units"]]
    check("pipeline checkpoint layout", meta["mp_world_size"] == 2 and stages[0] == 0 and
          stages[-1] == 1 and sorted(meta["files"]) == [
              "zero_pp_rank_0_mp_rank_00_optim_states.safetensors",
              "zero_pp_rank_0_mp_rank_01_optim_states.safetensors"],
          f"mp_world_size {meta['mp_world_size']}, unit stages {stages}, files {sorted(meta['files'])}")
    resumes = [("resume pp2 -> pp2", 2, g4, ["--pipeline-parallel-size", "2", "--load", ck_pp]),
               ("resume pp2 -> one process", 1, g4, ["--load", ck_pp]),
               ("resume one process -> pp2 x dp2 zero1", 4, config("ck_g2s1", 1, 2),
                ["--pipeline-parallel-size", "2", "--load", ck_one]),
               ("resume pp2 without optimizer state (control)", 2, g4,
                ["--pipeline-parallel-size", "2", "--load", ck_pp, "--no-load-optimizer-states"])]
    b = to_fp32(ck_one, os.path.join(TMP, "fp_one"))
    scale = max(max(abs(x) for x in t) for t in b.values())

    def check_fp32(label, ckpt):
        a = to_fp32(ckpt, os.path.join(TMP, "fp_" + label.replace(" ", "_")))
        same = set(a) == set(b) and all(len(a[k]) == len(b[k]) for k in b)
        worst = max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in b) if same else 1e9
        check(f"to-fp32 of the {label} checkpoint", same and worst <= 1e-5 * scale,
              f"{len(a)} tensors, max abs diff {worst:.2e} "
              f"(tol 1e-5 x max|p| = {1e-5 * scale:.2e})")

    def check_resume(label, world, cfg, extra):
        _, got, _ = run(label.replace(" ", "_").replace(">", ""), world, cfg, "gpt2-tiny", extra)
        worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(full[half:], got))
        starts = [r["step"] for r in got] == list(range(half + 1, STEPS + 1))
        if "control" in label:
            check(label, starts and worst > 100 * 1e-5,
                  f"worst loss rel diff {worst:.2e}: must miss the 1e-5 bound by far")
        else:
            check(label, starts and worst <= 1e-5, f"steps {[r['step'] for r in got]}, worst loss "
                                                    f"rel diff {worst:.2e} (tol 1e-5)")

    for label, world, cfg, extra in resumes:
        check_resume(label, world, cfg, extra)
    check_fp32("pipeline", ck_pp)

    # Tensor-parallel checkpoints: each tensor rank's chunks in files of their own (mp_rank =
    # stage x T + tensor rank, DeepSpeed's model-parallel rank) and every rank's slices in the
    # metadata, so a TP=2 save resumes on TP=2, on one process and on PP=2 x TP=2, and a
    # one-process save on TP=2 x DP=2 at ZeRO 1 (each rank's shard of its part), through whole
    # parameters where the tensor layouts differ; sequence parallelism changes no parameter, so
    # the TP=2 save resumes with it too. The control resumes on one process without the
    # optimizer state: the momentum the re-slice restores is what makes the steps equal.
    ck_tp = os.path.join(TMP, "ck_tp")
    tp2 = ["--tensor-parallel-size", "2"]
    run("save_tp2", 2, g4, "gpt2-tiny", tp2 + ["--save", ck_tp], steps=half)
    meta = json.load(open(os.path.join(ck_tp, tag, "mp_rank_00_model_states.json")))
    split = [p["name"] for u in meta["model"]["units"] for p in u["params"]
             if "tensor_parallel" in p]
    blocks = sum(u["name"].startswith("h.") for u in meta["model"]["units"])
    # (a GPT-2 block splits q|k|v's weight and bias, the attention output's weight and the MLP's
    # three; the token table is split too)
    check("tensor-parallel checkpoint layout", meta.get("tensor_parallel_size") == 2 and
          meta["mp_world_size"] == 2 and len(split) == 6 * blocks + 1 and sorted(meta["files"]) == [
              "zero_pp_rank_0_mp_rank_00_optim_states.safetensors",
              "zero_pp_rank_0_mp_rank_01_optim_states.safetensors"],
          f"tensor_parallel_size {meta.get('tensor_parallel_size')}, mp_world_size "
          f"{meta['mp_world_size']}, {len(split)} split parameters, files {sorted(meta['files'])}")
    p = subprocess.run([ZT, "ckpt", "inspect", ck_tp, "--verify"], env=ENV, capture_output=True,
                       text=True, timeout=300)
    check("inspect --verify of the tensor-parallel checkpoint", p.returncode == 0 and
          "x 2 tensor-parallel ranks" in p.stdout and "verified" in p.stdout,
          p.stdout.strip().splitlines()[-1:] + p.stderr.strip().splitlines()[-1:])
    for label, world, cfg, extra in [
            ("resume tp2 -> tp2", 2, g4, tp2 + ["--load", ck_tp]),
            ("resume tp2 -> one process", 1, g4, ["--load", ck_tp]),
            ("resume tp2 -> pp2 x tp2", 4, g4,
             tp2 + ["--pipeline-parallel-size", "2", "--load", ck_tp]),
            ("resume tp2 -> tp2 sequence-parallel", 2, g4,
             tp2 + ["--sequence-parallel", "--load", ck_tp]),
            ("resume one process -> tp2 x dp2 zero1", 4, config("ck_tp_g2s1", 1, 2),
             tp2 + ["--load", ck_one]),
            ("resume tp2 -> one process without optimizer state (control)", 1, g4,
             ["--load", ck_tp, "--no-load-optimizer-states"])]:
        check_resume(label, world, cfg, extra)
    check_fp32("tensor-parallel", ck_tp)
    # export-hf reads parts of split tensors (the token table cut back to the vocabulary's 257
    # rows takes one row of rank 1's half of the padded 320): the same tensors as the
    # one-process export.
    exports = []
    for label, ckpt in (("one", ck_one), ("tp", ck_tp)):
        out = os.path.join(TMP, "hf_" + label)
        p = subprocess.run([ZT, "ckpt", "export-hf", ckpt, out], env=ENV, capture_output=True,
                           text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"export-hf {ckpt} exited {p.returncode}:\n{p.stderr[-2000:]}")
        exports.append(load_f32(os.path.join(out, "model.safetensors")))
    one, tp = exports
    same = set(one) == set(tp) and all(len(one[k]) == len(tp[k]) for k in one)
    worst = max(max(abs(x - y) for x, y in zip(one[k], tp[k])) for k in one) if same else 1e9
    check("export-hf of the tensor-parallel checkpoint", same and worst <= 1e-5 * scale,
          f"{len(tp)} tensors, max abs diff {worst:.2e} (tol {1e-5 * scale:.2e})")
    # Shared key/value heads in a checkpoint: llama-tiny saved on TP=4 (each of its 2 heads on
    # two ranks, both writing it) resumes on one process as the uninterrupted run.
    full_llama = refs[("llama-tiny", 4, False)]
    ck_kv = os.path.join(TMP, "ck_kv")
    run("save_tp4_kv", 4, g4, "llama-tiny", ["--tensor-parallel-size", "4", "--save", ck_kv],
        steps=half)
    _, got, _ = run("resume_tp4_kv_one", 1, g4, "llama-tiny", ["--load", ck_kv])
    worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(full_llama[half:], got))
    check("resume tp4 with shared key/value heads -> one process",
          [r["step"] for r in got] == list(range(half + 1, STEPS + 1)) and worst <= 1e-5,
          f"worst loss rel diff {worst:.2e} (tol 1e-5)")

    p = run("refuse_stage2", 2, config("refuse_stage2", 2, 4), "gpt2-tiny",
            ["--pipeline-parallel-size", "2"], expect_fail=True)
    check("refuses ZeRO-2", p.returncode != 0 and "incompatible with pipeline parallelism" in
          p.stderr and "stage is 2" in p.stderr, p.stderr.strip().splitlines()[-1:])
    p = run("refuse_divide", 3, config("refuse_divide", 0, 4), "gpt2-tiny",
            ["--pipeline-parallel-size", "2"], expect_fail=True)
    check("refuses P not dividing the ranks", p.returncode != 0 and
          "does not divide the 3 ranks" in p.stderr, p.stderr.strip().splitlines()[-1:])
    p = run("refuse_tp_async", 2, config("refuse_tp_async", 0, 4), "gpt2-tiny",
            ["--tensor-parallel-size", "2", "--save", os.path.join(TMP, "ck_async"),
             "--save-async"], expect_fail=True)
    check("refuses --save-async with tensor parallelism", p.returncode != 0 and "--save-async "
          "does not work with --tensor-parallel-size" in p.stderr,
          p.stderr.strip().splitlines()[-1:])
    p = run("refuse_sp_alone", 2, config("refuse_sp_alone", 0, 4), "gpt2-tiny",
            ["--pipeline-parallel-size", "2", "--sequence-parallel"], expect_fail=True)
    check("refuses --sequence-parallel without tensor parallelism", p.returncode != 0 and
          "needs --tensor-parallel-size 2 or more" in p.stderr, p.stderr.strip().splitlines()[-1:])
    p = run("refuse_sp_seq", 2, config("refuse_sp_seq", 0, 4), "gpt2-tiny",
            ["--tensor-parallel-size", "2", "--sequence-parallel", "--seq-len", "31"],
            expect_fail=True)
    check("refuses a sequence length the tensor size does not divide", p.returncode != 0 and
          "multiple of 2" in p.stderr, p.stderr.strip().splitlines()[-1:])
    p = run("refuse_async", 2, config("refuse_async", 0, 4), "gpt2-tiny",
            ["--pipeline-parallel-size", "2", "--save", os.path.join(TMP, "ck"), "--save-async"],
            expect_fail=True)
    check("refuses --save-async with a pipeline", p.returncode != 0 and "--save-async does not "
          "work with --pipeline-parallel-size" in p.stderr, p.stderr.strip().splitlines()[-1:])
finally:
    shutil.rmtree(TMP, ignore_errors=True)

print(f"{passed} passed, {len(failures)} failed")
if failures:
    print("failed:", ", ".join(failures))
sys.exit(1 if failures else 0)
