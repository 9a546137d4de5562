#!/usr/bin/env bash
# Runs every fuzz target in BUILD_DIR for SECONDS each, seeded from fuzz/corpus/<target>/.
# A crash, leak or sanitizer report fails the run; the reproducer lands in fuzz-artifacts/.
set -euo pipefail
build_dir=${1:?usage: run_fuzzers.sh BUILD_DIR SECONDS}
seconds=${2:-60}
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$root/fuzz-artifacts"
shopt -s nullglob
targets=("$build_dir"/*_fuzz)
if [ ${#targets[@]} -eq 0 ]; then echo "run_fuzzers: no fuzz targets in $build_dir" >&2; exit 1; fi
for t in "${targets[@]}"; do
  name=$(basename "$t")
  seeds="$root/fuzz/corpus/$name"
  work=$(mktemp -d)
  args=("$work")
  [ -d "$seeds" ] && args+=("$seeds")
  echo "fuzz: $name for ${seconds}s"
  set +e
  "$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
       -artifact_prefix="$root/fuzz-artifacts/$name-" "${args[@]}" 2>&1 | tail -n 15
  rc=${PIPESTATUS[0]}
  set -e
  rm -rf "$work"
  if [ "$rc" -ne 0 ]; then echo "fuzz: $name failed (exit $rc)" >&2; exit "$rc"; fi
done
