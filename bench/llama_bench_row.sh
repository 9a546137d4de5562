#!/usr/bin/env bash
# llama.cpp's row beside one of ours (run_e2e.sh, gpu_bench.sh): runs llama.cpp's llama-bench on the
# same file (pp512 and tg128, REPS repetitions, any further llama-bench arguments: -t THREADS on the
# CPU, -ngl 99 on a GPU) and prints two table rows in e2e_bench's columns: llama.cpp's (mean ± sd,
# the roofline column copied from ours) and the ratio of our medians to llama.cpp's means. Given
# several settings (`-fa 0,1`), llama.cpp's row is its fastest for pp and for tg, each named.
#   bench/llama_bench_row.sh LLAMA_BUILD_DIR MODEL.gguf LABEL THREADS_CELL REPS "OUR_ROW" [ARGS...]
set -euo pipefail
llama=${1:?usage: bench/llama_bench_row.sh LLAMA_BUILD_DIR MODEL.gguf LABEL THREADS_CELL REPS OUR_ROW [ARGS...]}
model=$2 label=$3 threads=$4 reps=$5 row=$6
shift 6
csv=$("$llama/bin/llama-bench" -m "$model" -p 512 -n 128 -r "$reps" -o csv "$@" 2>/dev/null) || {
  echo "| $label | llama.cpp | $threads | failed: $llama/bin/llama-bench -m $model $* | | | | | |"
  exit 0
}
CSV="$csv" ROW="$row" LABEL="$label" THREADS="$threads" python3 - <<'PY'
import csv, io, os
rows = list(csv.DictReader(io.StringIO(os.environ["CSV"])))
# With several settings (e.g. -fa 0,1) llama.cpp's fastest row of each kind, its setting named.
pick = lambda key: max((r for r in rows if int(r[key]) > 0), key=lambda r: float(r["avg_ts"]))
pp, tg = pick("n_prompt"), pick("n_gen")
fa = lambda r: f" fa={r['flash_attn']}" if len({x.get("flash_attn") for x in rows}) > 1 else ""
cells = [c.strip() for c in os.environ["ROW"].split("|")]
med = lambda cell: float(cell.split("/")[1])  # "best / median"
roof = float(cells[8])
label, threads = os.environ["LABEL"], os.environ["THREADS"]
pm, ps, tm, ts = float(pp["avg_ts"]), float(pp["stddev_ts"]), float(tg["avg_ts"]), float(tg["stddev_ts"])
print(f"| {label} | llama.cpp | {threads} | {pm:.1f} ± {ps:.1f}{fa(pp)} | {tm:.1f} ± {ts:.1f}{fa(tg)} | | | {roof:.2f} | {tm / roof:.0%} |")
print(f"| {label} | 1bit / llama.cpp | {threads} | {med(cells[4]) / pm:.2f}x | {med(cells[5]) / tm:.2f}x | | | | |")
PY
