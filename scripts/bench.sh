#!/usr/bin/env bash
# Builds the benchmark suites (preset default) and runs them all on the
# simulated driver. Each suite prints Google Benchmark's table and then its
# ratios against the baselines it measured in the same run; at the end this
# script prints all the ratio tables together. Raw results go to
# out/bench/<suite>.json (Google Benchmark JSON) and <suite>.txt.
# Benchmarks are never part of ctest. See bench/README.md.
#
# Usage: scripts/bench.sh [Google Benchmark flags...]
#   e.g. scripts/bench.sh --benchmark_min_time=0.1 --benchmark_filter=Replay
# Environment: BENCH_OUT (default out/bench); BENCH_BUILD_DIR to use an
# already configured build directory instead of the default preset.
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir="${BENCH_OUT:-out/bench}"
suites=(bench_hot_path bench_front_pairs bench_random_allocations bench_replay)

if [[ -n "${BENCH_BUILD_DIR:-}" ]]; then
  build_dir="$BENCH_BUILD_DIR"
  cmake --build "$build_dir" -j "$(nproc)" --target "${suites[@]}"
else
  build_dir=build/default
  cmake --preset default >/dev/null
  cmake --build --preset default -j "$(nproc)" --target "${suites[@]}"
fi

mkdir -p "$out_dir"
for suite in "${suites[@]}"; do
  echo "== $suite"
  "$build_dir/bench/$suite" --benchmark_out="$out_dir/$suite.json" --benchmark_out_format=json "$@" |
    tee "$out_dir/$suite.txt"
  echo
done

echo "== ratios against baselines measured in the same run (throughput / baseline; > 1 is faster)"
for suite in "${suites[@]}"; do
  echo "-- $suite"
  awk '/^---- end of ratios/ { on = 0 } on { print } /^---- ratios/ { on = 1 }' "$out_dir/$suite.txt"
done
echo
echo "raw results: $out_dir/"
