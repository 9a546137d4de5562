#!/bin/bash
# One GPU call: the warp-specialized GEMM as F16's default against ONEBIT_CUDA_WG_WS=0, end to end
# (e2e_bench pp512 on the 8B-shaped F16 and Q4_0 files, rounds alternating) and per product.
#   run(command="CALL_SECS=560 timeout 590 bash wip/ws_e2e.sh; cat $OUT/summary.txt", carry=[".cudahelper"])
set -u
T0=$(date +%s); DL=$((T0 + ${CALL_SECS:-540}))
left() { echo $((DL - $(date +%s))); }
el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
source .cudahelper/env.sh
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
B=build-gpu
[ -f $B/build.ninja ] || cmake -S . -B $B -G Ninja -DONEBIT_CUDA=ON -DCMAKE_BUILD_TYPE=Release > $OUT/configure.log 2>&1
cmake --build $B -j16 --target onebit_cli e2e_bench cuda_matvec_bench > $OUT/build.log 2>&1 || { grep error $OUT/build.log | head >> "$S"; exit 1; }
echo "built at $(el) s" >> "$S"
ONEBIT_BENCH_TYPES="F16 Q4_0" ONEBIT_BENCH_MAKE_ONLY=1 bash bench/gpu_bench.sh $B /tmp/gb 2 > $OUT/models.log 2>&1
echo "models rc $? at $(el) s: $(ls /tmp/gb | tr '\n' ' ')" >> "$S"
echo "== cuda_matvec_bench --rows 512, default (F16 warp-specialized) / ONEBIT_CUDA_WG_WS=0" >> "$S"
timeout 150 $B/bin/cuda_matvec_bench --rows 512 --reps 3 --n 3 --vs ONEBIT_CUDA_WG_WS=0 >> "$S" 2>&1
for round in 1 2 3; do
  for m in llama3-8b-F16 llama3-8b-Q4_0; do
    for v in ONEBIT_X=1 ONEBIT_CUDA_WG_WS=0; do
      [ "$(left)" -gt 40 ] || break
      echo "== $m $v" >> "$S"; env $v timeout 60 $B/bin/e2e_bench /tmp/gb/$m.gguf --device cuda --pp 512 --tg 16 --reps 3 2>>$OUT/e2e.err | grep '^| /' >> "$S"
    done
  done
done
echo "end at $(el) s" >> "$S"
