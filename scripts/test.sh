#!/usr/bin/env bash
# The second README command: installs what is missing, builds, and runs the whole test suite
# (GPU tests skip themselves without a GPU). Then, unless ZT_SKIP_SANITIZE=1, builds the unit
# and op tests with AddressSanitizer + UndefinedBehaviorSanitizer (CPU only) and runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
if [ "${ZT_SKIP_SANITIZE:-0}" != "1" ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DZT_CUDA=OFF -DZT_SANITIZE=ON \
    -DZT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j "$(nproc)" --target zt_unit_tests zt_ops_tests zt_fuzz_driver
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -L 'unit|ops'
fi
