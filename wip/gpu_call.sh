#!/bin/bash
# One GPU-machine call for work in progress: bench/gpu.sh's tests in stages (the GEMM tests under
# each of $VARIANTS, words of NAME=VALUE[,NAME=VALUE]), while a second build makes 1bit, e2e_bench
# and the F16 / Q4_0 / Q4_K_M models; then pp512 under each variant, two rounds, then the GEMMs of
# one 8B Q4_0 prompt by Nsight Compute. Landing still wants `bash bench/gpu.sh` whole.
#   run(command="CALL_SECS=560 timeout 590 bash wip/gpu_call.sh; cat $OUT/summary.txt", carry=[".cudahelper"])
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
  nice -n 5 cmake --build build-b -j16 --target onebit_cli e2e_bench cuda_matvec_bench > $OUT/b_build.log 2>&1 &&
  ONEBIT_BENCH_TYPES="F16 Q4_0 Q4_K_M" ONEBIT_BENCH_MAKE_ONLY=1 bash bench/gpu_bench.sh build-b /tmp/gb 2 > $OUT/models.log 2>&1
  echo "bench build + models rc $? at $(el) s" >> $OUT/bprog.txt ) &
BP=$!
cmake -S . -B $B -G Ninja -DONEBIT_CUDA=ON -DCMAKE_BUILD_TYPE=Release > $OUT/configure.log 2>&1 || { tail -20 $OUT/configure.log >> "$S"; exit 1; }
cmake --build $B -j16 --target backend_tests > $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30 >> "$S"; exit 1; }
echo "backend_tests built at $(el) s; sm_90a images: $( (cuobjdump --list-elf $B/backend_tests 2>/dev/null || /usr/local/cuda/bin/cuobjdump --list-elf $B/backend_tests) | grep -c sm_90a)" >> "$S"
grep -iE "warning.*(wgmma|serializ)|C75[0-9][0-9]" $OUT/build.log | sort | uniq -c | head -8 >> "$S"
( cmake --build $B -j16 --target model_tests engine_tests > $OUT/build2.log 2>&1; echo "model/engine tests built rc $? at $(el) s" >> $OUT/b2.txt ) &
TP=$!
: > $OUT/gemm_wg.log
VARIANTS=${VARIANTS:-"ONEBIT_X=1 ONEBIT_CUDA_WG_INFLIGHT=0"}
for v in $VARIANTS; do
  env ${v//,/ } ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_FLASH=0 $B/backend_tests --gtest_filter='Backends/BackendOpsTest.*Matmul*:Backends/BackendOpsTest.*PagedAttention*' > $OUT/g.log 2>&1
  echo "gemm wgmma $v (rows >= 5) rc $? at $(el) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/g.log | tr '\n' ' ') worst matmul nmse $(grep 'op-error\] cuda.*matmul' $OUT/g.log | sed 's/.*nmse=\([^ ]*\).*/\1/' | sort -g | tail -1)" >> "$S"
  grep -hE '^\[  FAILED  \]|Failure' $OUT/g.log | head -6 >> "$S"; cat $OUT/g.log >> $OUT/gemm_wg.log
done
$B/backend_tests --gtest_filter='Backends/BackendOpsTest.*' > $OUT/ops.log 2>&1
echo "ops rc $? at $(el) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/ops.log | tr '\n' ' ')" >> "$S"
: > $OUT/gemm_sync.log
for slab in 0 128; do
  ONEBIT_CUDA_GEMM_ROWS=5 ONEBIT_CUDA_WGMMA=0 ONEBIT_CUDA_GEMM_SLAB_MB=$slab $B/backend_tests --gtest_filter='Backends/BackendOpsTest.*Matmul*' >> $OUT/gemm_sync.log 2>&1
  echo "gemm mma.sync slab $slab rc $?" >> "$S"
done
grep -hE '^\[  FAILED  \]|Failure' $OUT/ops.log $OUT/gemm_sync.log | head -20 >> "$S"
for L in ops gemm_sync; do
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
for v in ${MATVEC_VS:-}; do
  [ "$(left)" -gt 90 ] || break
  echo "== cuda_matvec_bench --rows 512 --vs $v" >> "$S"
  timeout 120 build-b/bin/cuda_matvec_bench --rows 512 --reps 3 --n 3 --vs $v >> "$S" 2>&1
done
for round in 1 2; do
for m in llama3-8b-Q4_0 llama3-8b-Q4_K_M tinyllama-Q4_0 llama3-8b-F16; do
  for v in $VARIANTS; do
    [ "$(left)" -gt 60 ] || break
    echo "== $m $v" >> "$S"; env ${v//,/ } timeout 45 build-b/bin/e2e_bench /tmp/gb/$m.gguf --device cuda --pp 512 --tg 16 --reps 3 2>>$OUT/e2e.err | grep '^| /' >> "$S"
  done
done
done
# One 8B prompt op by op (every kernel of the run; the load's are named apart), summed by kernel.
for m in llama3-8b-Q4_0; do
  [ "$(left)" -gt 50 ] || break
  echo "== ncu $m pp512 (load + 1 warm-up? + 1 rep)" >> "$S"
  timeout $(( $(left) - 10 )) ncu --clock-control none --cache-control none --print-units base --metrics gpu__time_duration.sum --kernel-name regex:gemm --csv --page raw \
    build-b/bin/e2e_bench /tmp/gb/$m.gguf --device cuda --pp 512 --tg 1 --reps 1 > $OUT/ncu_$m.csv 2>/dev/null
  python3 - $OUT/ncu_$m.csv >> "$S" <<'PY'
import csv, sys, re, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
r = list(csv.reader(rows))
if len(r) < 3: print("no ncu rows"); sys.exit(0)
h = r[0]; ki, ti = h.index("Kernel Name"), h.index("gpu__time_duration.sum")
first = 1
try: float(r[1][ti].replace(",", ""))
except ValueError: first = 2
tot = collections.defaultdict(float); cnt = collections.Counter()
for row in r[first:]:
    name = re.sub(r"\(.*", "", row[ki].replace("onebit::(anonymous namespace)::", "").replace("onebit::cuda_detail::", "")).replace("void ", "")
    tot[name] += float(row[ti].replace(",", "")) / 1000; cnt[name] += 1
s = sum(tot.values())
print(f"| kernel | launches | total us | mean us | share | (all {sum(cnt.values())} kernels, {s:.0f} us)")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:25]:
    print(f"| {k[:70]} | {cnt[k]} | {v:.1f} | {v / cnt[k]:.2f} | {100 * v / s:.1f}% |")
PY
done
echo "end at $(el) s" >> "$S"
