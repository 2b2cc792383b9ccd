#!/usr/bin/env bash
# gpu/run.sh OUTDIR: the one-command GPU check (docs/gpu-check.md). Copied to
# the root of out/gpu-bundle by scripts/gpu-bundle.sh and run there, on a GPU
# machine. Writes OUTDIR/summary.json, OUTDIR/<part>.log and OUTDIR/<part>/,
# recording every part's status even when one fails. Each part runs under
# `timeout`, and the whole run stays under TIDEPOOL_GPU_DEADLINE_S (470 s).
# Without a GPU it prints "no GPU", writes a summary saying so and exits 77.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}
LIB=$HERE/lib/libtidepool.so
STEPS=${TIDEPOOL_GPU_STEPS:-30}
export TIDEPOOL_LIBRARY=$LIB
export PYTHONPATH=$HERE/lib/tidepool/python${PYTHONPATH:+:$PYTHONPATH}
unset TIDEPOOL_CUDA_LIB TIDEPOOL_CONF

# --- the parts: each runs as `run.sh --part NAME OUT`, under timeout ----------
# Each writes its files under OUT/NAME/ and its figures to stdout's last line
# via check.py, and exits 0 (passed), 77 (skipped) or anything else (failed).

part_probe() {
  "$HERE/cuda/probe" > "$1/probe.out"; echo "probe exit $?"; cat "$1/probe.out"
  "$PY" "$HERE/check.py" probe "$1" > "$1/../probe.figures.json"
}

# A preloaded program killed by a signal is run again under cuda-gdb (the
# GPU image has no gdb) with the unstripped library, for a backtrace.
backtrace_of() {
  local out=$1 exe=$2
  shift 2
  command -v cuda-gdb > /dev/null 2>&1 || return 0
  local debug_lib=$HERE/lib/debug/libtidepool.so
  [ -f "$debug_lib" ] || debug_lib=$LIB
  # env passes the program's variables and the preload on; cuda-gdb follows
  # the exec into the program.
  timeout -k 5 90 cuda-gdb -batch -ex run -ex bt -ex "thread apply all bt 10" \
    --args env "$@" LD_PRELOAD="$debug_lib" "$exe" > "$out" 2>&1
}

# Runs one CUDA program natively and preloaded, 40 s each.
run_both() {
  local dir=$1 name=$2 exe=$HERE/cuda/$2
  shift 2
  timeout -k 5 40 env "$@" "$exe" > "$dir/$name.native.out" 2> "$dir/$name.native.err"
  echo $? > "$dir/$name.native.rc"
  timeout -k 5 40 env "$@" LD_PRELOAD="$LIB" TIDEPOOL_CONF="report:$dir/$name.report.json" \
    "$exe" > "$dir/$name.preload.out" 2> "$dir/$name.preload.err"
  local rc=$?
  echo $rc > "$dir/$name.preload.rc"
  [ $rc -gt 128 ] && [ $rc -ne 137 ] && backtrace_of "$dir/$name.backtrace.txt" "$exe" "$@"
  echo "$name: native rc $(cat "$dir/$name.native.rc"), preload rc $(cat "$dir/$name.preload.rc")"
  cat "$dir/$name.native.out" "$dir/$name.preload.out"
}

part_correctness() {
  local d=$1 name
  for name in basic_static driver_dlsym driver_procaddr streams graph; do run_both "$d" "$name"; done
  if [ -d "$HERE/cudart" ]; then
    run_both "$d" basic_shared LD_LIBRARY_PATH="$HERE/cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    run_both "$d" basic_shared
  fi
  local test
  for test in "$HERE"/tests/*; do  # the tests labelled gpu
    timeout -k 5 60 "$test" --gtest_output="json:$d/gtest.$(basename "$test").json"
    echo "$(basename "$test") exit $?"
  done
  "$PY" "$HERE/check.py" correctness "$d" > "$d/../correctness.figures.json"
}

part_hotpath() {
  local d=$1
  timeout -k 5 60 "$HERE/cuda/hotpath" > "$d/native.out"; echo "native exit $?"
  timeout -k 5 60 env LD_PRELOAD="$LIB" "$HERE/cuda/hotpath" > "$d/preload.out"; echo "preload exit $?"
  timeout -k 5 90 "$PY" "$HERE/hotpath.py" > "$d/python.out"; echo "python exit $?"
  cat "$d"/*.out
  "$PY" "$HERE/check.py" hotpath "$d" > "$d/../hotpath.figures.json"
}

part_train() {
  local d=$1 model mode
  for model in gpt resnet50; do
    timeout -k 5 90 "$PY" "$HERE/train.py" --model $model --mode native --steps "$STEPS" \
      --snapshot "$d/$model.snapshot.pickle" > "$d/$model.native.out"
    echo "$model native exit $?"
    timeout -k 5 90 env LD_PRELOAD="$LIB" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
      TIDEPOOL_CONF="report:$d/$model.preload.report.json,trace:$d/$model.preload.trace.csv" \
      "$PY" "$HERE/train.py" --model $model --mode preload --steps "$STEPS" > "$d/$model.preload.out"
    echo "$model preload exit $?"
    timeout -k 5 90 "$PY" "$HERE/train.py" --model $model --mode tidepool --steps "$STEPS" \
      --conf "report:$d/$model.tidepool.report.json" > "$d/$model.tidepool.out"
    echo "$model tidepool exit $?"
  done
  "$PY" "$HERE/check.py" train "$d" > "$d/../train.figures.json"
}

# Replays one trace under every policy (on the sim, no GPU needed).
replay() {
  local d=$1 name=$2 csv=$3
  timeout -k 5 60 "$HERE/bin/tidepool-replay" --policy all --json "$csv" > "$d/$name.replay.jsonl"
  echo $? > "$d/$name.rc"
  echo "$name: replay exit $(cat "$d/$name.rc")"
}

part_trace() {
  local d=$1 t=$1/../train model
  for model in gpt resnet50; do
    if [ -f "$t/$model.snapshot.pickle" ]; then
      "$PY" "$HERE/bin/tidepool-snapshot2csv" "$t/$model.snapshot.pickle" -o "$d/$model.snapshot.csv"
      replay "$d" "$model.snapshot" "$d/$model.snapshot.csv"
    fi
    [ -f "$t/$model.preload.trace.csv" ] && replay "$d" "$model.preload_trace" "$t/$model.preload.trace.csv"
  done
  "$PY" "$HERE/check.py" trace "$d" > "$d/../trace.figures.json"
}

part_residency() {
  echo "residency has not landed: nothing to check yet"
  exit 77
}

if [ "${1:-}" = "--part" ]; then
  mkdir -p "$3/$2"
  "part_$2" "$3/$2"
  exit $?
fi

# --- the driver -----------------------------------------------------------------
OUT=${1:?usage: run.sh OUTDIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
START=$(date +%s)

no_gpu() {
  echo "no GPU: $1"
  set -- "$(printf '%s' "$1" | tr -d '"\\\n')"
  printf '{"schema": 1, "gpu": false, "status": "no GPU", "exit_code": 77, "reason": "%s", "host": "%s", "parts": {}}\n' \
    "$1" "$(uname -n)" > "$OUT/summary.json"
  exit 77
}
# TIDEPOOL_GPU_ASSUME=1 skips detection: for exercising this script without a GPU.
if [ "${TIDEPOOL_GPU_ASSUME:-0}" = 1 ]; then
  :
elif command -v "$PY" > /dev/null 2>&1; then
  reason=$(timeout -k 2 30 "$PY" "$HERE/check.py" detect 2>&1) || no_gpu "${reason#no GPU: }"
elif ! (command -v nvidia-smi > /dev/null 2>&1 && timeout 30 nvidia-smi -L > /dev/null 2>&1); then
  no_gpu "no python3 and no nvidia-smi that answers"
fi
[ -x "$HERE/cuda/probe" ] || echo "warning: $HERE is not a built bundle (run scripts/gpu-bundle.sh)"

DEADLINE=$((START + ${TIDEPOOL_GPU_DEADLINE_S:-470}))
for spec in probe:60 correctness:150 hotpath:120 train:330 trace:90 residency:10; do
  part=${spec%%:*} limit=${spec#*:}
  left=$((DEADLINE - $(date +%s)))
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s.%N)
  if [ "$limit" -le 0 ]; then
    rc=124 note="not started: the run's deadline had passed"
  else
    timeout -k 5 "$limit" bash "$HERE/run.sh" --part "$part" "$OUT" > "$OUT/$part.log" 2>&1
    rc=$? note=""
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && note="timed out after ${limit}s"
  fi
  t1=$(date +%s.%N)
  # A part cut short has written no figures: gather what it left.
  if [ ! -f "$OUT/$part.figures.json" ] && [ "$part" != residency ] && [ -d "$OUT/$part" ]; then
    timeout 30 "$PY" "$HERE/check.py" "$part" "$OUT/$part" > "$OUT/$part.figures.json" 2>> "$OUT/$part.log"
  fi
  "$PY" "$HERE/check.py" record "$OUT" "$part" "$rc" "$(awk "BEGIN { print $t1 - $t0 }")" "$note"
  echo "$part: exit $rc"
done
"$PY" "$HERE/check.py" summary "$OUT" "$(( $(date +%s) - START ))"
