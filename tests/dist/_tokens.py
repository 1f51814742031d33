"""Token files for the multi-process tests (not a test: no main): llm.c's format and a seeded
Markov chain over a small vocabulary that the tiny models can learn a little of."""
import array
import random
import struct


def write_tokens(path, tokens):
    """llm.c's format (src/zt/data/token_file.h): 256 int32 header, then uint16 tokens."""
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(array.array("H", tokens).tobytes())


def markov_tokens(count, vocab, seed=7):
    """`count` ids below `vocab`, each a seeded step from the last."""
    rng = random.Random(seed)
    tokens, t = [], 0
    for _ in range(count):
        t = (t * 31 + 7 + rng.choice([0, 0, 0, 1, 5])) % vocab
        tokens.append(t)
    return tokens
