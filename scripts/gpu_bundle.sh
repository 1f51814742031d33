#!/usr/bin/env bash
# Builds the CUDA binaries here (no GPU needed to compile) and bundles them, with the shared
# libraries they need that a stock CUDA machine may lack (Gloo and its dependencies), into
# gpu_bundle/ (git-ignored). scripts/gpu_check.sh (one GPU) and scripts/gpu_dist_check.sh (two
# GPUs) and scripts/gpu_scaling.py (4 or 8) run the bundle on the GPU machines.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${ZT_GPU_BUILD_DIR:-build-gpu}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$build_dir" -j "$(nproc)" \
  --target zt_cli zt_gpu_tests zt_bench_gpt2 zt_comm_bench zt_bench_attention zt_bench_cpu_adam \
  zt_bench_pinned_alloc zt_bench_ckpt zt_bench_generate zt_bench_tokenizer zt_bench_disk zt_bench_pipe \
  zt_bench_norm zt_unit_tests
rm -rf gpu_bundle
mkdir -p gpu_bundle/bin gpu_bundle/lib
cp "$build_dir"/bin/zt "$build_dir"/bin/zt_bench_gpt2 "$build_dir"/bin/zt_comm_bench \
  "$build_dir"/bin/zt_bench_attention "$build_dir"/bin/zt_bench_cpu_adam \
  "$build_dir"/bin/zt_bench_pinned_alloc "$build_dir"/bin/zt_bench_ckpt \
  "$build_dir"/bin/zt_bench_generate "$build_dir"/bin/zt_bench_tokenizer "$build_dir"/bin/zt_bench_disk \
  "$build_dir"/bin/zt_bench_pipe "$build_dir"/bin/zt_bench_norm \
  gpu_bundle/bin/
cp "$build_dir"/tests/zt_gpu_tests "$build_dir"/tests/zt_unit_tests gpu_bundle/bin/
strip gpu_bundle/bin/*
# Libraries the binaries load that a stock CUDA machine lacks (Gloo and its dependencies; the
# GPU image has glibc, libstdc++, CUDA, NCCL, OpenBLAS, gfortran, gomp and fmt 9).
for b in gpu_bundle/bin/*; do
  ldd "$b" | awk '/=>/ {print $3}'
done | sort -u | grep -vE 'libopenblas|libgfortran|libquadmath|libgomp|libfmt|libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libcuda|libcudart|libcublas|libnccl|libpthread|libdl\.so|librt\.so' |
  while read -r lib; do cp -L "$lib" gpu_bundle/lib/; done
du -sh gpu_bundle
# The device machines take at most 64 MiB of carried files with the tree: the compressed bundle
# is what travels (`tar -xJf gpu_bundle.tar.xz` there before running the scripts).
tar -cf - gpu_bundle | xz -T2 -6 >gpu_bundle.tar.xz
du -sh gpu_bundle.tar.xz
