#!/usr/bin/env bash
# The first README command: installs what is missing, builds everything, and trains a small GPT
# on the default corpus (the GPU when there is one, else the CPU), ending with generated text.
# ZT_DEMO_MODEL picks the model (gpt2-tiny by default; llama-tiny is the Llama-shaped one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec ./build/bin/zt train --config examples/ds_config_tiny.json --model "${ZT_DEMO_MODEL:-gpt2-tiny}" --steps "${ZT_DEMO_STEPS:-200}" "$@"
