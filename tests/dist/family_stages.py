#!/usr/bin/env python3
"""Families beyond GPT-2 under every ZeRO stage, through the real launcher (zt launch, CPU ranks,
Gloo): llama-tiny (grouped-query attention, RMSNorm, SwiGLU, rotary, tied head, the family's
init) and the OPT fixture directory tests/fixtures/hf/opt (fine-tuning from its safetensors:
learned positions from row 2, word_embed_proj_dim projections in and out, ReLU, tied head), each
trained for 10 steps at stages 0, 1, 2 and 3 on 2 ranks and on one process, with gradient
accumulation 1 and 2 (global batch 16 rows of 32 tokens either way).

Oracle: the single-process run of the same stage and config, as in zero_equivalence.py (SGD with
momentum and weight decay, linear in the gradients, so the runs differ only by the order of
floating-point sums; fp32 tolerances: the loss at every step within 1e-5 relative, the final
parameters within 1e-5 relative in norm and element by element within 1e-5 of max|p|). The runs
must also train (the loss falls), or equal runs would prove nothing.

The fixture's weights: `zt eval` (the inference path: no engine, no ZeRO) of the directory on a
token file holding exactly step 1's 16 windows gives the loss at the file's weights; the
single-process step-1 loss of every stage, and the 2-rank stage-3 step-1 loss (ranks that hold
only their partitions of the parameters), must equal it within 1e-5 relative. A copy of the
directory without its safetensors (the family's random init) must miss it by far more, so that
check can fail. Each run's record must show the world size and stage asked for.

Data: both models read one llm.c token file (GPT-2 header, uint16) of ids below 250 (the
fixture's vocabulary), written here: a seeded Markov chain the models can learn a little of.

Usage: family_stages.py ZT_BINARY SOURCE_DIR [--quick]
"""
import array
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from _ports import next_port
from _tokens import markov_tokens, write_tokens

ZT, SRC = sys.argv[1], sys.argv[2]
QUICK = "--quick" in sys.argv
STEPS = 5 if QUICK else 10
STAGES = [0, 3] if QUICK else [0, 1, 2, 3]
SEQ, BATCH, VOCAB = 32, 16, 250
TMP = tempfile.mkdtemp(prefix="zt_family_")
ENV = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "cache"), ZT_COMM_TIMEOUT_S="120",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
OPT_DIR = os.path.join(SRC, "tests", "fixtures", "hf", "opt")
MODELS = [("llama-tiny", "llama-tiny"), ("opt fixture", OPT_DIR)]
port = [0]
failures, passed = [], 0


def make_data():
    tokens = markov_tokens(STEPS * BATCH * SEQ + 1, VOCAB)
    data = os.path.join(TMP, "train.bin")
    write_tokens(data, tokens)
    # Step 1's windows (sequential order: window w is tokens[w*SEQ, w*SEQ + SEQ + 1)), back to
    # back, for `zt eval --seq-len SEQ+1`.
    first = []
    for w in range(BATCH):
        first += tokens[w * SEQ:w * SEQ + SEQ + 1]
    first_batch = os.path.join(TMP, "first_batch.bin")
    write_tokens(first_batch, first)
    return data, first_batch


DATA, FIRST_BATCH = make_data()


def config(stage, gas, path):
    cfg = {"train_batch_size": BATCH, "gradient_accumulation_steps": gas, "gradient_clipping": 0.5,
           "zero_allow_untested_optimizer": True,
           "optimizer": {"type": "SGD",
                         "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}},
           "zero_optimization": {"stage": stage, "reduce_bucket_size": 50000,
                                 "stage3_param_persistence_threshold": 5000}}
    with open(path, "w") as f:
        json.dump(cfg, f)


def run(world, stage, gas, model, tag, steps=STEPS):
    name = f"{tag}_w{world}_s{stage}_g{gas}"
    cfg = os.path.join(TMP, name + ".json")
    config(stage, gas, cfg)
    metrics, params = os.path.join(TMP, name + ".jsonl"), os.path.join(TMP, name + ".bin")
    train = [ZT, "train", "--config", cfg, "--model", model, "--data", DATA, "--device", "cpu",
             "--steps", str(steps), "--seq-len", str(SEQ), "--sample-tokens", "0", "--order",
             "sequential", "--metrics-out", metrics, "--dump-params", params]
    if world > 1:
        port[0] = next_port()
        cmd = [ZT, "launch", "--num_procs", str(world), "--master_port", str(port[0])] + train
    else:
        cmd = train
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{name} exited {p.returncode}:\n{p.stderr[-2000:]}")
    recs = [json.loads(l) for l in open(metrics)]
    run_rec = recs[0]
    if (run_rec.get("world_size"), run_rec.get("zero_stage")) != (world, stage):
        raise RuntimeError(f"{name} ran as world {run_rec.get('world_size')} stage "
                           f"{run_rec.get('zero_stage')}")
    a = array.array("f")
    a.frombytes(open(params, "rb").read())
    return recs[1:], a


def eval_loss(model):
    out = os.path.join(TMP, "eval.json")
    p = subprocess.run([ZT, "eval", "--model", model, "--data", FIRST_BATCH, "--device", "cpu",
                        "--seq-len", str(SEQ + 1), "--metrics-out", out], env=ENV,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"zt eval exited {p.returncode}:\n{p.stderr[-2000:]}")
    return json.load(open(out))["loss"]


def check(name, cond, detail):
    global passed
    if cond:
        passed += 1
        print(f"ok: {name}", flush=True)
    else:
        failures.append(name)
        print(f"FAIL: {name}: {detail}", flush=True)


def rel_norm(a, b):
    num = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    return num / math.sqrt(sum(y * y for y in b))


def rel(a, b):
    return abs(a - b) / abs(b)


file_loss = None
try:
    file_loss = eval_loss(OPT_DIR)
except Exception as e:
    check("zt eval of the fixture", False, str(e))

CASES = [(label, model, stage, gas) for label, model in MODELS for gas in (1, 2) for stage in STAGES]
for label, model, stage, gas in CASES:
    fixture = model == OPT_DIR
    name = f"{label} stage {stage} gas {gas}"
    try:
        ref_steps, ref_params = run(1, stage, gas, model, label.split()[0])
    except Exception as e:  # a failed run is a failed check, the rest still runs
        check(f"{name} single process", False, str(e))
        continue
    check(f"{name} single process trains", len(ref_steps) == STEPS and
          ref_steps[-1]["loss"] < ref_steps[0]["loss"] - 0.01,
          f"loss {ref_steps[0]['loss']:.5f} -> {ref_steps[-1]['loss']:.5f}")
    if fixture and file_loss is not None:
        check(f"{name} single process starts from the file's weights",
              rel(ref_steps[0]["loss"], file_loss) <= 1e-5,
              f"step-1 loss {ref_steps[0]['loss']:.7f}, zt eval {file_loss:.7f}")
    try:
        steps, params = run(2, stage, gas, model, label.split()[0])
    except Exception as e:
        check(f"world 2 {name}", False, str(e))
        continue
    worst = max(rel(s["loss"], r["loss"]) for s, r in zip(steps, ref_steps))
    check(f"world 2 {name}: loss every step", len(steps) == STEPS and worst <= 1e-5,
          f"worst relative loss difference {worst:.3g} > 1e-5")
    pmax = max(abs(x) for x in ref_params)
    pn = rel_norm(params, ref_params)
    elem = max(abs(x - y) for x, y in zip(params, ref_params)) / pmax
    check(f"world 2 {name}: final parameters", len(params) == len(ref_params) and
          pn <= 1e-5 and elem <= 1e-5,
          f"{len(params)} vs {len(ref_params)} values, relative norm difference {pn:.3g}, "
          f"worst element {elem:.3g} of max|p| (tol 1e-5)")
    if fixture and stage == 3 and file_loss is not None:
        check(f"world 2 {name}: ranks start from the file's weights",
              rel(steps[0]["loss"], ref_steps[0]["loss"]) <= 1e-5 and
              rel(steps[0]["loss"], file_loss) <= 1e-5,
              f"step-1 loss {steps[0]['loss']:.7f}, single process "
              f"{ref_steps[0]['loss']:.7f}, zt eval {file_loss:.7f}")

# The control: without its safetensors the directory trains from the family's init, and the
# step-1 loss misses the file's by far more than the tolerance above.
if file_loss is not None:
    bare = os.path.join(TMP, "opt_no_weights")
    os.makedirs(bare)
    shutil.copy(os.path.join(OPT_DIR, "config.json"), bare)
    try:
        steps, _ = run(1, 0, 1, bare, "bare", steps=1)
        check("control: the fixture without weights starts elsewhere",
              rel(steps[0]["loss"], file_loss) > 1e-3,
              f"step-1 loss {steps[0]['loss']:.7f}, with the file's weights {file_loss:.7f}")
    except Exception as e:
        check("control: the fixture without weights", False, str(e))

if not failures:
    shutil.rmtree(TMP, ignore_errors=True)
else:
    print(f"runs kept in {TMP}")
print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
