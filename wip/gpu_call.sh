#!/bin/bash
# One GPU-machine call for the wip/ patches (applied): bench/gpu.sh's tests, built in stages (the
# op tests run while the model and engine tests build), while a second build dir makes 1bit and
# e2e_bench and the benchmark models; then pp512 under the default, ONEBIT_CUDA_WGMMA=0 and
# ONEBIT_CUDA_FLASH=0 ONEBIT_CUDA_WGMMA=0 while CALL_SECS (default 540) last. $OUT/summary.txt
# grows as each step ends, so a call cut short still returns what ran. Here: build, then
# `LLAMA_SRC=... bash scripts/gpu_carry.sh`; there:
#   run(command="CALL_SECS=540 timeout 580 bash wip/gpu_call.sh; cat $OUT/summary.txt", carry=[".cudahelper"])
# Landing still wants `bash bench/gpu.sh` whole (it is what this runs, in stages).
set -u
T0=$(date +%s); DL=$((T0 + ${CALL_SECS:-540}))
left() { echo $((DL - $(date +%s))); }
el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
source .cudahelper/env.sh
DEPS=${ONEBIT_DEPS:-$PWD/.cudahelper/deps}
pkg-config --exists cpp-httplib || export PKG_CONFIG_PATH="$DEPS/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
B=build-gpu
( cmake -S . -B build-b -G Ninja -DONEBIT_CUDA=ON -DCMAKE_BUILD_TYPE=Release > $OUT/b_cfg.log 2>&1 &&
  nice -n 5 cmake --build build-b -j16 --target onebit_cli e2e_bench > $OUT/b_build.log 2>&1 &&
  ONEBIT_BENCH_TYPES="F16 Q4_0" ONEBIT_BENCH_MAKE_ONLY=1 bash bench/gpu_bench.sh build-b /tmp/gb 2 > $OUT/models.log 2>&1
  echo "bench build + models rc $? at $(el) s" >> $OUT/bprog.txt ) &
BP=$!
cmake -S . -B $B -G Ninja -DONEBIT_CUDA=ON -DCMAKE_BUILD_TYPE=Release > $OUT/configure.log 2>&1 || { tail -20 $OUT/configure.log >> "$S"; exit 1; }
cmake --build $B -j16 --target backend_tests > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30 >> "$S"; exit 1; }
echo "backend_tests built at $(el) s; $(grep '^CMAKE_CUDA_ARCHITECTURES' $B/CMakeCache.txt); sm_90a images: $( (cuobjdump --list-elf $B/backend_tests 2>/dev/null || /usr/local/cuda/bin/cuobjdump --list-elf $B/backend_tests) | grep -c sm_90a) (0: wgmma never runs, the tests pass on mma.sync)" >> "$S"
( cmake --build $B -j16 --target model_tests engine_tests > $OUT/build2.log 2>&1; echo "model/engine tests built rc $? at $(el) s" >> $OUT/b2.txt ) &
TP=$!
ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_FLASH=0 $B/backend_tests --gtest_filter='Backends/BackendOpsTest.*Matmul*:Backends/BackendOpsTest.*PagedAttention*' > $OUT/gemm_wg.log 2>&1
echo "gemm (rows >= 5; wgmma on Hopper) + flash off rc $? at $(el) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/gemm_wg.log | tr '\n' ' ')" >> "$S"
$B/backend_tests --gtest_filter='Backends/BackendOpsTest.*' > $OUT/ops.log 2>&1
echo "ops rc $? at $(el) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/ops.log | tr '\n' ' ')" >> "$S"
: > $OUT/gemm_sync.log
for slab in 0 128; do
  ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_WGMMA=0 ONEBIT_CUDA_GEMM_SLAB_MB=$slab $B/backend_tests --gtest_filter='Backends/BackendOpsTest.*Matmul*' >> $OUT/gemm_sync.log 2>&1
  echo "gemm mma.sync slab $slab rc $?" >> "$S"
done
grep -hE '^\[  FAILED  \]|Failure' $OUT/ops.log $OUT/gemm_wg.log $OUT/gemm_sync.log | head -20 >> "$S"
for L in ops gemm_wg gemm_sync; do
  echo "$L worst cuda nmse: matmul $(grep 'op-error\] cuda.*matmul' $OUT/$L.log | sed 's/.*nmse=\([^ ]*\).*/\1/' | sort -g | tail -1), paged attention $(grep 'op-error\] cuda.*paged' $OUT/$L.log | sed 's/.*nmse=\([^ ]*\).*/\1/' | sort -g | tail -1)" >> "$S"
done
wait $TP; cat $OUT/b2.txt >> "$S"
$B/model_tests --gtest_filter='CudaModel.*' > $OUT/cuda_model.log 2>&1
echo "CudaModel rc $? at $(el) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/cuda_model.log | tr '\n' ' ')" >> "$S"
grep -hE "cuda-model|Failure|FAILED" $OUT/cuda_model.log | head -12 >> "$S"
$B/engine_tests --gtest_filter='*Hybrids*:*HeadDrafters*:*EngineFake*:*DraftGovernor*' > $OUT/engine.log 2>&1
echo "engine rc $? at $(el) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/engine.log | tr '\n' ' ')" >> "$S"
grep -hE "Failure|FAILED" $OUT/engine.log | head -8 >> "$S"
wait $BP; cat $OUT/bprog.txt >> "$S"
for m in tinyllama-Q4_0 llama3-8b-Q4_0 llama3-8b-F16; do
  for v in ONEBIT_X=1 ONEBIT_CUDA_WGMMA=0 "ONEBIT_CUDA_FLASH=0 ONEBIT_CUDA_WGMMA=0"; do
    [ "$(left)" -gt 30 ] || break
    echo "== $m $v" >> "$S"; env $v timeout 45 build-b/bin/e2e_bench /tmp/gb/$m.gguf --device cuda --pp 512 --tg 16 --reps 3 2>>$OUT/e2e.err | grep '^| /' >> "$S"
  done
done
echo "end at $(el) s" >> "$S"
