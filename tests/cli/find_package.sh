#!/usr/bin/env bash
# The library installs with a CMake package config: install this build into a temp prefix, build
# examples/consumer (a user's own trainer) against it with find_package(ZeroTrain), and run it:
# its loss must fall. Usage: find_package.sh ZT_BINARY SOURCE_DIR
set -euo pipefail
zt=$1
src=$2
build_dir=$(dirname "$(dirname "$zt")")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/examples/consumer" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
printf '{"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 0.02}}}' >"$tmp/ds.json"
out=$(OMP_WAIT_POLICY=PASSIVE "$tmp/build/my_trainer" "$tmp/ds.json" 80 2>/dev/null)
echo "$out" | tail -3
first=$(echo "$out" | head -1 | awk '{print $4}')
last=$(echo "$out" | tail -1 | awk '{print $4}')
python3 -c "import sys; f, l = float('$first'), float('$last'); sys.exit(0 if l < f - 1.0 else 1)" || {
  echo "loss did not fall: $first -> $last"; exit 1; }
echo "1 passed, 0 failed"
