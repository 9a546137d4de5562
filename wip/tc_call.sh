#!/bin/bash
# Session 27: bench/gpu.sh on the tree (panel_mma_kernel: 5..64-row products on the panels' tensor
# cores), then steps of n tokens and concurrent streams against ONEBIT_CUDA_PANEL_MMA=0.
#   run(command="bash wip/tc_call.sh; cat $OUT/summary.txt", carry=[".cudahelper"])
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
source .cudahelper/env.sh
mkdir -p $OUT/gpu
OUT=$OUT/gpu bash bench/gpu.sh build-gpu > $OUT/gpu_tests.txt 2>&1
echo "bench/gpu.sh rc $? at $(el) s" >> $S
grep -A12 "=== summary ===" $OUT/gpu_tests.txt >> $S
grep -E "^\[  FAILED|Failure|error:" $OUT/gpu/*.log | head -30 >> $S
if grep -q "build of the test binaries FAILED\|configure FAILED" $OUT/gpu_tests.txt; then
  grep -B2 -A8 "error" $OUT/gpu/build.log | head -80 >> $S
  # The CUDA change does not build: the tests again on the tree without it (the CPU changes alone).
  cp wip/cuda_backend.orig.cu src/backend/cuda/cuda_backend.cu && rm -f src/backend/cuda/panel_mma.cuh
  mkdir -p $OUT/gpu0
  OUT=$OUT/gpu0 bash bench/gpu.sh build-gpu > $OUT/gpu_tests0.txt 2>&1
  echo "WITHOUT panel_mma: bench/gpu.sh rc $? at $(el) s" >> $S
  grep -A12 "=== summary ===" $OUT/gpu_tests0.txt >> $S
  grep -E "^\[  FAILED|Failure|error:" $OUT/gpu0/*.log | head -30 >> $S
  exit 0
fi
B=build-gpu
cmake --build $B -j16 --target onebit_cli onebit_model onebit_backend cuda_matvec_bench > $OUT/build2.log 2>&1 || { tail -20 $OUT/build2.log >> $S; exit 1; }
g++ -O2 -std=c++20 -Isrc -I$B/src -I$B -I$B/generated tools/model/step_time.cpp -o /tmp/step_time $B/libonebit_model.a $B/libonebit_backend.a \
  $B/libonebit_gguf.a $B/libonebit_base.a -lpthread -L/usr/local/cuda/lib64 -lcudart >> $S 2>&1
ONEBIT_BENCH_MODELS=tinyllama ONEBIT_BENCH_TYPES="Q4_0 Q8_0" ONEBIT_BENCH_MAKE_ONLY=1 bash bench/gpu_bench.sh $B /tmp/gb 2 > $OUT/models.log 2>&1
echo "models at $(el) s" >> $S
M=/tmp/gb/tinyllama-Q4_0.gguf
for v in "X=1" "ONEBIT_CUDA_PANEL_MMA=0" "X=2" "ONEBIT_CUDA_PANEL_MMA=0"; do
  echo "== step_time $(basename $M) $v" >> $S
  env $v timeout 40 /tmp/step_time $M cuda 1 1,4,5,8,9,16,32,64 8 >> $S 2>&1
done
echo "at $(el) s" >> $S
for v in "X=1" "ONEBIT_CUDA_PANEL_MMA=0"; do
  echo "== concurrency $v" >> $S
  env $v ONEBIT_ENGINE_STATS=1 timeout 120 $B/bin/1bit bench -m $M --config "cuda=--device cuda --parallel 64 --ctx-size 512" \
    --only concurrency --concurrency 1,16,64 --concurrency-runs 1 --concurrency-tokens 64 -o /tmp/bc > $OUT/bench.log 2>&1
  grep -E '^\| (metric|total tok/s|---)' /tmp/bc/bench.md >> $S
  grep -rh "engine:" /tmp/bc/ >> $S 2>/dev/null
done
echo "at $(el) s" >> $S
for r in 16 64; do
  echo "== cuda_matvec_bench --rows $r (8B shapes) vs ONEBIT_CUDA_PANEL_MMA=0" >> $S
  timeout 60 $B/bin/cuda_matvec_bench --rows $r --reps 5 --n 10 --vs ONEBIT_CUDA_PANEL_MMA=0 >> $S 2>&1
done
echo "at $(el) s" >> $S
M=/tmp/gb/tinyllama-Q8_0.gguf
for v in "X=1" "ONEBIT_CUDA_PANEL_MMA=0"; do
  echo "== step_time $(basename $M) $v" >> $S
  env $v timeout 40 /tmp/step_time $M cuda 1 1,4,5,8,9,16,32,64 8 >> $S 2>&1
done
echo "== onebit-20m drafting, 4 slots: panel_mma / ONEBIT_CUDA_PANEL_MMA=0 at $(el) s" >> $S
timeout 120 python3 bench/interleaved_decode.py --binary $B/bin/1bit -m models/onebit-20m-q8_0.gguf \
  --config off="--device cuda --parallel 4" \
  --config dflash="--device cuda --parallel 4 --dflash models/onebit-20m-dflash-q8_0.gguf --mtp-fixed --mtp-max 7" \
  --config dflash0="ONEBIT_CUDA_PANEL_MMA=0 --device cuda --parallel 4 --dflash models/onebit-20m-dflash-q8_0.gguf --mtp-fixed --mtp-max 7" \
  --rounds 1 --tokens 128 --concurrency 1,4 >> $S 2>&1
echo "end at $(el) s" >> $S
