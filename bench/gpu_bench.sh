#!/usr/bin/env bash
# The CUDA benchmark table of issue 17 on a GPU machine (docs/bench.md, "CUDA"): makes random
# TinyLlama-1.1B- and Llama-3-8B-shaped models once (`1bit convert --random ... --type f16`, then
# `1bit quantize` to Q4_0, Q4_K_M, Q8_0), then runs bench/e2e_bench.cpp on `--device cuda` for each:
# pp512 and tg128 tok/s (best / median of REPS), weight GB per token, the device copy bandwidth
# measured right before each decode run, the roofline and decode's fraction of it.
#   bench/gpu_bench.sh BUILD_DIR [WORK_DIR] [REPS]     (BUILD_DIR with bin/1bit and bin/e2e_bench)
# Vocabularies: $ONEBIT_VOCAB_DIR (default .cudahelper/vocab, else ../shared/testdata/vocab) with
# ggml-vocab-llama-spm.gguf (TinyLlama) and llama3.gguf (Llama 3: `1bit convert --vocab-only
# ../shared/testdata/tokenizers/llama3/tokenizer.json llama3.gguf`).
# ONEBIT_BENCH_MODELS="tinyllama llama3-8b" (the default; "qwen3moe" adds the 4-layer
# Qwen3-30B-A3B-shaped mixture of experts, with qwen3.gguf: `1bit convert --vocab-only
# ../shared/testdata/tokenizers/qwen3 qwen3.gguf`) and ONEBIT_BENCH_TYPES="F16 Q8_0 Q4_0 Q4_K_M" pick rows;
# ONEBIT_BENCH_MAKE_ONLY=1 makes the models and stops. ONEBIT_BENCH_COMPARE="nographs nox15 baseline"
# adds decode rows per model (no pp) with ONEBIT_CUDA_GRAPHS=0 (op by op launches), with
# ONEBIT_CUDA_X15=0 ("nox15": one-row Q4_0 / Q8_0 products on the float path) and with
# ONEBIT_CUDA_GRAPHS=0 ONEBIT_CUDA_PANELS=0 (also the row kernels: the backend before issue 17's
# decode work), and "nomma" prompt rows (pp512, tg16) with ONEBIT_CUDA_MMA=0 (float tiles instead
# of tensor cores), "nopdl" with ONEBIT_CUDA_PDL=0 (no panel product launched before the kernel
# before it ends) and "nopipe" with ONEBIT_CUDA_PIPE=0 (the decode loop of one register buffer),
# measured in the same run. Last, the concurrency rows of each model's Q4_0 file
# (ONEBIT_BENCH_CONCURRENCY, default 1,4,16,64,256; "" skips them). ONEBIT_BENCH_LLAMA=DIR (a
# llama.cpp CUDA build with bin/llama-bench: bench/build_llama_cuda.sh) adds llama.cpp's pp512 /
# tg128 row (all layers on the GPU) and the ratio row after each of ours, on the same file, its
# fastest of flash attention off and on (ONEBIT_BENCH_LLAMA_ARGS, default "-fa 0,1", are added to
# llama-bench's arguments).
set -euo pipefail
build=${1:?usage: bench/gpu_bench.sh BUILD_DIR [WORK_DIR] [REPS]}
work=${2:-/tmp/onebit-gpu-bench}
reps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
vocab_dir=${ONEBIT_VOCAB_DIR:-$here/../.cudahelper/vocab}
[ -d "$vocab_dir" ] || vocab_dir=$here/../../shared/testdata/vocab
models=${ONEBIT_BENCH_MODELS:-"tinyllama llama3-8b"}
types=${ONEBIT_BENCH_TYPES:-"F16 Q8_0 Q4_0 Q4_K_M"}
mkdir -p "$work"
log() { echo "[gpu_bench $(date +%H:%M:%S)] $*" >&2; }

make_models() {  # name config vocab
  local name=$1 config=$2 vocab=$3
  if [ ! -f "$work/$name-F16.gguf" ]; then
    log "convert --random $name"
    "$build/bin/1bit" convert --random "$config" --tokenizer "$vocab" --type f16 "$work/$name-F16.gguf" >&2
  fi
  for t in $types; do
    [ "$t" = F16 ] && continue
    if [ ! -f "$work/$name-$t.gguf" ]; then
      log "quantize $name $t"
      "$build/bin/1bit" quantize "$work/$name-F16.gguf" "$work/$name-$t.gguf" "$t" >&2
    fi
  done
}

for m in $models; do
  case $m in
    tinyllama) make_models tinyllama "$here/tinyllama-1.1b.config.json" "$vocab_dir/ggml-vocab-llama-spm.gguf" ;;
    llama3-8b) make_models llama3-8b "$here/llama3-8b.config.json" "$vocab_dir/llama3.gguf" ;;
    qwen3moe) make_models qwen3moe "$here/qwen3-30b-a3b-4l.config.json" "$vocab_dir/qwen3.gguf" ;;
    *) echo "unknown model $m" >&2; exit 2 ;;
  esac
done
[ "${ONEBIT_BENCH_MAKE_ONLY:-0}" = 1 ] && exit 0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >&2 || true

echo "| model | backend | threads | pp512 tok/s best / median | tg128 tok/s best / median | weight GB/token | copy GB/s best / median | roofline tok/s (median) | tg / roofline best / median |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in $models; do
  for t in $types; do
    f=$work/$m-$t.gguf
    log "e2e_bench $m $t"
    row=$("$build/bin/e2e_bench" "$f" --device cuda --pp 512 --tg 128 --reps "$reps" | sed "s|$work/||")
    echo "$row"
    if [ -n "${ONEBIT_BENCH_LLAMA:-}" ]; then
      log "llama-bench $m $t"
      # shellcheck disable=SC2086
      bash "$here/llama_bench_row.sh" "$ONEBIT_BENCH_LLAMA" "$f" "$m-$t" - "$reps" "$row" -ngl 99 ${ONEBIT_BENCH_LLAMA_ARGS--fa 0,1}
    fi
    for v in ${ONEBIT_BENCH_COMPARE:-}; do
      case $v in
        nographs) env=(ONEBIT_CUDA_GRAPHS=0) ;;
        nox15) [ "$t" = Q4_0 ] || [ "$t" = Q8_0 ] || continue; env=(ONEBIT_CUDA_X15=0) ;;
        baseline) env=(ONEBIT_CUDA_GRAPHS=0 ONEBIT_CUDA_PANELS=0) ;;
        nopdl) env=(ONEBIT_CUDA_PDL=0) ;;
        nopipe) env=(ONEBIT_CUDA_PIPE=0) ;;
        nomma) env=(ONEBIT_CUDA_MMA=0) ;;
        *) echo "unknown comparison $v" >&2; exit 2 ;;
      esac
      pp=0 tg=128
      [ "$v" = nomma ] && pp=512 tg=16
      env "${env[@]}" "$build/bin/e2e_bench" "$f" --device cuda --pp $pp --tg $tg --reps "$reps" \
        | sed "s|$work/||; s|\.gguf |.gguf ($v) |"
    done
  done
done

# Total tok/s of concurrent streams (issue 17): `1bit bench --only concurrency` against a CUDA server
# of each model's Q4_0 file (when made), 64 tokens per request. ONEBIT_BENCH_CONCURRENCY picks the
# levels ("" skips it); the server gets --parallel of the largest level and --ctx-size 512.
levels=${ONEBIT_BENCH_CONCURRENCY-1,4,16,64,256}
if [ -n "$levels" ]; then
  most=$(echo "$levels" | tr ',' '\n' | sort -n | tail -1)
  for m in $models; do
    f=$work/$m-Q4_0.gguf
    [ -f "$f" ] || continue
    log "1bit bench concurrency $m"
    echo
    echo "Concurrent streams, $m-Q4_0 (total tok/s, best / median of 2 runs per level):"
    "$build/bin/1bit" bench -m "$f" --config "cuda=--device cuda --parallel $most --ctx-size 512" \
      --only concurrency --concurrency "$levels" --concurrency-runs 2 --concurrency-tokens 64 \
      -o "$work/bench-$m" >&2 && grep -E '^\| (metric|total tok/s|TTFT|---)' "$work/bench-$m/bench.md"
  done
fi
