#!/usr/bin/env bash
# Builds the benchmark suites (preset default) and runs them all on the
# simulated driver. Each suite prints Google Benchmark's table and then its
# ratios against the baselines it measured in the same run; at the end this
# script prints all the ratio tables together. Raw results go to
# out/bench/<suite>.json (Google Benchmark JSON) and <suite>.txt. Then
# bench_live_replay replays every trace in data/traces live through the
# preload in both free modes (out/bench/live_replay.txt), and
# bench/live_table.py gives the table of every trace, free mode and device
# lag over three runs (out/bench/live_table.md and .json), and
# bench_residency runs a training step under device budgets in every
# prefetch mode (out/bench/residency.txt and .json), and bench_residency_live
# the same step through the preload with both free styles
# (out/bench/residency_live.txt and .json).
# Benchmarks are never part of ctest. See bench/README.md.
#
# Usage: scripts/bench.sh [Google Benchmark flags...]
#   e.g. scripts/bench.sh --benchmark_min_time=0.1 --benchmark_filter=Replay
# Environment: BENCH_OUT (default out/bench); BENCH_BUILD_DIR to use an
# already configured build directory instead of the default preset;
# BENCH_TRACES, the traces bench_live_replay replays (default data/traces).
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir="${BENCH_OUT:-out/bench}"
suites=(bench_hot_path bench_front_pairs bench_launch_hook bench_random_allocations bench_replay)
traces_dir="${BENCH_TRACES:-data/traces}"

if [[ -n "${BENCH_BUILD_DIR:-}" ]]; then
  build_dir="$BENCH_BUILD_DIR"
  cmake --build "$build_dir" -j "$(nproc)" --target "${suites[@]}" bench_live_replay bench_residency bench_residency_live
else
  build_dir=build/default
  cmake --preset default >/dev/null
  cmake --build --preset default -j "$(nproc)" --target "${suites[@]}" bench_live_replay bench_residency bench_residency_live
fi

mkdir -p "$out_dir"
for suite in "${suites[@]}"; do
  echo "== $suite"
  "$build_dir/bench/$suite" --benchmark_out="$out_dir/$suite.json" --benchmark_out_format=json "$@" |
    tee "$out_dir/$suite.txt"
  echo
done

# Not a Google Benchmark: utilization and driver calls per training step,
# replayed live through LD_PRELOAD=libtidepool.so on the sim.
shopt -s nullglob
traces=("$traces_dir"/*.csv "$traces_dir"/*.csv.gz)
shopt -u nullglob
if ((${#traces[@]} > 0)); then
  echo "== bench_live_replay"
  "$build_dir/bench/bench_live_replay" --frees both "${traces[@]}" | tee "$out_dir/live_replay.txt"
  echo
  echo "== bench/live_table.py (trace x free mode x lag, 3 runs each)"
  python3 bench/live_table.py --reps 3 --frees all --replay --json "$out_dir/live_table.json" "$build_dir" "${traces[@]}" |
    tee "$out_dir/live_table.md"
  echo
else
  echo "== bench_live_replay: no traces in $traces_dir, skipped"
  echo
fi

echo "== bench_residency"
"$build_dir/bench/bench_residency" --json "$out_dir/residency.json" | tee "$out_dir/residency.txt"
echo "== bench_residency_live"
"$build_dir/bench/bench_residency_live" --json "$out_dir/residency_live.json" | tee "$out_dir/residency_live.txt"
echo

echo "== ratios against baselines measured in the same run (throughput / baseline; > 1 is faster)"
for suite in "${suites[@]}"; do
  echo "-- $suite"
  awk '/^---- end of ratios/ { on = 0 } on { print } /^---- ratios/ { on = 1 }' "$out_dir/$suite.txt"
done
echo
echo "raw results: $out_dir/"
