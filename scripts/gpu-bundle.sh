#!/usr/bin/env bash
# scripts/gpu-bundle.sh: builds out/gpu-bundle/, everything a GPU machine
# needs to check tidepool with one command (docs/gpu-check.md). Runs here, no
# GPU needed: a Release build of libtidepool.so, the tools and the sim
# (installed, stripped), the tests labelled `gpu`, the CUDA programs in gpu/
# compiled with nvcc for sm_90, the Python scripts and run.sh. A program that
# fails to compile is left out and named in BUILD.txt; the rest still ship.
# Usage: scripts/gpu-bundle.sh [JOBS]   (env: CUDA_HOME, GPU_ARCH=sm_90)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
ARCH=${GPU_ARCH:-sm_90}
JOBS=${1:-2}
BUILD=$ROOT/build/gpu-bundle
OUT=$ROOT/out/gpu-bundle
NVCC=$CUDA_HOME/bin/nvcc
cd "$ROOT"
mkdir -p "$(dirname "$BUILD")"  # a fresh clone has no build/ for the configure log

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDEPOOL_BUILD_BENCH=OFF \
  -DCMAKE_INSTALL_LIBDIR=lib > "$BUILD.configure.log" 2>&1 ||
  { cat "$BUILD.configure.log"; exit 1; }
# The tests labelled gpu, by target name: one-line tidepool_add_test(NAME ... LABELS ... gpu ...) calls.
gpu_tests=$(grep -hE 'tidepool_add_test\([^ ]+ .*LABELS[^)]*\bgpu\b' tests/*/CMakeLists.txt |
  sed -E 's/.*tidepool_add_test\(([^ ]+) .*/\1/' | sort -u || true)
targets="tidepool tidepool_sim tidepool-replay tidepool-run tidepool-advise $gpu_tests"
cmake --build "$BUILD" -j "$JOBS" --target $targets

rm -rf "$OUT"
mkdir -p "$OUT/cuda" "$OUT/tests"
cmake --install "$BUILD" --prefix "$OUT" --strip > /dev/null
rm -rf "$OUT/include" "$OUT/lib/cmake" "$OUT/lib/pkgconfig"  # headers and packaging: not needed there
# An unstripped copy, for backtraces when a preloaded program crashes there.
mkdir -p "$OUT/lib/debug"
cp -L "$BUILD/libtidepool.so" "$OUT/lib/debug/libtidepool.so"
{
  echo "tidepool GPU bundle, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "nvcc: $("$NVCC" --version | tail -1), arch $ARCH"
} > "$OUT/BUILD.txt"

# The gpu tests: GoogleTest is linked statically (Debian ships only libgtest.a).
for name in $gpu_tests; do
  exe=$(find "$BUILD/tests" -type f -name "$name" -perm -u+x | head -1)
  cp "$exe" "$OUT/tests/" && strip "$OUT/tests/$name"
done

# CUDA programs: NAME SOURCE [nvcc flags...]; a failure is recorded, not fatal.
failed=""
compile() {
  local name=$1 src=$2
  shift 2
  if "$NVCC" -arch="$ARCH" -O2 -std=c++17 -o "$OUT/cuda/$name" "$ROOT/gpu/$src" "$@" > "$BUILD/nvcc-$name.log" 2>&1; then
    strip "$OUT/cuda/$name"
    echo "built  cuda/$name ($src $*)" >> "$OUT/BUILD.txt"
  else
    failed="$failed $name"
    { echo "FAILED cuda/$name ($src $*):"; sed 's/^/    /' "$BUILD/nvcc-$name.log"; } >> "$OUT/BUILD.txt"
  fi
}
compile probe probe.cu -L"$CUDA_HOME/lib64/stubs" -lcuda
compile basic_static basic.cu -DPROGRAM='"basic_static"'
compile basic_shared basic.cu -DPROGRAM='"basic_shared"' -cudart shared
compile driver_dlsym driver_dlsym.cu -ldl
compile driver_procaddr driver_procaddr.cu -ldl
compile streams streams.cu
compile graph graph.cu
compile hotpath hotpath.cu -ldl
if [ -e "$CUDA_HOME/lib64/libcudart.so.13" ]; then
  mkdir -p "$OUT/cudart"
  cp -L "$CUDA_HOME/lib64/libcudart.so.13" "$OUT/cudart/"
  strip "$OUT/cudart/libcudart.so.13" 2> /dev/null || true
fi

# Caffe for run.sh's caffe part (../shared/caffe; CAFFE_BUNDLE overrides).
CAFFE_BUNDLE=${CAFFE_BUNDLE:-$ROOT/../shared/caffe/caffe-bundle.tar.xz}
if [ -f "$CAFFE_BUNDLE" ]; then
  mkdir -p "$OUT/caffe"
  cp "$CAFFE_BUNDLE" "$OUT/caffe/"
  echo "caffe: $(basename "$CAFFE_BUNDLE")" >> "$OUT/BUILD.txt"
else
  echo "caffe: none ($CAFFE_BUNDLE missing): the caffe part will skip" >> "$OUT/BUILD.txt"
fi

cp gpu/run.sh gpu/check.py gpu/hotpath.py gpu/train.py gpu/graphs.py gpu/ipc.py "$OUT/"
chmod +x "$OUT/run.sh"
size=$(du -sm "$OUT" | cut -f1)
echo "size: ${size} MiB; gpu tests: $(echo $gpu_tests); failed to compile:${failed:- none}" >> "$OUT/BUILD.txt"
cat "$OUT/BUILD.txt" | grep -v '^    '
if [ "$size" -gt 40 ]; then echo "gpu-bundle: $OUT is ${size} MiB, over 40 MiB" >&2; exit 1; fi
echo "gpu-bundle: $OUT ready (${size} MiB)"
