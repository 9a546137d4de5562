#!/usr/bin/env bash
# One GPU-machine call that trains a larger family (train.py --preset m60: the onebit-60m target
# and its MTP head, DFlash drafter and draft model, jointly) while bench/gpu.sh builds and runs the
# CUDA tests, converts the family to GGUF with that build's 1bit, and measures acceptance and
# decode with each drafter against drafting off: PyTorch on the engine's files
# (tools/model/acceptance.py torch), the engine on CUDA and on 2 of this host's CPU cores
# (acceptance.py engine). The files stay there (the device returns at most 64 MiB; the Q8_0 family
# is ~80 MB): this command is how to get them. docs/models.md, "onebit-60m".
# Needs tools/train/data_pack (prepare_data.py) and .cudahelper (scripts/gpu_carry.sh):
#   run(command="bash tools/train/run_family_device.sh", carry=[".cudahelper", "tools/train/data_pack"])
# TRAIN_SECONDS (default 170), EVAL_SECONDS (40), PRESET (m60), NAME (onebit-60m), CAP (570: seconds
# from the start by which the CPU measurement is cut off).
set -uo pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
S=$OUT/summary.txt
W=/tmp/onebit_family
NAME=${NAME:-onebit-60m}
rm -rf "$W" && mkdir -p "$W/gguf"
source .cudahelper/env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >>"$S"
# bench/gpu.sh (the CUDA tests, then 1bit) while the family trains: the CPU is idle then, and the
# tests' kernels are small beside the training's. Its summary: $OUT/gpu_tests.txt.
(OUT=$W/gpu_logs bash bench/gpu.sh build-gpu >"$OUT/gpu_tests.txt" 2>&1
  echo "bench/gpu.sh rc $? at $(el) s" >>"$W/built.txt") &
BP=$!
python3 tools/train/train.py --data tools/train/data_pack --out "$W" --preset "${PRESET:-m60}" \
  --train-seconds "${TRAIN_SECONDS:-170}" --eval-seconds "${EVAL_SECONDS:-40}" >"$OUT/train_log.txt" 2>&1
echo "train rc $? at $(el) s" >>"$S"
grep -E "parameters|tokenizer vocab|training done|held-out|accept|tokens/step|all done" "$OUT/train_log.txt" | tail -14 >>"$S"
cp "$W/results.json" "$OUT/" 2>/dev/null
wait $BP
cat "$W/built.txt" >>"$S"
B=build-gpu/bin/1bit
grep -A8 "=== summary ===" "$OUT/gpu_tests.txt" >>"$S"
CUDA_OK=1
if [ ! -x $B ]; then  # the CUDA build failed: a CPU build, so the trained family is still measured
  tail -30 "$OUT/gpu_tests.txt" >>"$S"
  CUDA_OK=0 B=build-cpu/bin/1bit
  { cmake -S . -B build-cpu -G Ninja -DONEBIT_CUDA=OFF -DCMAKE_BUILD_TYPE=Release && cmake --build build-cpu -j16 --target onebit_cli; } \
    >"$W/cpu_build.log" 2>&1
  echo "CPU-only 1bit rc $? at $(el) s" >>"$S"
  [ -x $B ] || { tail -20 "$W/cpu_build.log" >>"$S"; exit 1; }
fi
G=$W/gguf/$NAME
$B convert "$W/export/target" "$G-q8_0.gguf" --type q8_0 >>"$S" 2>&1
for d in mtp dflash draft; do $B convert "$W/export/$d" "$G-$d-q8_0.gguf" --type q8_0 >>"$S" 2>&1; done
ls -la "$W/gguf" >>"$S"
A="python3 tools/model/acceptance.py"
$A prompts --binary $B --family "$G" --heldout tools/train/data_pack/heldout.jsonl.xz --out "$W/prompts.json" >>"$S" 2>&1
cp "$W/prompts.json" "$OUT/"
# The engine on 2 CPU cores (its own: the GPU work runs beside it on the others), then PyTorch and
# the engine on CUDA.
taskset -c 2-3 $A engine --binary $B --family "$G" --prompts "$W/prompts.json" --threads 2 --port 8569 \
  --out "$OUT/engine_cpu.json" >"$W/engine_cpu.log" 2>&1 &
CP=$!
timeout 150 taskset -c 4-15 $A torch --binary $B --family "$G" --prompts "$W/prompts.json" --out "$OUT/torch.json" >"$W/torch.log" 2>&1
echo "acceptance (PyTorch, GGUF weights) rc $? at $(el) s" >>"$S"
tail -4 "$W/torch.log" >>"$S"
if [ $CUDA_OK = 1 ]; then
  timeout 150 taskset -c 4-15 $A engine --binary $B --family "$G" --prompts "$W/prompts.json" --torch "$OUT/torch.json" \
    --device cuda --out "$OUT/engine_cuda.json" >"$W/engine_cuda.log" 2>&1
  echo "acceptance (engine, CUDA) rc $? at $(el) s" >>"$S"
  cat "$W/engine_cuda.log" >>"$S"
fi
left=$((${CAP:-570} - $(el)))
(sleep $((left > 5 ? left : 5)); kill $CP 2>/dev/null) &
wait $CP
echo "acceptance (engine, 2 CPU cores) rc $? at $(el) s" >>"$S"
cat "$W/engine_cpu.log" >>"$S"
echo "end at $(el) s" >>"$S"
