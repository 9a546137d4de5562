#!/usr/bin/env bash
# End-to-end benchmark of the CPU backend on a TinyLlama-1.1B-shaped random model (docs/bench.md).
# Usage: bench/run_e2e.sh BUILD_DIR [WORK_DIR] [REPS]
# Makes the model (F16, then Q4_0 / Q8_0 / Q4_K_M / Q5_K_M) once, then prints one table row per
# type and thread count: pp512 and tg128 tok/s (best / median of REPS), weight GB per token, measured read
# bandwidth (GB/s), the decode roofline (tok/s) and decode as a fraction of it (best / median).
set -euo pipefail
build=${1:?usage: bench/run_e2e.sh BUILD_DIR [WORK_DIR] [REPS]}
work=${2:-/tmp/onebit-bench}
reps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
vocab=$here/../../shared/testdata/vocab/ggml-vocab-llama-spm.gguf
mkdir -p "$work"
if [ ! -f "$work/tinyllama-f16.gguf" ]; then
  "$build/bin/1bit" convert --random "$here/tinyllama-1.1b.config.json" --tokenizer "$vocab" \
    --type f16 "$work/tinyllama-f16.gguf"
fi
for t in Q4_0 Q8_0 Q4_K_M Q5_K_M; do
  [ -f "$work/tinyllama-$t.gguf" ] || "$build/bin/1bit" quantize "$work/tinyllama-f16.gguf" "$work/tinyllama-$t.gguf" $t
done
echo "| model | backend | threads | pp512 tok/s best / median | tg128 tok/s best / median | weight GB/token | read GB/s best / median | roofline tok/s (median) | tg / roofline best / median |"
echo "|---|---|---|---|---|---|---|---|---|"
for t in Q4_0 Q8_0 Q4_K_M Q5_K_M; do
  for threads in 1 2; do
    "$build/bin/e2e_bench" "$work/tinyllama-$t.gguf" --threads $threads --pp 512 --tg 128 --reps "$reps"
  done
done
