#!/usr/bin/env bash
# Long fuzzing of every reader (tests/fuzz/fuzz_targets.cc) with clang's coverage-guided
# libFuzzer under AddressSanitizer + UndefinedBehaviorSanitizer: builds build-fuzz/ with clang
# (the library instrumented too), then runs each target for ZT_FUZZ_SECONDS (default 300) on
# all cores, and prints executions and crashes per target. Crash inputs land in fuzz_out/.
# Needs clang and libclang-rt-14-dev (Debian); CI runs the generated-input harness instead.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${ZT_FUZZ_SECONDS:-300}
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is not installed (apt-get install clang libclang-rt-14-dev)"; exit 1; }
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DZT_CUDA=OFF -DZT_BUILD_BENCH=OFF -DZT_WERROR=OFF -DZT_LIBFUZZER=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
targets=(config hostfile token_file safetensors checkpoint_metadata checkpoint_unit hf_config hf_weights jsonl tokenizer_json)
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]/#/zt_fuzz_}"
mkdir -p fuzz_out
for t in "${targets[@]}"; do
  mkdir -p "fuzz_out/$t"
  log="fuzz_out/$t.log"
  ASAN_OPTIONS=detect_leaks=0 build-fuzz/tests/zt_fuzz_$t -max_total_time="$seconds" \
    -max_len=65536 -rss_limit_mb=4096 -artifact_prefix="fuzz_out/$t/" "fuzz_out/$t" >"$log" 2>&1 || true
  execs=$(grep -oE 'Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' | tail -1 || true)
  crashes=$(find "fuzz_out/$t" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  printf '%-20s %12s executions  %s crashes\n' "$t" "${execs:-?}" "$crashes"
done
