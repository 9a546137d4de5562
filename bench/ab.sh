#!/usr/bin/env bash
# Decode A/B in one run: e2e_bench's tg (fixed tokens, no prompt) for each model under each
# environment variant, every round running every variant once in turn (a shared machine drifts:
# compare variants within a round, and best / median over rounds), one table of e2e_bench's own
# numbers (tg tok/s best / median of its repetitions, and its roofline fraction).
#   bench/ab.sh BUILD_DIR DEVICE ROUNDS MODEL.gguf... -- VARIANT...
# DEVICE: cpu or cuda; VARIANT: "-" (the environment as it is) or NAME=VALUE[,NAME=VALUE...].
# AB_TG (default 128) tokens and AB_REPS (default 3) repetitions a run; AB_ARGS more e2e_bench
# arguments (e.g. "--threads 2"). Example, on the GPU machine:
#   bench/ab.sh build-gpu cuda 2 /tmp/gb/llama3-8b-Q4_0.gguf -- - ONEBIT_CUDA_X15=0
set -euo pipefail
usage="usage: bench/ab.sh BUILD_DIR DEVICE ROUNDS MODEL.gguf... -- VARIANT..."
[ $# -ge 5 ] || { echo "$usage" >&2; exit 2; }
build=$1 device=$2 rounds=$3
shift 3
models=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do models+=("$1"); shift; done
[ $# -gt 0 ] || { echo "bench/ab.sh: no -- before the variants ($usage)" >&2; exit 2; }
shift
variants=("$@")
[ ${#models[@]} -gt 0 ] && [ ${#variants[@]} -gt 0 ] || { echo "$usage" >&2; exit 2; }
[ -x "$build/bin/e2e_bench" ] || { echo "bench/ab.sh: no $build/bin/e2e_bench (cmake --build $build --target e2e_bench)" >&2; exit 2; }
for m in "${models[@]}"; do [ -f "$m" ] || { echo "bench/ab.sh: no model file $m" >&2; exit 2; }; done
case $rounds in ''|*[!0-9]*|0) echo "bench/ab.sh: ROUNDS must be a positive number, not '$rounds'" >&2; exit 2 ;; esac
for v in "${variants[@]}"; do
  [ "$v" = - ] || [[ $v =~ ^[A-Za-z_][A-Za-z0-9_]*=[^,]*(,[A-Za-z_][A-Za-z0-9_]*=[^,]*)*$ ]] ||
    { echo "bench/ab.sh: variant '$v' is not NAME=VALUE[,NAME=VALUE...] or -" >&2; exit 2; }
done
echo "| model | variant | round | tg${AB_TG:-128} tok/s best / median | of the roofline best / median |"
echo "|---|---|---|---|---|"
for r in $(seq 1 "$rounds"); do
  for m in "${models[@]}"; do
    for v in "${variants[@]}"; do
      env_args=()
      if [ "$v" != - ]; then
        IFS=, read -r -a env_args <<< "$v"
      fi
      # e2e_bench's table row: | file | device | threads | pp | tg | GB/token | copy | roofline | fraction |
      row=$(env "${env_args[@]}" "$build/bin/e2e_bench" "$m" --device "$device" --pp 0 --tg "${AB_TG:-128}" \
              --reps "${AB_REPS:-3}" ${AB_ARGS:-} | grep '^| ' | tail -1)
      tg=$(cut -d'|' -f6 <<< "$row" | xargs)
      frac=$(cut -d'|' -f10 <<< "$row" | xargs)
      echo "| $(basename "$m") | $v | $r | $tg | $frac |"
    done
  done
done
