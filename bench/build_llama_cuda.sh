#!/usr/bin/env bash
# Builds llama.cpp's llama-bench with its CUDA backend, outside the project, for the side-by-side
# rows of bench/gpu_bench.sh (ONEBIT_BENCH_LLAMA). SOURCE is a llama.cpp checkout or a .tgz of one
# (scripts/gpu_carry.sh packs one into .cudahelper/ when given LLAMA_SRC); Release, sm_90, no curl.
#   bench/build_llama_cuda.sh SOURCE [BUILD_DIR]     (default /tmp/llama-cuda; prints BUILD_DIR)
set -euo pipefail
src=${1:?usage: bench/build_llama_cuda.sh SOURCE [BUILD_DIR]}
build=${2:-/tmp/llama-cuda}
if [ -f "$src" ]; then  # a .tgz: unpacked afresh (a stale tree from an earlier one is not picked)
  rm -rf /tmp/llama-src-unpacked && mkdir -p /tmp/llama-src-unpacked
  tar -xzf "$src" -C /tmp/llama-src-unpacked
  src=$(find /tmp/llama-src-unpacked -maxdepth 2 -name CMakeLists.txt -printf '%h\n' | sort | head -1)
fi
[ -f "$src/CMakeLists.txt" ] || { echo "build_llama_cuda: no llama.cpp source at $src" >&2; exit 2; }
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF >&2
cmake --build "$build" -j"$(nproc)" --target llama-bench >&2
[ -x "$build/bin/llama-bench" ] || { echo "build_llama_cuda: $build/bin/llama-bench was not built" >&2; exit 1; }
echo "$build"
