#!/bin/sh
# The GPU bundle's self-test: gpu/run.sh --sim, run from a bundle laid out as
# scripts/gpu-bundle.sh lays it out (run.sh and its helpers at the root, the
# library under lib/, the replay tool under bin/), on a machine without a GPU.
# Checks that the run passes, that every part is recorded as passed or
# skipped with the reason in its log, that the parts that can run here
# (trace; caffe in CPU mode when a Caffe bundle is given) passed with their
# figures, and that naming one part runs only that part.
# Usage: run_sh_sim.sh SOURCE_DIR LIBTIDEPOOL TIDEPOOL_REPLAY [CAFFE_BUNDLE]
set -u
src=$1 lib=$2 replay=$3 caffe=${4:-}
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
b=$work/bundle
mkdir -p "$b/lib" "$b/bin"
cp "$src/gpu/run.sh" "$src/gpu/check.py" "$src/gpu/train.py" "$src/gpu/hotpath.py" "$src/gpu/graphs.py" "$src/gpu/ipc.py" "$b/"
ln -s "$lib" "$b/lib/libtidepool.so"
ln -s "$replay" "$b/bin/tidepool-replay"
if [ -n "$caffe" ] && [ -f "$caffe" ]; then
  mkdir -p "$b/caffe" && ln -s "$caffe" "$b/caffe/caffe-bundle.tar.xz"
fi
fail() { echo "FAIL: $*"; for f in "$work"/out*/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }

env -u LD_PRELOAD -u TIDEPOOL_CUDA_LIB TIDEPOOL_GPU_TRACES="$src/data/traces" \
  bash "$b/run.sh" --sim "$work/out" > "$work/stdout" 2>&1
status=$?
cat "$work/stdout"
[ "$status" -eq 0 ] || fail "run.sh --sim exited $status"
python3 - "$work/out" "$([ -e "$b/caffe/caffe-bundle.tar.xz" ] && echo 1 || echo 0)" <<'PY' || fail "the summary does not hold"
import json, os, sys
out, with_caffe = sys.argv[1], sys.argv[2] == "1"
s = json.load(open(os.path.join(out, "summary.json")))
assert s["status"] == "passed" and s["gpu"] is False, s
parts = s["parts"]
every = ["probe", "residency", "caffe", "graphs", "ipc", "correctness", "train", "hotpath", "trace"]
assert list(parts) == every, list(parts)
for name, p in parts.items():
    assert p["status"] in ("passed", "skipped"), (name, p)
    log = open(os.path.join(out, p["log"])).read()
    if p["status"] == "skipped":
        assert "skipped" in log, (name, log)
trace = parts["trace"]
assert trace["status"] == "passed", trace
replays = trace["figures"]
assert replays and all(r["rc"] == "0" and r["rows"] for r in replays.values()), replays
assert parts["caffe"]["status"] == ("passed" if with_caffe else "skipped"), parts["caffe"]
if with_caffe:
    assert parts["caffe"]["figures"]["cpu_self_test"]["losses"] > 0, parts["caffe"]
md = open(os.path.join(out, "summary.md")).read()
assert all(f"## {name}" in md for name in every) and "| trace | passed |" in md, md
assert all(name in md for name in replays), md  # the trace part's figures are there
print("ok:", ", ".join(f"{n} {p['status']}" for n, p in parts.items()))
PY
# One part named: only it runs.
env -u LD_PRELOAD -u TIDEPOOL_CUDA_LIB TIDEPOOL_GPU_TRACES="$src/data/traces" \
  bash "$b/run.sh" --sim "$work/out1" trace > /dev/null 2>&1 || fail "run.sh --sim OUT trace failed"
[ "$(ls "$work/out1/parts")" = "trace.json" ] || fail "naming trace ran: $(ls "$work/out1/parts")"
bash "$b/run.sh" --sim "$work/out2" nosuchpart > /dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown part is not refused"
echo "ok: run.sh --sim"
