#!/bin/bash
# Session 28: bench/gpu.sh on the tree (step programs off by default, tested on), then the
# programs' trace and decode timings against the default, same call.
#   run(command="bash wip/pg_final.sh; cat $OUT/summary.txt", carry=[".cudahelper"])
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { [ $(el) -lt ${1:-500} ]; }
S=$OUT/summary.txt
source .cudahelper/env.sh
mkdir -p $OUT/gpu
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
OUT=$OUT/gpu bash bench/gpu.sh build-gpu > $OUT/gpu_tests.txt 2>&1
echo "bench/gpu.sh rc $? at $(el) s" >> $S
grep -A12 "=== summary ===" $OUT/gpu_tests.txt >> $S
grep -E "^\[  FAILED|Failure|error:" $OUT/gpu/*.log | head -30 >> $S
grep -h "op-error\] cuda decode layer" $OUT/gpu/*.log | sort -t= -k3 -g | tail -3 >> $S
grep -c "PASSED\|OK \]" $OUT/gpu/cuda_model.log >> $S
if grep -q "build of the test binaries FAILED\|configure FAILED" $OUT/gpu_tests.txt; then
  grep -B2 -A8 "error" $OUT/gpu/build.log | head -80 >> $S
  exit 0
fi
B=build-gpu
cmake --build $B -j16 --target onebit_cli e2e_bench onebit_model onebit_backend > $OUT/build2.log 2>&1 || { tail -20 $OUT/build2.log >> $S; exit 1; }
g++ -O2 -std=c++20 -Isrc -I$B/src -I$B -I$B/generated tools/model/step_time.cpp -o /tmp/step_time $B/libonebit_model.a $B/libonebit_backend.a \
  $B/libonebit_gguf.a $B/libonebit_base.a -lpthread -L/usr/local/cuda/lib64 -lcudart >> $S 2>&1
ONEBIT_BENCH_MODELS="tinyllama llama3-8b" ONEBIT_BENCH_TYPES="Q4_0" ONEBIT_BENCH_MAKE_ONLY=1 bash bench/gpu_bench.sh $B /tmp/gb 2 > $OUT/models.log 2>&1
echo "models at $(el) s" >> $S
for M in models/onebit-20m-q8_0.gguf /tmp/gb/tinyllama-Q4_0.gguf /tmp/gb/llama3-8b-Q4_0.gguf; do
  echo "== trace, e2e_bench tg64 $(basename $M), ONEBIT_CUDA_PROGRAM=1" >> $S
  ONEBIT_CUDA_PROGRAM=1 ONEBIT_CUDA_PROGRAM_TRACE=1 timeout 60 $B/bin/e2e_bench $M --device cuda --pp 0 --tg 64 --reps 1 2>&1 | grep -E "^\||trace" >> $S
done
for v in "ONEBIT_CUDA_PROGRAM=1" "X=0"; do
  echo "== step_time $v" >> $S
  env $v timeout 40 /tmp/step_time models/onebit-20m-q8_0.gguf cuda 1 1,4 8 >> $S 2>&1
  env $v timeout 40 /tmp/step_time /tmp/gb/tinyllama-Q4_0.gguf cuda 1 1,4 8 >> $S 2>&1
done
echo "at $(el) s" >> $S
left 450 && AB_REPS=3 timeout 120 bash bench/ab.sh $B cuda 1 /tmp/gb/tinyllama-Q4_0.gguf /tmp/gb/llama3-8b-Q4_0.gguf -- ONEBIT_CUDA_PROGRAM=1 - >> $S 2>&1
echo "end at $(el) s" >> $S
