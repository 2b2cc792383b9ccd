#!/usr/bin/env bash
# gpu/run.sh [--sim] OUTDIR [PART...]: the one-command GPU check
# (docs/gpu-check.md). Copied to the root of out/gpu-bundle by
# scripts/gpu-bundle.sh and run there, on a GPU machine. Writes
# OUTDIR/summary.json (and summary.md, the same for a reader),
# OUTDIR/<part>.log and OUTDIR/<part>/, recording every
# part's status even when one fails. Each part runs under `timeout`, and the
# whole run stays under TIDEPOOL_GPU_DEADLINE_S (470 s); naming parts runs
# only those (each fits alone in one 10-minute call). Without a GPU it prints
# "no GPU", writes a summary saying so and exits 77.
# --sim: the self-test on a machine without a GPU (tests/gpu runs it in CI):
# every part runs what it can on the simulated driver and skips the rest
# cleanly, so a part that rots fails here before it costs GPU time.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}
LIB=$HERE/lib/libtidepool.so
STEPS=${TIDEPOOL_GPU_STEPS:-30}
RES_STEPS=${TIDEPOOL_GPU_RES_STEPS:-8}  # training steps of each residency run (18 runs fit the part's 400 s)
SIM=${TIDEPOOL_GPU_SIM:-0}
export TIDEPOOL_LIBRARY=$LIB
export PYTHONPATH=$HERE/lib/tidepool/python${PYTHONPATH:+:$PYTHONPATH}
unset TIDEPOOL_CUDA_LIB TIDEPOOL_CONF

# --- the parts: each runs as `run.sh --part NAME OUT`, under timeout ----------
# Each writes its files under OUT/NAME/ and its figures to stdout's last line
# via check.py, and exits 0 (passed), 77 (skipped) or anything else (failed).

# A part that needs what --sim does not have says so and skips.
needs_gpu() {
  if [ "$SIM" = 1 ]; then
    echo "sim: skipped, a GPU is needed for $1"
    exit 77
  fi
}

part_probe() {
  needs_gpu "the probe (cudart and real VMM timings)"
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
  needs_gpu "the CUDA programs (cudart)"
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
  needs_gpu "the timings"
  timeout -k 5 60 "$HERE/cuda/hotpath" > "$d/native.out"; echo "native exit $?"
  # The report counts the driver work behind the pairs (device barriers).
  timeout -k 5 60 env LD_PRELOAD="$LIB" TIDEPOOL_CONF="report:$d/preload.report.json" "$HERE/cuda/hotpath" \
    > "$d/preload.out"; echo "preload exit $?"
  # The same without the device barrier, to price it (free_barrier:off fences each free instead).
  timeout -k 5 60 env LD_PRELOAD="$LIB" TIDEPOOL_CONF="free_barrier:off,report:$d/preload_nobarrier.report.json" \
    "$HERE/cuda/hotpath" > "$d/preload_nobarrier.out"; echo "preload_nobarrier exit $?"
  timeout -k 5 90 "$PY" "$HERE/hotpath.py" > "$d/python.out"; echo "python exit $?"
  cat "$d"/*.out
  "$PY" "$HERE/check.py" hotpath "$d" > "$d/../hotpath.figures.json"
}

part_train() {
  local d=$1 model mode
  needs_gpu "PyTorch training"
  for model in gpt resnet50; do
    timeout -k 5 90 "$PY" "$HERE/train.py" --model $model --mode native --steps "$STEPS" \
      --snapshot "$d/$model.snapshot.pickle" > "$d/$model.native.out"
    echo "$model native exit $?"
    timeout -k 5 90 env LD_PRELOAD="$LIB" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
      TIDEPOOL_CONF="report:$d/$model.preload.report.json,trace:$d/$model.preload.trace.csv" \
      "$PY" "$HERE/train.py" --model $model --mode preload --steps "$STEPS" > "$d/$model.preload.out"
    echo "$model preload exit $?"
    # The same without the device barrier: cudaFree's host wait (issue 28's
    # memory goal: the barrier's peak within 2% of this one's).
    timeout -k 5 90 env LD_PRELOAD="$LIB" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
      TIDEPOOL_CONF="free_barrier:off,report:$d/$model.preload_nobarrier.report.json" \
      "$PY" "$HERE/train.py" --model $model --mode preload --steps "$STEPS" > "$d/$model.preload_nobarrier.out"
    echo "$model preload_nobarrier exit $?"
    # Preloaded under PyTorch's caching allocator, which calls cudaMalloc
    # seldom: against native, what the hooks on every launch cost alone.
    timeout -k 5 90 env LD_PRELOAD="$LIB" TIDEPOOL_CONF="report:$d/$model.preload_cached.report.json" \
      "$PY" "$HERE/train.py" --model $model --mode preload --steps "$STEPS" > "$d/$model.preload_cached.out"
    echo "$model preload_cached exit $?"
    timeout -k 5 90 "$PY" "$HERE/train.py" --model $model --mode tidepool --steps "$STEPS" \
      --conf "report:$d/$model.tidepool.report.json" > "$d/$model.tidepool.out"
    echo "$model tidepool exit $?"
    # The peers: PyTorch's own allocator with expandable segments, and its
    # cudaMallocAsync backend.
    timeout -k 5 90 env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
      "$PY" "$HERE/train.py" --model $model --mode native --steps "$STEPS" > "$d/$model.expandable.out"
    echo "$model expandable exit $?"
    timeout -k 5 90 env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
      "$PY" "$HERE/train.py" --model $model --mode native --steps "$STEPS" > "$d/$model.async.out"
    echo "$model async exit $?"
  done
  "$PY" "$HERE/check.py" train "$d" > "$d/../train.figures.json"
}

# CUDA graphs (graphs.py: a training step captured with torch.cuda.graph and
# replayed): natively and preloaded, with PyTorch's caching allocator on top
# and without it (PYTORCH_NO_CUDA_MEMORY_CACHING=1), and through the pluggable
# allocator. Each must work, or fail as native fails; never crash or differ.
part_graphs() {
  local d=$1 name
  needs_gpu "CUDA graphs"
  "$PY" -c "import torch" 2> /dev/null || { echo "no PyTorch: skipped"; exit 77; }
  graphs_run() {  # NAME MODE [ENV...]
    local name=$1 mode=$2
    shift 2
    timeout -k 5 60 env "$@" "$PY" "$HERE/graphs.py" --mode "$mode" > "$d/$name.out" 2> "$d/$name.err"
    echo $? > "$d/$name.rc"
    echo "$name: exit $(cat "$d/$name.rc")"
  }
  graphs_run native native
  graphs_run native_nocache native PYTORCH_NO_CUDA_MEMORY_CACHING=1
  graphs_run preload native LD_PRELOAD="$LIB"
  graphs_run preload_nocache native LD_PRELOAD="$LIB" PYTORCH_NO_CUDA_MEMORY_CACHING=1
  timeout -k 5 60 "$PY" "$HERE/graphs.py" --mode tidepool > "$d/tidepool.out" 2> "$d/tidepool.err"
  echo $? > "$d/tidepool.rc"
  echo "tidepool: exit $(cat "$d/tidepool.rc")"
  "$PY" "$HERE/check.py" graphs "$d" > "$d/../graphs.figures.json"
}

# CUDA IPC (ipc.py: torch.multiprocessing shares CUDA tensors with a spawned
# consumer, both ways, and the producer frees its references while the
# consumer still holds them): natively and preloaded, each with PyTorch's
# caching allocator on top and without it; each preloaded run against the
# native run of its kind. The consumer inherits the preload, as
# torch.multiprocessing's spawned processes do.
part_ipc() {
  local d=$1
  needs_gpu "CUDA IPC between processes"
  "$PY" -c "import torch" 2> /dev/null || { echo "no PyTorch: skipped"; exit 77; }
  ipc_run() {  # NAME [ENV...]
    local name=$1
    shift
    timeout -k 5 150 env "$@" "$PY" "$HERE/ipc.py" > "$d/$name.out" 2> "$d/$name.err"
    echo $? > "$d/$name.rc"
    echo "$name: exit $(cat "$d/$name.rc")"
  }
  ipc_run native
  ipc_run native_nocache PYTORCH_NO_CUDA_MEMORY_CACHING=1
  ipc_run preload LD_PRELOAD="$LIB" TIDEPOOL_CONF="log:info,report:$d/preload.report-%p.json"
  ipc_run preload_nocache LD_PRELOAD="$LIB" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    TIDEPOOL_CONF="log:info,report:$d/preload_nocache.report-%p.json"
  "$PY" "$HERE/check.py" ipc "$d" > "$d/../ipc.figures.json"
}

# Replays one trace under every policy (on the sim, no GPU needed).
replay() {
  local d=$1 name=$2 csv=$3
  timeout -k 5 60 "$HERE/bin/tidepool-replay" --policy all --json "$csv" > "$d/$name.replay.jsonl"
  echo $? > "$d/$name.rc"
  echo "$name: replay exit $(cat "$d/$name.rc")"
}

part_trace() {
  local d=$1 t=$1/../train model csv
  # --sim: the sample traces (TIDEPOOL_GPU_TRACES, a folder of RMM CSV files).
  if [ "$SIM" = 1 ] && [ -d "${TIDEPOOL_GPU_TRACES:-}" ]; then
    for csv in "$TIDEPOOL_GPU_TRACES"/*.csv*; do
      [ -f "$csv" ] && replay "$d" "$(basename "${csv%%.csv*}")" "$csv"
    done
  fi
  for model in gpt resnet50; do
    if [ -f "$t/$model.snapshot.pickle" ]; then
      "$PY" "$HERE/bin/tidepool-snapshot2csv" "$t/$model.snapshot.pickle" -o "$d/$model.snapshot.csv"
      replay "$d" "$model.snapshot" "$d/$model.snapshot.csv"
    fi
    [ -f "$t/$model.preload.trace.csv" ] && replay "$d" "$model.preload_trace" "$t/$model.preload.trace.csv"
  done
  "$PY" "$HERE/check.py" trace "$d" > "$d/../trace.figures.json"
}

# Residency under PyTorch, preloaded: the unconstrained peak reserved under
# tidepool, then device_limit at 50% and 33% of it with prefetch off, launch
# and learn; at 50% with learn also through the pluggable allocator. Each run
# against the native run of the same steps: losses, step time.
train_run() {  # OUT_BASE MODEL MODE [ENV...] -- [train.py args...]
  local base=$1 model=$2 mode=$3
  shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  timeout -k 5 60 env "${envs[@]}" "$PY" "$HERE/train.py" --model "$model" --mode "$mode" --steps "$RES_STEPS" "$@" \
    > "$base.out" 2> "$base.err"
  local rc=$?
  echo $rc > "$base.rc"
  echo "$(basename "$base"): exit $rc"
}

part_residency() {
  local d=$1 model share mode peak
  needs_gpu "PyTorch training"
  "$PY" -c "import torch" 2> /dev/null || { echo "no PyTorch: skipped"; exit 77; }
  for model in gpt resnet50; do
    train_run "$d/$model.native" "$model" native -- --count-kernels
    train_run "$d/$model.none" "$model" preload LD_PRELOAD="$LIB" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
      TIDEPOOL_CONF="report:$d/$model.none.report.json"
    peak=$("$PY" "$HERE/check.py" peak "$d/$model.none.report.json") || { echo "$model: no unconstrained peak"; continue; }
    for share in 50 33; do
      for mode in off launch learn; do
        train_run "$d/$model.$share.$mode" "$model" preload LD_PRELOAD="$LIB" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
          TIDEPOOL_CONF="evict:on,prefetch:$mode,device_limit:$((peak * share / 100)),report:$d/$model.$share.$mode.report.json"
      done
    done
    # Compressed eviction (issue 30): 33% with compress:auto, against 33.launch.
    train_run "$d/$model.33.launch_auto" "$model" preload LD_PRELOAD="$LIB" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
      TIDEPOOL_CONF="evict:on,prefetch:launch,compress:auto,device_limit:$((peak * 33 / 100)),report:$d/$model.33.launch_auto.report.json"
    train_run "$d/$model.50.pluggable" "$model" tidepool -- \
      --conf "evict:on,prefetch:learn,device_limit:$((peak / 2)),report:$d/$model.50.pluggable.report.json"
  done
  "$PY" "$HERE/check.py" residency "$d" "$RES_STEPS" > "$d/../residency.figures.json"
}

# Caffe, unmodified (caffe/caffe-bundle.tar.xz, ../shared/caffe): natively and
# preloaded, LeNet's training losses must match exactly; VGG-16's
# forward-backward time and the device memory it takes (nvidia-smi, sampled
# every 50 ms, above what was used before). Then VGG-16 preloaded alone,
# unconstrained (tidepool's peak) and at 65% and 50% of that peak with
# eviction and learned prefetch: what memory it saves and what time it costs.
# --sim: the bundle's own CPU-mode self-test (LeNet, no CUDA call).
sample_memory() {  # FILE: samples until killed
  command -v nvidia-smi > /dev/null 2>&1 || return 0
  exec nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${CAFFE_GPU:-0}" -lms 50 > "$1" 2> /dev/null
}

caffe_run() {  # NAME [ENV...]: the bundle's run.sh, memory sampled around it
  local d=$CAFFE_DIR name=$1
  shift
  sample_memory "$d/$name.memory.txt" &
  local sampler=$!
  timeout -k 5 200 env "$@" LOG_DIR="$d/$name" bash "$d/bundle/run.sh" > "$d/$name.out" 2>&1
  echo $? > "$d/$name.rc"
  kill "$sampler" 2> /dev/null
  wait "$sampler" 2> /dev/null
  echo "caffe $name: exit $(cat "$d/$name.rc")"
}

vgg_run() {  # NAME TIDEPOOL_CONF: caffe time on VGG-16, preloaded
  local d=$CAFFE_DIR name=$1 dirs
  dirs=$(sed -n 's/^== CUDA lib dirs: //p' "$d/native.out" | head -1)
  (cd "$d/bundle" && timeout -k 5 150 env LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    LD_PRELOAD="$LIB" TIDEPOOL_CONF="$2" GLOG_logtostderr=1 bin/caffe time -model models/vgg16.prototxt \
    -gpu "${CAFFE_GPU:-0}" -iterations "${CAFFE_VGG_ITERS:-10}") > "$d/$name.log" 2>&1
  echo $? > "$d/$name.rc"
  echo "caffe $name: exit $(cat "$d/$name.rc")"
}

# LeNet's caffe time, natively (no preload) or preloaded with TIDEPOOL_CONF
# CONF: stage 2 found LeNet 25% slower preloaded, uniformly across layers.
# An invalid TIDEPOOL_CONF leaves every hook in place but passes every call
# through (no pool): the split says whether the hooks or the pool cost it.
lenet_run() {  # NAME [CONF]: no CONF, natively
  local d=$CAFFE_DIR name=$1 dirs preload=()
  dirs=$(sed -n 's/^== CUDA lib dirs: //p' "$d/native.out" | head -1)
  [ $# -gt 1 ] && preload=(LD_PRELOAD="$LIB" TIDEPOOL_CONF="$2")
  (cd "$d/bundle" && timeout -k 5 60 env LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "${preload[@]}" GLOG_logtostderr=1 bin/caffe time -model models/lenet.prototxt \
    -gpu "${CAFFE_GPU:-0}" -iterations "${CAFFE_LENET_ITERS:-200}") > "$d/$name.log" 2>&1
  echo $? > "$d/$name.rc"
  echo "caffe $name: exit $(cat "$d/$name.rc")"
}

part_caffe() {
  local d=$1 bundle=$HERE/caffe/caffe-bundle.tar.xz share peak
  CAFFE_DIR=$d
  [ -f "$bundle" ] || { echo "no $bundle (scripts/gpu-bundle.sh ships ../shared/caffe's): skipped"; exit 77; }
  tar -xJf "$bundle" -C "$d" || { echo "cannot unpack $bundle"; exit 1; }
  if [ "$SIM" = 1 ]; then
    caffe_run cpu GPU=cpu SKIP_VGG=1 LENET_ITERS=5 TRAIN_ITERS=5
    "$PY" "$HERE/check.py" caffe "$d" > "$d/../caffe.figures.json"
    return
  fi
  caffe_run native GPU="${CAFFE_GPU:-0}"
  caffe_run preload GPU="${CAFFE_GPU:-0}" PRELOAD="$LIB"
  # Interleaved, so that the GPU's clocks and warmth favour none of them.
  lenet_run lenet.native1
  lenet_run lenet.preload ""
  lenet_run lenet.passthrough "passthrough_for_lenet_split:on"
  lenet_run lenet.nobarrier "free_barrier:off"
  lenet_run lenet.native2
  vgg_run vgg.none "report:$d/vgg.none.report.json"
  if peak=$("$PY" "$HERE/check.py" peak "$d/vgg.none.report.json"); then
    for share in 65 50; do
      vgg_run "vgg.$share" "evict:on,prefetch:learn,device_limit:$((peak * share / 100)),report:$d/vgg.$share.report.json"
    done
  fi
  "$PY" "$HERE/check.py" caffe "$d" > "$d/../caffe.figures.json"
}

if [ "${1:-}" = "--part" ]; then
  mkdir -p "$3/$2"
  "part_$2" "$3/$2"
  exit $?
fi

# --- the driver -----------------------------------------------------------------
if [ "${1:-}" = "--sim" ]; then
  shift
  export TIDEPOOL_GPU_SIM=1 TIDEPOOL_GPU_ASSUME=1
  SIM=1
fi
OUT=${1:?usage: run.sh [--sim] OUTDIR [PART...]}
shift
# What has never run on a GPU comes first: the first call brings back the
# probe and residency, a second `run.sh OUT caffe graphs` Caffe and graphs.
# Named parts run in the order named, sharing the run's deadline, each with
# the whole of what is left.
ALL="probe:60 residency:400 caffe:300 graphs:120 ipc:240 correctness:150 train:330 hotpath:120 trace:90"
SPECS=""
for part in "$@"; do
  spec=$(printf '%s\n' $ALL | grep "^$part:") ||
    { echo "run.sh: no part '$part' (parts: $(printf '%s\n' $ALL | cut -d: -f1 | tr '\n' ' '))" >&2; exit 2; }
  SPECS="$SPECS $spec"
done
if [ -n "$SPECS" ]; then
  SPECS=$(for spec in $SPECS; do echo "${spec%%:*}:${TIDEPOOL_GPU_DEADLINE_S:-470}"; done)
else
  SPECS=$ALL
fi
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
for spec in $SPECS; do
  part=${spec%%:*} limit=${spec#*:}
  left=$((DEADLINE - $(date +%s)))
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s.%N)
  rm -f "$OUT/$part.figures.json"  # a second call into the folder: never the first call's figures
  if [ "$limit" -le 0 ]; then
    rc=75 note="not started: the run's deadline had passed (run.sh OUT $part runs it)"
  else
    timeout -k 5 "$limit" bash "$HERE/run.sh" --part "$part" "$OUT" > "$OUT/$part.log" 2>&1
    rc=$? note=""
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && note="timed out after ${limit}s"
  fi
  t1=$(date +%s.%N)
  # A part cut short has written no figures: gather what it left.
  if [ ! -f "$OUT/$part.figures.json" ] && [ $rc -ne 77 ] && [ $rc -ne 75 ] && [ -d "$OUT/$part" ]; then
    timeout 30 "$PY" "$HERE/check.py" "$part" "$OUT/$part" > "$OUT/$part.figures.json" 2>> "$OUT/$part.log"
  fi
  "$PY" "$HERE/check.py" record "$OUT" "$part" "$rc" "$(awk "BEGIN { print $t1 - $t0 }")" "$note"
  echo "$part: exit $rc"
done
"$PY" "$HERE/check.py" summary "$OUT" "$(( $(date +%s) - START ))"
