#!/usr/bin/env bash
# Per-kernel GPU time of one decode step (Nsight Compute, clocks left alone), summed by kernel:
#   bench/gpu_profile.sh BUILD_DIR MODEL.gguf [SKIP]
# Runs e2e_bench (--pp 0 --tg 8, op-by-op launches: ONEBIT_CUDA_GRAPHS=0) under ncu, profiling 520
# consecutive kernels after SKIP (default 2200: past the load's panel packing and the warm-up), and
# prints kernel, count, total and mean microseconds, and the share of the total.
set -euo pipefail
build=${1:?usage: bench/gpu_profile.sh BUILD_DIR MODEL.gguf [SKIP]}
model=${2:?usage: bench/gpu_profile.sh BUILD_DIR MODEL.gguf [SKIP]}
skip=${3:-2200}
csv=$(mktemp)
ONEBIT_CUDA_GRAPHS=0 ncu --clock-control none --print-units base --metrics gpu__time_duration.sum --launch-skip "$skip" \
  --launch-count 520 --csv --page raw "$build/bin/e2e_bench" "$model" --device cuda --pp 0 --tg 8 --reps 1 \
  >"$csv" 2>/dev/null || true
python3 - "$csv" <<'PY'
import csv, sys, re, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
r = list(csv.reader(rows))
if len(r) < 3:
    print("no ncu rows"); sys.exit(0)
h = r[0]
ki, ti = h.index("Kernel Name"), h.index("gpu__time_duration.sum")
# A units row follows the header when ncu prints one; with --print-units base the values are ns.
first = 1
unit = "nsecond"
try:
    float(r[1][ti].replace(",", ""))
except ValueError:
    unit, first = r[1][ti], 2
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
tot = collections.defaultdict(float); cnt = collections.Counter()
for row in r[first:]:
    name = row[ki].replace("onebit::(anonymous namespace)::", "").replace("onebit::<unnamed>::", "")
    name = re.sub(r"\(.*", "", name).replace("void ", "")
    v = float(row[ti].replace(",", "")) * scale  # microseconds
    tot[name] += v; cnt[name] += 1
s = sum(tot.values())
print(f"| kernel | launches | total us | mean us | share |  (one step: {sum(cnt.values())} kernels, {s:.0f} us)")
print("|---|---|---|---|---|")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print(f"| {k} | {cnt[k]} | {v:.1f} | {v / cnt[k]:.2f} | {100 * v / s:.1f}% |")
PY
rm -f "$csv"
