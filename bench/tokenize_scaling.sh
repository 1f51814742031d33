#!/usr/bin/env bash
# Tokenizer encoding speed against the thread count, ZeroTrain next to Hugging Face tokenizers
# and tiktoken, on one machine in one run: the CPU's cores and threads per core, then MB/s at
# 1, 2, 4, 8 and all threads on a GPT-2-sized byte-level BPE (bench/tokenizer_train_gpt2.py)
# trained on a ZT_TOK_MB (default 20) MB text, and a table of the numbers and ratios last.
# Usage: bench/tokenize_scaling.sh [BIN_DIR] (default gpu_bundle/bin; its libraries in
# BIN_DIR/../lib or gpu_bundle/lib). Needs python3 with tokenizers and tiktoken.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-gpu_bundle/bin}
export LD_LIBRARY_PATH="$bin/../lib:$PWD/gpu_bundle/lib:${LD_LIBRARY_PATH:-}"
out=${OUT:-gpu_out}
tk=${ZT_TOK_DIR:-/tmp/zt_tok_scaling}
mkdir -p "$out" "$tk"
: >"$out/tokenize_scaling.jsonl"
lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\))' |
  tee "$out/cpu.txt"
nt=$(nproc)
[ -s "$tk/text.txt" ] ||
  python3 tests/fixtures/tokenizers/make_fixtures.py --corpus "$tk/text.txt" --mb "${ZT_TOK_MB:-20}" >/dev/null
[ -s "$tk/gpt2_50k/tokenizer.json" ] ||
  python3 bench/tokenizer_train_gpt2.py "$tk/text.txt" "$tk/gpt2_50k" | tail -1
threads="1 2 4 8 $nt"
for n in $threads; do
  [ "$n" -gt "$nt" ] && continue
  "$bin"/zt_bench_tokenizer --tokenizer "$tk/gpt2_50k" --text "$tk/text.txt" --threads "$n" \
    >>"$out/tokenize_scaling.jsonl" 2>>"$out/tokenize_scaling.log" || tail -3 "$out/tokenize_scaling.log"
done
variants="tokenizers-encode,tiktoken"
for n in $threads; do
  [ "$n" -gt 1 ] && [ "$n" -le "$nt" ] && variants="$variants,tokenizers-batch-fast@$n,tiktoken@$n"
done
python3 bench/tokenize_peer.py --tokenizer "$tk/gpt2_50k" --text "$tk/text.txt" --threads "$nt" \
  --variants "$variants" >>"$out/tokenize_scaling.jsonl" 2>>"$out/tokenize_scaling.log" ||
  tail -3 "$out/tokenize_scaling.log"
python3 - "$out/tokenize_scaling.jsonl" <<'PY'
import json, sys
rows = []
for line in open(sys.argv[1]):
    if line.strip():
        rows += json.loads(line).get("results", [])
best = {}  # (engine, threads) -> warm MB/s
for r in rows:
    eng = r.get("engine", "?")
    key = ("tokenizers" if eng.startswith("tokenizers") else eng, int(r.get("threads", 1)))
    best[key] = max(best.get(key, 0.0), float(r.get("MBps", 0.0)))
zt1 = best.get(("zerotrain", 1))
print(f"{'engine':<12}{'threads':>8}{'MB/s':>10}{'x 1 thread':>12}{'zt / this':>11}")
for (eng, n) in sorted(best, key=lambda k: (k[0], k[1])):
    v = best[(eng, n)]
    one = best.get((eng, 1))
    zt = best.get(("zerotrain", n))
    print(f"{eng:<12}{n:>8}{v:>10.1f}{(v / one if one else 0):>12.2f}{(zt / v if zt else 0):>11.2f}")
PY
