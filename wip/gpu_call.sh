#!/bin/bash
# The lean GPU-machine check of wip/cuda-prompts-wgmma-flash.patch (applied), for a call with little
# device time left: build, the op tests (flash attention on; every 5+ row product forced on the
# GEMM, on wgmma and on mma.sync), the CUDA model tests, then pp512 of a TinyLlama-shaped F16 and
# Q4_0 file under the default, ONEBIT_CUDA_WGMMA=0 and ONEBIT_CUDA_FLASH=0 ONEBIT_CUDA_WGMMA=0
# while CALL_SECS (default 360) last. Here: a build, then `bash scripts/gpu_carry.sh`; there:
#   run(command="CALL_SECS=380 timeout 400 bash wip/gpu_call.sh; cat $OUT/summary.txt", carry=[".cudahelper"])
# The full check that lands it is `bash bench/gpu.sh` (engine tests included).
set -u
T0=$(date +%s); DL=$((T0 + ${CALL_SECS:-360}))
left() { echo $((DL - $(date +%s))); }
S=$OUT/summary.txt
source .cudahelper/env.sh
DEPS=${ONEBIT_DEPS:-$PWD/.cudahelper/deps}
pkg-config --exists cpp-httplib || export PKG_CONFIG_PATH="$DEPS/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
[ -f .cudahelper/testdata/stories260K.gguf ] && export ONEBIT_STORIES260K=$PWD/.cudahelper/testdata/stories260K.gguf
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
cmake -S . -B build-gpu -G Ninja -DONEBIT_CUDA=ON -DCMAKE_BUILD_TYPE=Release > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log" >> "$S"; exit 1; }
cmake --build build-gpu -j16 --target backend_tests model_tests e2e_bench onebit_cli > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30 >> "$S"; exit 1; }
echo "built at $(( $(date +%s) - T0 )) s" >> "$S"
( build-gpu/bin/1bit convert --random bench/tinyllama-1.1b.config.json --tokenizer .cudahelper/vocab/ggml-vocab-llama-spm.gguf --type f16 /tmp/t16.gguf && build-gpu/bin/1bit quantize /tmp/t16.gguf /tmp/tq4.gguf Q4_0 ) > "$OUT/models.log" 2>&1 &
MP=$!
timeout 120 build-gpu/backend_tests --gtest_filter='Backends/BackendOpsTest.*' > "$OUT/ops.log" 2>&1; echo "ops rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/ops.log" | tr '\n' ' ')" >> "$S"
ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_FLASH=0 timeout 60 build-gpu/backend_tests --gtest_filter='Backends/BackendOpsTest.*Matmul*:Backends/BackendOpsTest.*PagedAttention*' > "$OUT/gemm_wg.log" 2>&1; echo "gemm wgmma + flash off rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/gemm_wg.log" | tr '\n' ' ')" >> "$S"
ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_WGMMA=0 timeout 60 build-gpu/backend_tests --gtest_filter='Backends/BackendOpsTest.*Matmul*' > "$OUT/gemm_sync.log" 2>&1; echo "gemm mma.sync rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/gemm_sync.log" | tr '\n' ' ')" >> "$S"
grep -hE '^\[  FAILED  \]|Failure' "$OUT/ops.log" "$OUT/gemm_wg.log" "$OUT/gemm_sync.log" | head -20 >> "$S"
grep -h "op-error.*paged_attention" "$OUT/ops.log" "$OUT/gemm_wg.log" | head -12 >> "$S"
for L in ops gemm_wg gemm_sync; do
  echo "$L worst cuda matmul nmse: $(grep 'op-error\] cuda.*matmul' "$OUT/$L.log" | sed 's/.*nmse=\([^ ]*\).*/\1/' | sort -g | tail -1) of $(grep -c 'op-error\] cuda.*matmul' "$OUT/$L.log")" >> "$S"
done
timeout 120 build-gpu/model_tests --gtest_filter='CudaModel.*' > "$OUT/model.log" 2>&1; echo "CudaModel rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/model.log" | tr '\n' ' ')" >> "$S"
grep -hE "cuda-model|Failure|FAILED" "$OUT/model.log" | head -20 >> "$S"
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$S"
wait $MP
for f in /tmp/tq4.gguf /tmp/t16.gguf; do
  for v in ONEBIT_X=1 ONEBIT_CUDA_WGMMA=0 "ONEBIT_CUDA_FLASH=0 ONEBIT_CUDA_WGMMA=0"; do
    [ "$(left)" -gt 25 ] || break
    echo "$f $v" >> "$S"; env $v timeout 40 build-gpu/bin/e2e_bench $f --device cuda --pp 512 --tg 16 --reps 3 >> "$S" 2>>"$OUT/e2e.err"
  done
done
echo "end at $(( $(date +%s) - T0 )) s" >> "$S"
