#!/usr/bin/env bash
# The first README command: installs what is missing, builds everything, and trains a small GPT
# on the default corpus (the GPU when there is one, else the CPU), ending with generated text.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec ./build/bin/zt train --config examples/ds_config_tiny.json --model gpt2-tiny --steps "${ZT_DEMO_STEPS:-200}" "$@"
