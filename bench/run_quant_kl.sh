#!/usr/bin/env bash
# KL divergence of every weight type against F32 logits on a random-init llama of realistic width
# (bench/quant-kl-1024.config.json; docs/engine.md). Makes the F32 model once (again when the config
# is newer), quantizes it to each type, then runs quant_kl on the opening of War and Peace tokenized
# with the model's vocabulary and prints the markdown table.
# Usage: bench/run_quant_kl.sh BUILD_DIR [WORK_DIR] [TOKENS] [THREADS] [SEED]
# (models under WORK_DIR/seed-SEED; another seed is another random model of the same shape)
# Trained weights instead: KL_HF_DIR=HF_CHECKPOINT_DIR converts that checkpoint to F32 (models under
# WORK_DIR/hf-NAME), and KL_TEXT=FILE evaluates on another text.
set -euo pipefail
build=${1:?usage: bench/run_quant_kl.sh BUILD_DIR [WORK_DIR] [TOKENS] [THREADS] [SEED]}
tokens=${3:-1024}
threads=${4:-$(nproc)}
seed=${5:-1}
hf=${KL_HF_DIR:-}
if [ -n "$hf" ]; then work=${2:-/tmp/onebit-kl}/hf-$(basename "$hf"); else work=${2:-/tmp/onebit-kl}/seed-$seed; fi
here=$(cd "$(dirname "$0")" && pwd)
config=$here/quant-kl-1024.config.json
vocab=$here/../../shared/testdata/vocab/ggml-vocab-llama-spm.gguf
text=${KL_TEXT:-$here/../../shared/testdata/text/war-and-peace.txt}
types=${KL_TYPES:-"F16 BF16 Q8_0 Q6_K Q5_K_M Q5_K Q5_1 Q5_0 Q4_K_M Q4_K Q4_1 Q4_0 Q4_0-H32 Q4_0-H32-W4A4"}  # -H32: --hadamard 32
mkdir -p "$work"
if [ -n "$hf" ]; then
  if [ ! -f "$work/F32.gguf" ] || [ "$hf/model.safetensors" -nt "$work/F32.gguf" ]; then
    rm -f "$work"/*.gguf
    "$build/bin/1bit" convert "$hf" "$work/F32.gguf" --type f32
  fi
elif [ ! -f "$work/F32.gguf" ] || [ "$config" -nt "$work/F32.gguf" ]; then
  rm -f "$work"/*.gguf
  "$build/bin/1bit" convert --random "$config" --tokenizer "$vocab" --type f32 --seed "$seed" "$work/F32.gguf"
fi
quants=()
w4a4=()  # a type ending in -W4A4: the rotated file, its prompts on the 4-bit grid (ONEBIT_W4A4=1)
for t in $types; do
  q=${t%-W4A4}
  [ -f "$work/$q.gguf" ] || "$build/bin/1bit" quantize "$work/F32.gguf" "$work/$q.gguf" "${q%-H32}" \
    $([ "${q%-H32}" != "$q" ] && echo --hadamard 32) >/dev/null
  if [ "$q" != "$t" ]; then
    cp "$work/$q.gguf" "$work/$t.gguf"
    w4a4+=("$work/$t.gguf")
  else
    quants+=("$work/$t.gguf")
  fi
done
"$build/bin/quant_kl" "$work/F32.gguf" "${quants[@]}" --text "$text" --tokens "$tokens" --threads "$threads"
if [ ${#w4a4[@]} -gt 0 ]; then
  ONEBIT_W4A4=1 "$build/bin/quant_kl" "$work/F32.gguf" "${w4a4[@]}" --text "$text" --tokens "$tokens" \
    --threads "$threads" | grep '^| Q'
fi
