#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang and runs each for a
# while on a scratch copy of its seed corpus (new inputs never land in the
# repository). Exits non-zero on any crash, leak, timeout or out-of-memory;
# the input that caused it is kept under the build folder's fuzz-artifacts/.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 60)
#
# Needs what scripts/setup.sh installs (clang, libclang-rt-dev). No GPU: the
# pool target runs on the simulated driver. Environment: FUZZ_BUILD_DIR
# (default build/fuzz), FUZZ_TARGETS (default: all three), FUZZ_JOBS (targets
# fuzzed at once; default: the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
build="${FUZZ_BUILD_DIR:-build/fuzz}"
targets=(${FUZZ_TARGETS:-config trace_reader pool_ops})
jobs="${FUZZ_JOBS:-$(nproc)}"

started=$(date +%s)
mkdir -p "$build"
# A unity build, as the presets' (CMakePresets.json): the core's layers and
# the sim compile in batches of 8 files, about half the time file by file.
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE= -DTIDEPOOL_FUZZ=ON \
  -DTIDEPOOL_BUILD_TESTS=OFF -DTIDEPOOL_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
  >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
ninja -C "$build" "${targets[@]/#/fuzz_}"
built=$(date +%s)
echo "fuzz: build took $((built - started)) s"

artifacts="$build/fuzz-artifacts"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$artifacts"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

# One fuzzer per core at a time: on 2 cores three targets take two rounds.
run_target() {
  local t="$1" dict=()
  if [ -f "tests/fuzz/$t.dict" ]; then dict=("-dict=tests/fuzz/$t.dict"); fi
  set +e
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/${t}-" "${dict[@]}" "$scratch/$t" >"$build/fuzz_$t.log" 2>&1
  echo $? >"$scratch/$t.rc"
}
running=0
for t in "${targets[@]}"; do
  cp -r "tests/fuzz/corpus/$t" "$scratch/$t"
  echo "fuzz: $t for ${seconds} s (log: $build/fuzz_$t.log)"
  run_target "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
done
wait

failed=()
summary=()
for t in "${targets[@]}"; do
  log="$build/fuzz_$t.log"
  rc=$(cat "$scratch/$t.rc")
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 runs in \2 s/p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  summary+=("$t: ${runs:-no summary}, ${rate:-?} exec/s, rc $rc")
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    echo "fuzz: $t FAILED (rc $rc); the end of its log:" >&2
    tail -40 "$log" >&2
  fi
done

echo "fuzz: summary"
printf '  %s\n' "${summary[@]}"
echo "fuzz: total $(($(date +%s) - started)) s"
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]} (inputs under $artifacts)" >&2
  exit 1
fi
