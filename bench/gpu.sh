#!/usr/bin/env bash
# The CUDA backend on a GPU machine: configures a fresh Release build with -DONEBIT_CUDA=ON, builds
# the backend, model and engine test binaries and 1bit on every core, runs the backend op harness
# (CPU and CUDA against the reference), the CUDA model tests and the engine tests that run on CUDA
# (drafters and hybrids: ENGINE_FILTER below), and prints a summary. Logs go to $OUT when it is
# set (else to the build dir). Sources .cudahelper/env.sh when present (scripts/gpu_carry.sh: the
# carried dependencies and test data).
#   bench/gpu.sh [--bench] [BUILD_DIR]      (default build-gpu)
# --bench also builds e2e_bench and cuda_matvec_bench, makes the benchmark models while the tests
# and cuda_matvec_bench run, then prints what one read-only kernel reaches (cuda_read_bench), the
# decode matrix-vector table, the prompt-sized product
# table (tensor cores against float tiles) and the CUDA benchmark table with its concurrency rows (bench/gpu_bench.sh: models in $ONEBIT_BENCH_WORK, default /tmp/onebit-gpu-bench; REPS from
# $ONEBIT_BENCH_REPS, default 3; comparison rows from $ONEBIT_BENCH_COMPARE) after the test
# summary, with llama.cpp's rows beside ours on the same files: its CUDA build from the carried
# .cudahelper/llama-src.tgz (bench/build_llama_cuda.sh into build-llama, while the tests run), or
# $ONEBIT_BENCH_LLAMA when set, none with ONEBIT_BENCH_NO_LLAMA=1; the exit code is still the tests'.
# Where pkg-config finds no cpp-httplib, a carried prefix in $ONEBIT_DEPS (env.sh sets it; else .cudahelper/deps,
# with lib/pkgconfig/cpp-httplib.pc) is used; stories260K comes from $ONEBIT_STORIES260K when set
# (default .cudahelper/testdata/stories260K.gguf when present).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
[ -f .cudahelper/env.sh ] && source .cudahelper/env.sh
ENGINE_FILTER='*Hybrids*:*HeadDrafters*:*EngineFake*:*DraftGovernor*'
BENCH=0
if [ "${1:-}" = --bench ]; then BENCH=1; shift; fi
BUILD=${1:-build-gpu}
LOGS=${OUT:-$BUILD}
mkdir -p "$LOGS"
JOBS=$(nproc)
DEPS=${ONEBIT_DEPS:-$PWD/.cudahelper/deps}
if ! pkg-config --exists cpp-httplib && [ -d "$DEPS/lib/pkgconfig" ]; then
  export PKG_CONFIG_PATH="$DEPS/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
fi
if [ -z "${ONEBIT_STORIES260K:-}" ] && [ -f .cudahelper/testdata/stories260K.gguf ]; then
  export ONEBIT_STORIES260K=$PWD/.cudahelper/testdata/stories260K.gguf
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$LOGS/gpu.txt"

t0=$(date +%s)
rm -rf "$BUILD"
cmake -S . -B "$BUILD" -G Ninja -DONEBIT_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$LOGS/configure.log" 2>&1 \
  || { tail -40 "$LOGS/configure.log"; echo "SUMMARY: configure FAILED"; exit 1; }
targets="backend_tests model_tests engine_tests"
[ $BENCH = 1 ] && targets="$targets onebit_cli e2e_bench cuda_matvec_bench"
cmake --build "$BUILD" -j"$JOBS" --target $targets >"$LOGS/build.log" 2>&1
build_rc=$?
if [ $build_rc -ne 0 ]; then
  grep -E "error|Error" "$LOGS/build.log" | head -60
  echo "SUMMARY: build of the test binaries FAILED"
  exit 1
fi
t1=$(date +%s)
if [ $BENCH = 1 ]; then
  ONEBIT_BENCH_MAKE_ONLY=1 bash bench/gpu_bench.sh "$BUILD" "${ONEBIT_BENCH_WORK:-/tmp/onebit-gpu-bench}" \
    >"$LOGS/bench_models.log" 2>&1 &
  models_pid=$!
  # llama.cpp's CUDA build for the side-by-side rows, from the carried source, while the tests run.
  llama_pid=
  if [ -z "${ONEBIT_BENCH_LLAMA:-}" ] && [ "${ONEBIT_BENCH_NO_LLAMA:-0}" != 1 ] && [ -f .cudahelper/llama-src.tgz ]; then
    nice -n 10 bash bench/build_llama_cuda.sh .cudahelper/llama-src.tgz "$PWD/build-llama" >"$LOGS/llama_build.log" 2>&1 &
    llama_pid=$!
  fi
fi

"$BUILD/backend_tests" --gtest_filter='Backends/BackendOpsTest.*' >"$LOGS/backend_ops.log" 2>&1
ops_rc=$?
# The products again with every 5+ row product on the fp16 GEMM (on Hopper gemm_wgmma.cuh, else
# gemm_f16.cuh), and paged attention with its prompt tiles on the float kernel (ONEBIT_CUDA_FLASH=0).
ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_FLASH=0 "$BUILD/backend_tests" \
  --gtest_filter='Backends/BackendOpsTest.*Matmul*:Backends/BackendOpsTest.*PagedAttention*' >"$LOGS/backend_gemm.log" 2>&1
gemm_rc=$?
# And the products on the mma.sync GEMM (gemm_f16_kernel: the GEMM of GPUs without wgmma), its
# dequantized weights in 128-row slabs (ONEBIT_CUDA_GEMM_SLAB_MB=0), then a matmuls' weights
# together in the slab (one launch).
: >"$LOGS/backend_gemm_sync.log"
for slab in 0 128; do
  ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_WGMMA=0 ONEBIT_CUDA_GEMM_SLAB_MB=$slab "$BUILD/backend_tests" \
    --gtest_filter='Backends/BackendOpsTest.*Matmul*' >>"$LOGS/backend_gemm_sync.log" 2>&1 || gemm_rc=1
done
# And on Hopper with every wgmma product on the warp-specialized GEMM (gemm_wgmma_ws.cuh,
# ONEBIT_CUDA_WG_WS=1: the dequantizing types too), then with none (=0: F16 on gemm_wgmma_kernel).
: >"$LOGS/backend_gemm_ws.log"
for ws in 1 0; do
  ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_WG_WS=$ws "$BUILD/backend_tests" \
    --gtest_filter='Backends/BackendOpsTest.*Matmul*' >>"$LOGS/backend_gemm_ws.log" 2>&1 || gemm_rc=1
done
"$BUILD/model_tests" --gtest_filter='CudaModel.*' >"$LOGS/cuda_model.log" 2>&1
model_rc=$?
# And with step programs (step_program.cuh, off by default): the models' decode steps as persistent kernels.
ONEBIT_CUDA_PROGRAM=1 "$BUILD/model_tests" --gtest_filter='CudaModel.*' >>"$LOGS/cuda_model.log" 2>&1 || model_rc=1
"$BUILD/engine_tests" --gtest_filter="$ENGINE_FILTER" >"$LOGS/engine.log" 2>&1
engine_rc=$?
t2=$(date +%s)
cmake --build "$BUILD" -j"$JOBS" --target onebit_cli >>"$LOGS/build.log" 2>&1 && cli=built || cli="FAILED (see build.log)"

echo "=== worst error per op (backend op: max_abs / nmse) ==="
grep '^\[op-error\]' "$LOGS/backend_ops.log" | awk '{
  key=$2" "$3; split($0, a, "max_abs="); split(a[2], b, " "); ma=b[1]; split($0, c, "nmse="); split(c[2], d, " "); nm=d[1];
  if (!(key in worst) || ma+0 > worst[key]+0) worst[key]=ma; if (!(key in wn) || nm+0 > wn[key]+0) wn[key]=nm
} END { for (k in worst) printf "  %-28s max_abs=%-10s nmse=%s\n", k, worst[k], wn[k] }' | sort
echo "=== failures ==="
grep -E '^\[  FAILED  \]|Failure|CHECK failed' "$LOGS/backend_ops.log" "$LOGS/backend_gemm.log" "$LOGS/backend_gemm_sync.log" "$LOGS/backend_gemm_ws.log" "$LOGS/cuda_model.log" \
  "$LOGS/engine.log" | head -40
echo "=== model ==="
grep -E '^\[cuda-model\]|SKIPPED|skip' "$LOGS/cuda_model.log" | head -20
echo "=== summary ==="
echo "build of the tests: $((t1 - t0)) s; tests: $((t2 - t1)) s; 1bit: $cli"
echo "backend_ops: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$LOGS/backend_ops.log" | tr '\n' ' ') rc=$ops_rc"
echo "gemm (all):  $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$LOGS/backend_gemm.log" | tr '\n' ' ') rc=$gemm_rc"
echo "gemm (mma.sync; slabs, together): $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$LOGS/backend_gemm_sync.log" | tr '\n' ' ')"
echo "gemm (warp-specialized): $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$LOGS/backend_gemm_ws.log" | tr '\n' ' ')"
echo "cuda_model:  $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$LOGS/cuda_model.log" | tr '\n' ' ') rc=$model_rc"
echo "engine:      $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$LOGS/engine.log" | tr '\n' ' ') rc=$engine_rc"
if [ $BENCH = 1 ]; then
  echo "=== one read-only kernel, cold (bench/cuda_read_bench.cu): the floor of a decode product ==="
  "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" -O3 -arch=sm_90 -std=c++17 bench/cuda_read_bench.cu \
    -o "$BUILD/bin/cuda_read_bench" &&
    "$BUILD/bin/cuda_read_bench" | tee "$LOGS/read.md"
  echo "=== decode matrix-vector (cuda_matvec_bench) ==="
  "$BUILD/bin/cuda_matvec_bench" --reps 10 | tee "$LOGS/matvec.md"
  echo "=== prompt-sized products, tensor cores against float tiles (cuda_matvec_bench --rows 512) ==="
  "$BUILD/bin/cuda_matvec_bench" --rows 512 --reps 3 --n 3 | tee "$LOGS/mma.md"
  wait $models_pid || { tail -20 "$LOGS/bench_models.log"; echo "SUMMARY: making the benchmark models FAILED"; }
  if [ -n "$llama_pid" ]; then
    if wait "$llama_pid"; then
      export ONEBIT_BENCH_LLAMA=$PWD/build-llama
    else
      tail -20 "$LOGS/llama_build.log"
      echo "llama.cpp's CUDA build FAILED ($LOGS/llama_build.log): the table has no llama.cpp rows"
    fi
  fi
  echo "=== CUDA benchmark (bench/gpu_bench.sh) ==="
  bash bench/gpu_bench.sh "$BUILD" "${ONEBIT_BENCH_WORK:-/tmp/onebit-gpu-bench}" "${ONEBIT_BENCH_REPS:-3}" \
    | tee "$LOGS/bench.md"
fi
[ $ops_rc -eq 0 ] && [ $gemm_rc -eq 0 ] && [ $model_rc -eq 0 ] && [ $engine_rc -eq 0 ]
