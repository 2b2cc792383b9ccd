#!/bin/sh
# The GPU-only parts of gpu/run.sh (residency, graphs, caffe, ipc), run here with
# a stand-in python (fake_python.sh) that answers as train.py and graphs.py
# would on a GPU, and a stand-in Caffe bundle whose run.sh and bin/caffe
# print what the real ones print: the plumbing the self-test cannot reach
# (the budgets derived from the unconstrained peak, every run named and
# recorded, the figures gathered) is checked before it costs GPU time.
# Usage: run_sh_plumbing.sh SOURCE_DIR
set -u
src=$1
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
b=$work/bundle
mkdir -p "$b/lib"
cp "$src/gpu/run.sh" "$src/gpu/check.py" "$src/gpu/train.py" "$src/gpu/graphs.py" "$src/gpu/ipc.py" "$b/"
# Preloaded into the stand-in: any harmless library does.
lib=$(ldconfig -p 2> /dev/null | sed -n 's/.*libm\.so\.6 (libc6,x86-64) => //p' | head -1)
ln -s "${lib:-/lib/x86_64-linux-gnu/libm.so.6}" "$b/lib/libtidepool.so"
# The stand-in Caffe bundle: run.sh writes the logs the real one writes;
# bin/caffe answers `caffe time` and writes the report TIDEPOOL_CONF names
# (a budgeted run holds its budget, an unconstrained one 6 GB).
mkdir -p "$work/caffe/bundle/bin" "$b/caffe"
cat > "$work/caffe/bundle/run.sh" <<'SH'
#!/bin/bash
echo "== CUDA lib dirs: /nowhere"
mkdir -p "$LOG_DIR"
echo "I1126 x] Average Forward-Backward: 80.5 ms." > "$LOG_DIR/time_vgg16.log"
echo "I1126 x] Average Forward-Backward: 1.5 ms." > "$LOG_DIR/time_lenet.log"
printf 'Iteration 0, loss = 2.7\nIteration 1, loss = 2.4\n' > "$LOG_DIR/train_losses.txt"
SH
cat > "$work/caffe/bundle/bin/caffe" <<'SH'
#!/bin/bash
report=$(printf '%s\n' "$TIDEPOOL_CONF" | tr ',' '\n' | sed -n 's/^report://p')
limit=$(printf '%s\n' "$TIDEPOOL_CONF" | tr ',' '\n' | sed -n 's/^device_limit://p')
printf '{"devices": [{"peak_reserved_bytes": %s, "device_limit_bytes": %s}]}\n' "${limit:-6000000000}" "${limit:-0}" > "$report"
echo "Average Forward-Backward: $([ -n "$limit" ] && echo 100 || echo 80) ms."
SH
chmod +x "$work/caffe/bundle/run.sh" "$work/caffe/bundle/bin/caffe"
tar -cJf "$b/caffe/caffe-bundle.tar.xz" -C "$work/caffe" bundle
fail() { echo "FAIL: $*"; for f in "$work"/out/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
env -u LD_PRELOAD TIDEPOOL_GPU_ASSUME=1 PYTHON="$src/tests/gpu/fake_python.sh" TIDEPOOL_GPU_RES_STEPS=2 \
  bash "$b/run.sh" "$work/out" residency graphs caffe ipc > "$work/stdout" 2>&1
status=$?
cat "$work/stdout"
[ "$status" -eq 0 ] || fail "run.sh exited $status"
python3 - "$work/out" <<'PY' || fail "the figures do not hold"
import json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "summary.json")))
parts = s["parts"]
assert list(parts) == ["residency", "caffe", "graphs", "ipc"], list(parts)
assert all(p["status"] == "passed" for p in parts.values()), parts
res = parts["residency"]["figures"]
for model in ("gpt", "resnet50"):
    runs = res[model]["runs"]
    assert set(runs) == {"none", "50.off", "50.launch", "50.learn", "33.off", "33.launch", "33.learn",
                         "33.launch_auto", "50.pluggable"}, runs
    # The budgets come from the unconstrained peak (1 GB).
    assert runs["50.learn"]["device_limit_bytes"] == 500000000, runs["50.learn"]
    assert runs["33.off"]["device_limit_bytes"] == 330000000, runs["33.off"]
    assert runs["50.pluggable"]["device_limit_bytes"] == 500000000, runs["50.pluggable"]
    assert runs["50.learn"]["evicted_bytes_per_step"] == 1000000, runs["50.learn"]
    assert res[model]["launch_visibility"]["kernels_per_step"] == 120, res[model]
g = parts["graphs"]["figures"]
assert all(g[m]["as_native"] and g[m]["no_crash"] for m in ("preload", "preload_nocache", "tidepool")), g
c = parts["caffe"]["figures"]
assert c["lenet_losses_exact"] and set(c["vgg16_budgets"]) == {"none", "65", "50"}, c
assert c["vgg16_budgets"]["65"]["device_limit_bytes"] == 3900000000, c["vgg16_budgets"]
assert abs(c["vgg16_budgets"]["50"]["memory_saved"] - 0.5) < 1e-9, c["vgg16_budgets"]
assert abs(c["vgg16_budgets"]["50"]["time_cost"] - 0.25) < 1e-9, c["vgg16_budgets"]
i = parts["ipc"]["figures"]
assert i["preload"]["ok"] and i["preload"]["same_sums_as_native"] and i["preload"]["as_native"], i
assert i["preload_nocache"]["against"] == "native_nocache" and i["preload_nocache"]["as_native"], i
assert not i["preload_nocache"]["ok"] and i["preload_nocache"]["share_error"], i
print("ok: residency, graphs, caffe and ipc plumbing")
PY
