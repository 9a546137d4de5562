#!/usr/bin/env bash
# End-to-end benchmark of the CPU backend on a TinyLlama-1.1B-shaped random model (docs/bench.md),
# next to llama.cpp on the same files when given its build.
# Usage: bench/run_e2e.sh BUILD_DIR [WORK_DIR] [REPS] [LLAMA_CPP_BUILD_DIR]
#   THREADS="1 2" (default; "1 2 4 8 16" on a 16-core host) and TYPES="Q4_0 Q8_0 Q4_K_M Q5_K_M"
#   (default) choose the rows; a type ending in -H32 is that type Hadamard-rotated (--hadamard 32;
#   no llama.cpp row: llama.cpp does not rotate activations). ONEBIT_VOCAB names the vocabulary
#   GGUF where ../shared is absent (default ../shared/testdata/vocab/ggml-vocab-llama-spm.gguf).
# Makes the model (F16, then each type) once, then prints one table row per type and thread count:
# pp512 and tg128 tok/s (best / median of REPS), weight GB per token, measured read bandwidth
# (GB/s), the decode roofline (tok/s) and decode as a fraction of it (best / median). With a
# llama.cpp build (its bin/llama-bench), each row is followed by llama-bench's on the same file,
# threads and repetitions (mean of REPS, as llama-bench reports; the roofline column is 1bit's, of
# the same run), and a ratio row: 1bit's median over llama.cpp's mean.
set -euo pipefail
build=${1:?usage: bench/run_e2e.sh BUILD_DIR [WORK_DIR] [REPS] [LLAMA_CPP_BUILD_DIR]}
work=${2:-/tmp/onebit-bench}
reps=${3:-3}
llama=${4:-}
threads_list=${THREADS:-1 2}
types=${TYPES:-Q4_0 Q8_0 Q4_K_M Q5_K_M}
here=$(cd "$(dirname "$0")" && pwd)
vocab=${ONEBIT_VOCAB:-$here/../../shared/testdata/vocab/ggml-vocab-llama-spm.gguf}
if [ -n "$llama" ] && [ ! -x "$llama/bin/llama-bench" ]; then
  echo "run_e2e: $llama/bin/llama-bench not found; give llama.cpp's build directory" >&2
  exit 2
fi
mkdir -p "$work"
if [ ! -f "$work/tinyllama-f16.gguf" ]; then
  "$build/bin/1bit" convert --random "$here/tinyllama-1.1b.config.json" --tokenizer "$vocab" \
    --type f16 "$work/tinyllama-f16.gguf"
fi
for t in $types; do
  [ -f "$work/tinyllama-$t.gguf" ] || "$build/bin/1bit" quantize "$work/tinyllama-f16.gguf" "$work/tinyllama-$t.gguf" \
    "${t%-H32}" $([ "${t%-H32}" != "$t" ] && echo --hadamard 32)
done
echo "| model | backend | threads | pp512 tok/s best / median | tg128 tok/s best / median | weight GB/token | read GB/s best / median | roofline tok/s (median) | tg / roofline best / median |"
echo "|---|---|---|---|---|---|---|---|---|"
for t in $types; do
  for threads in $threads_list; do
    row=$("$build/bin/e2e_bench" "$work/tinyllama-$t.gguf" --threads "$threads" --pp 512 --tg 128 --reps "$reps")
    echo "$row"
    [ -n "$llama" ] && [ "${t%-H32}" = "$t" ] || continue
    bash "$here/llama_bench_row.sh" "$llama" "$work/tinyllama-$t.gguf" "tinyllama-$t" "$threads" "$reps" "$row" -t "$threads"
  done
done
