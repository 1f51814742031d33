#!/usr/bin/env bash
# Configures and builds ZeroTrain into ./build (Release). Extra arguments go to cmake, e.g.
# -DZT_CUDA=OFF for a CPU-only build or -DCMAKE_CUDA_ARCHITECTURES=80 for another GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${ZT_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" -j "$(nproc)"
