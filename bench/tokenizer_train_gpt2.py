#!/usr/bin/env python3
"""Trains a GPT-2-sized byte-level BPE (GPT-2's pipeline, 50,257 ids) with Hugging Face
`tokenizers` on a text split at blank lines, offline, for the tokenizer benchmarks
(scripts/gpu_check.sh section `tokenize`, bench/tokenize_scaling.sh).

  python3 bench/tokenizer_train_gpt2.py TEXT OUTDIR
"""
import os, sys, time
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
text, outdir = sys.argv[1], sys.argv[2]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
trainer = trainers.BpeTrainer(vocab_size=50257, min_frequency=2, show_progress=False,
                              special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
with open(text, encoding="utf-8", newline="") as f:
    docs = [d for d in f.read().split("\n\n") if d]
t = time.time()
tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
os.makedirs(outdir, exist_ok=True)
path = os.path.join(outdir, "tokenizer.json")
tok.save(path)
again = Tokenizer.from_file(path)
s = "Hello, World! def f(x):\n    return x**2  # caf\u00e9 \u4f60\u597d"
assert again.decode(again.encode(s).ids) == s
print(f"trained {again.get_vocab_size()} tokens on {len(docs)} documents in {time.time() - t:.1f} s")
