#!/bin/bash
# One GPU call: bench/gpu.sh on the tree as it is (the landing tests), then the warp-specialized
# GEMM of wip/gemm-wgmma-ws.patch applied on top: the GEMM tests with every 5+ row product on it,
# and cuda_matvec_bench's prompt-sized products against the default kernel.
#   run(command="bash wip/gpu_ws_call.sh", carry=[".cudahelper"])
set -u
T0=$(date +%s)
OUT=/tmp/glogs bash bench/gpu.sh build-gpu 2>&1 | tail -28
echo "== gpu.sh done at $(( $(date +%s) - T0 )) s"
patch -s -p1 < wip/gemm-wgmma-ws.patch || exit 1
cmake --build build-gpu -j16 --target backend_tests cuda_matvec_bench > /tmp/ws_build.log 2>&1 ||
  { grep -E "error" /tmp/ws_build.log | head -30; exit 1; }
echo "== ws built at $(( $(date +%s) - T0 )) s"
ONEBIT_CUDA_WG_WS=1 ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_FLASH=0 timeout 120 build-gpu/backend_tests \
  --gtest_filter='Backends/BackendOpsTest.*Matmul*' > /tmp/ws_tests.log 2>&1
echo "== ws gemm tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' /tmp/ws_tests.log | tr '\n' ' ') worst nmse $(grep 'op-error\] cuda.*matmul' /tmp/ws_tests.log | sed 's/.*nmse=\([^ ]*\).*/\1/' | sort -g | tail -1)"
grep -hE '^\[  FAILED  \]|Failure' /tmp/ws_tests.log | head -8
timeout 100 build-gpu/bin/cuda_matvec_bench --rows 512 --reps 3 --n 3 --vs ONEBIT_CUDA_WG_WS=1 2>&1 | tail -30
echo "== end at $(( $(date +%s) - T0 )) s"
