#!/usr/bin/env python3
"""Encoding speed of ZeroTrain's tokenizer peers on one text: Hugging Face `tokenizers` (the
library whose ids ZeroTrain reproduces) and OpenAI's `tiktoken`, on one core and on N cores.
The peer of bench/tokenizer_bench.cc (zt_bench_tokenizer); scripts/gpu_check.sh (section
`tokenize`) runs both on the same tokenizer and text and tabulates the ratios.

  python3 bench/tokenize_peer.py --tokenizer DIR/tokenizer.json --text FILE [--threads N]
      [--seconds 2] [--batch 1024] [--variants a,b,...] [--json OUT]

The text is split into documents at blank lines ("\\n\\n", as str.split does; empty documents
dropped), exactly as zt_bench_tokenizer splits it. Each document is encoded on its own, without
special tokens. MB/s is the documents' UTF-8 bytes (separators not counted) per second.

Variants (each runs in a fresh process, so the thread pool is sized by the environment before
`tokenizers` is imported and the first pass is a cold one):
  tokenizers-encode        tok.encode per document, one core (RAYON_NUM_THREADS=1)
  tokenizers-batch         tok.encode_batch over batches of documents, RAYON_NUM_THREADS=1
  tokenizers-batch-fast    tok.encode_batch_fast (no offsets), where the version has it
  tokenizers-batch@N       encode_batch on N threads (RAYON_NUM_THREADS=N)
  tokenizers-batch-fast@N  encode_batch_fast on N threads
  tiktoken                 enc.encode_ordinary per document (one core)
  tiktoken@N               enc.encode_ordinary_batch(batch, num_threads=N)
Each variant makes one cold pass over the documents (the libraries cache words too), then
repeats passes until --seconds have gone by; the warm MB/s is over those passes.

tiktoken gets the same byte-level BPE, built offline from the tokenizer.json (never
tiktoken.get_encoding): mergeable_ranks = {token bytes: id} over the model vocabulary, the bytes
recovered through GPT-2's bytes_to_unicode map, and pat_str = the pre-tokenizer's regex (the
Split pattern of a Sequence, or GPT-2's own for a plain ByteLevel). The ids of a trained
byte-level BPE follow its merge order, so the ranks are the merge ranks; tiktoken may still
merge differently in places (it merges any pair whose concatenation is a token, and takes a
whole piece that is a token at once), so only the token counts are compared, and they should be
close. tokenizers' ids are summarized as a CRC-32 (zlib.crc32 over the ids as little-endian
int32, documents in order) that zt_bench_tokenizer computes the same way: equal CRCs mean equal
ids over the whole text.

Prints human-readable lines on stderr and one JSON line on stdout (also written to --json).
"""

import argparse
import array
import json
import os
import subprocess
import sys
import time
import zlib

GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_docs(path):
    with open(path, "r", encoding="utf-8", newline="") as f:
        text = f.read()
    docs = [d for d in text.split("\n\n") if d]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    return docs, nbytes


def bytes_to_unicode():
    """GPT-2's map from each byte to the printable character that stands for it."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
          list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def tiktoken_spec(tokenizer_json):
    """(pat_str, mergeable_ranks, notes) for a byte-level BPE tokenizer.json."""
    with open(tokenizer_json, "r", encoding="utf-8") as f:
        obj = json.load(f)
    notes = []
    model = obj.get("model") or {}
    if model.get("type") != "BPE":
        raise SystemExit(f"tokenize_peer: tiktoken needs a BPE model, not {model.get('type')}")
    pre = obj.get("pre_tokenizer")
    pat = None
    parts = [pre] if pre else []
    if pre and pre.get("type") == "Sequence":
        parts = pre.get("pretokenizers") or []
    byte_level = False
    for p in parts:
        t = p.get("type")
        if t == "Split" and pat is None:
            pattern = p.get("pattern") or {}
            if "Regex" in pattern:
                pat = pattern["Regex"]
            else:
                notes.append("Split with a plain string pattern: not a regex tiktoken can use")
        elif t == "ByteLevel":
            byte_level = True
            if p.get("use_regex", True) and pat is None:
                pat = GPT2_PAT
            if p.get("add_prefix_space"):
                notes.append("ByteLevel add_prefix_space: tiktoken adds no leading space")
        else:
            notes.append(f"pre-tokenizer {t}: tiktoken has no equivalent")
    if not byte_level:
        raise SystemExit("tokenize_peer: tiktoken needs a byte-level BPE (ByteLevel pre-tokenizer)")
    if pat is None:
        pat = GPT2_PAT
        notes.append("no regex found: GPT-2's pattern used")
    if obj.get("normalizer"):
        notes.append(f"normalizer {obj['normalizer'].get('type')}: tiktoken does not normalize")
    special = {t["content"] for t in obj.get("added_tokens") or [] if t.get("special")}
    decoder = {c: b for b, c in bytes_to_unicode().items()}
    ranks, skipped = {}, 0
    for token, rank in model["vocab"].items():
        if token in special:
            continue
        try:
            bs = bytes(decoder[c] for c in token)
        except KeyError:
            skipped += 1
            continue
        if bs in ranks:
            skipped += 1
            ranks[bs] = min(ranks[bs], rank)
            continue
        ranks[bs] = rank
    if skipped:
        notes.append(f"{skipped} vocabulary entries not byte-level (or duplicates) left out")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    assert not missing, f"byte tokens missing from the vocabulary: {missing[:10]}"
    return pat, ranks, notes


def time_passes(one_pass, nbytes, seconds):
    """(cold MB/s, warm MB/s, tokens of one pass, warm passes, warm seconds)."""
    t = time.perf_counter()
    tokens = one_pass()
    cold_s = time.perf_counter() - t
    passes, warm_s = 0, 0.0
    while passes == 0 or warm_s < seconds:
        t = time.perf_counter()
        n = one_pass()
        warm_s += time.perf_counter() - t
        passes += 1
        assert n == tokens, f"token count changed between passes: {tokens} then {n}"
    return nbytes / cold_s / 1e6, nbytes * passes / warm_s / 1e6, tokens, passes, warm_s


def batches(docs, size):
    return [docs[i:i + size] for i in range(0, len(docs), size)]


def ids_crc32(id_lists):
    crc = 0
    for ids in id_lists:
        a = array.array("i", ids)
        assert a.itemsize == 4
        if sys.byteorder != "little":
            a.byteswap()
        crc = zlib.crc32(a.tobytes(), crc)
    return crc


def worker(args):
    """One variant in this process; prints its JSON result."""
    variant = args.worker
    name, _, nthreads = variant.partition("@")
    threads = int(nthreads) if nthreads else 1
    docs, nbytes = read_docs(args.text)
    chunks = batches(docs, args.batch)
    extra = {}
    if name.startswith("tokenizers"):
        import tokenizers  # after the environment set RAYON_NUM_THREADS
        tok = tokenizers.Tokenizer.from_file(args.tokenizer)
        extra["version"] = tokenizers.__version__
        if name == "tokenizers-encode":
            def one_pass():
                n = 0
                for d in docs:
                    n += len(tok.encode(d, add_special_tokens=False))
                return n
        elif name in ("tokenizers-batch", "tokenizers-batch-fast"):
            fast = name.endswith("-fast")
            if fast and not hasattr(tok, "encode_batch_fast"):
                print(json.dumps({"engine": name, "threads": threads, "skipped":
                                  f"tokenizers {tokenizers.__version__} has no encode_batch_fast"}))
                return
            enc = tok.encode_batch_fast if fast else tok.encode_batch

            def one_pass():
                n = 0
                for c in chunks:
                    n += sum(len(e) for e in enc(c, add_special_tokens=False))
                return n
        else:
            raise SystemExit(f"unknown variant {variant}")
    elif name == "tiktoken":
        import tiktoken
        pat, ranks, notes = tiktoken_spec(args.tokenizer)
        enc = tiktoken.Encoding(name="zt_bench", pat_str=pat, mergeable_ranks=ranks,
                                special_tokens={})
        extra["version"] = getattr(tiktoken, "__version__", "?")
        extra["notes"] = notes
        if nthreads:
            def one_pass():
                n = 0
                for c in chunks:
                    n += sum(len(x) for x in enc.encode_ordinary_batch(c, num_threads=threads))
                return n
        else:
            def one_pass():
                n = 0
                for d in docs:
                    n += len(enc.encode_ordinary(d))
                return n
    else:
        raise SystemExit(f"unknown variant {variant}")
    cold, warm, tokens, passes, warm_s = time_passes(one_pass, nbytes, args.seconds)
    r = {"engine": name, "threads": threads, "cold_MBps": round(cold, 3),
         "MBps": round(warm, 3), "tokens": tokens, "passes": passes,
         "seconds": round(warm_s, 3)}
    r.update(extra)
    if args.crc:
        ids = []
        for c in chunks:
            ids.extend(e.ids for e in tok.encode_batch(c, add_special_tokens=False))
        r["ids_crc32"] = ids_crc32(ids)
    print(json.dumps(r))


def main():
    ap = argparse.ArgumentParser(description="tokenizers and tiktoken encoding speed")
    ap.add_argument("--tokenizer", required=True, help="a tokenizer.json (or its folder)")
    ap.add_argument("--text", required=True)
    ap.add_argument("--threads", type=int, default=0, help="N for the N-core variants "
                    "(default: the CPUs this process may use)")
    ap.add_argument("--seconds", type=float, default=2.0, help="warm timing per variant")
    ap.add_argument("--batch", type=int, default=1024, help="documents per batch call")
    ap.add_argument("--variants", default="", help="comma-separated names as listed above, "
                    "'@N' standing for --threads (default: all)")
    ap.add_argument("--json", help="also write the JSON line here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--crc", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    tokenizer_arg = args.tokenizer
    if os.path.isdir(args.tokenizer):
        args.tokenizer = os.path.join(args.tokenizer, "tokenizer.json")
    if args.worker:
        worker(args)
        return
    n = args.threads if args.threads > 0 else cpu_count()
    one = ["tokenizers-encode", "tokenizers-batch", "tokenizers-batch-fast", "tiktoken"]
    many = ["tokenizers-batch", "tokenizers-batch-fast", "tiktoken"]
    variants = one + [f"{v}@{n}" for v in many]
    if args.variants:
        want = [v.strip() for v in args.variants.split(",") if v.strip()]
        variants = [v.replace("@N", f"@{n}") for v in want]
    docs, nbytes = read_docs(args.text)
    log(f"tokenize_peer: {args.text}: {len(docs)} documents, {nbytes} bytes; "
        f"tokenizer {args.tokenizer}; N = {n}")
    results = []
    # The first tokenizers variant also computes the ids' CRC (one more pass, untimed).
    crc_variant = next((v for v in variants if v.startswith("tokenizers")), None)
    for v in variants:
        env = dict(os.environ)
        _, _, nt = v.partition("@")
        env["RAYON_NUM_THREADS"] = nt if nt else "1"
        env["TOKENIZERS_PARALLELISM"] = "true"
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", v,
               "--tokenizer", args.tokenizer, "--text", args.text,
               "--seconds", str(args.seconds), "--batch", str(args.batch)]
        if v == crc_variant:
            cmd.append("--crc")
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        if p.returncode != 0 or not line:
            log(f"  {v}: FAILED (exit {p.returncode})\n{p.stderr[-2000:]}")
            results.append({"engine": v.partition("@")[0], "threads": int(nt or 1),
                            "error": p.stderr.strip().splitlines()[-1:] or ["?"]})
            continue
        r = json.loads(line)
        results.append(r)
        if "skipped" in r:
            log(f"  {v}: skipped: {r['skipped']}")
        else:
            log(f"  {v:<26} cold {r['cold_MBps']:8.2f} MB/s  warm {r['MBps']:8.2f} MB/s  "
                f"{r['tokens']} tokens")
    ok = [r for r in results if "MBps" in r]
    tk = [r for r in ok if r["engine"].startswith("tokenizers")]
    tt = [r for r in ok if r["engine"] == "tiktoken"]
    out = {"impl": "peers", "tokenizer": tokenizer_arg, "text": args.text,
           "text_bytes": nbytes, "docs": len(docs), "threads": n,
           "tokenizers_version": tk[0].get("version") if tk else None,
           "tiktoken_version": tt[0].get("version") if tt else None,
           "tokens_tokenizers": tk[0]["tokens"] if tk else None,
           "tokens_tiktoken": tt[0]["tokens"] if tt else None,
           "ids_crc32": next((r["ids_crc32"] for r in tk if "ids_crc32" in r), None),
           "tiktoken_notes": tt[0].get("notes", []) if tt else [],
           "results": results}
    if tk and tt:
        a, b = out["tokens_tokenizers"], out["tokens_tiktoken"]
        out["token_count_rel_diff"] = round(abs(a - b) / max(a, 1), 6)
        log(f"token counts: tokenizers {a}, tiktoken {b} "
            f"(relative difference {out['token_count_rel_diff']:.4%})")
        if out["token_count_rel_diff"] > 0.02:
            log("WARNING: the token counts differ by more than 2%: the tiktoken encoding is not "
                "a faithful copy of this tokenizer (see tiktoken_notes)")
    if len({r["tokens"] for r in tk}) > 1:
        log("WARNING: the tokenizers variants disagree on the token count")
    best = {}
    for r in tk:
        best[r["threads"]] = max(best.get(r["threads"], 0.0), r["MBps"])
    out["tokenizers_best_MBps"] = {str(k): v for k, v in sorted(best.items())}
    line = json.dumps(out)
    print(line, flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
