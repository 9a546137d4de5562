#!/bin/bash
# One GPU call (session 26): bench/gpu.sh on the tree (argmax_rows and greedy rows as ids, the
# CPU pairs' prefetch), then decode through `1bit serve` with greedy rows handed back as ids
# against ONEBIT_ARGMAX_ROWS=0 (every logits row copied back), interleaved (bench/interleaved_decode.py).
#   run(command="bash wip/argmax_call.sh; cat $OUT/summary.txt", carry=[".cudahelper"])
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/summary.txt
source .cudahelper/env.sh
mkdir -p $OUT/gpu
OUT=$OUT/gpu bash bench/gpu.sh build-gpu > $OUT/gpu_tests.txt 2>&1
echo "bench/gpu.sh rc $? at $(el) s" >> $S
grep -A12 "=== summary ===" $OUT/gpu_tests.txt >> $S
grep -E "^\[  FAILED|Failure" $OUT/gpu/*.log | head -20 >> $S
grep -E "ArgmaxRows" $OUT/gpu/backend_ops.log | head -4 >> $S
B=build-gpu/bin/1bit
[ -x $B ] || exit 1
I="timeout 150 python3 bench/interleaved_decode.py --binary $B"
echo "== onebit-20m Q8_0, 4 slots: ids / logits rows (ONEBIT_ARGMAX_ROWS=0), with and without MTP drafting" >> $S
$I -m models/onebit-20m-q8_0.gguf --config ids="--device cuda --parallel 4" \
  --config logits="ONEBIT_ARGMAX_ROWS=0 --device cuda --parallel 4" \
  --config mtpids="--device cuda --parallel 4 --mtp models/onebit-20m-mtp-q8_0.gguf --mtp-fixed" \
  --config mtplogits="ONEBIT_ARGMAX_ROWS=0 --device cuda --parallel 4 --mtp models/onebit-20m-mtp-q8_0.gguf --mtp-fixed" \
  --config ids2="--device cuda --parallel 4" --rounds 2 --tokens 128 --concurrency 1,4 >> $S 2>&1
echo "at $(el) s" >> $S
ONEBIT_BENCH_TYPES="Q4_0" ONEBIT_BENCH_MAKE_ONLY=1 bash bench/gpu_bench.sh build-gpu /tmp/gb 2 > $OUT/models.log 2>&1
echo "== llama3-8b-shaped Q4_0 (vocabulary 128,256): ids / logits rows; models made at $(el) s" >> $S
$I -m /tmp/gb/llama3-8b-Q4_0.gguf --config ids="--device cuda" --config logits="ONEBIT_ARGMAX_ROWS=0 --device cuda" \
  --config ids2="--device cuda" --rounds 2 --tokens 64 --concurrency 1,4 >> $S 2>&1
echo "end at $(el) s" >> $S
