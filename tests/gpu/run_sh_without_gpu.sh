#!/bin/sh
# Runs gpu/run.sh (given as $1; a bash script) in a temporary directory on a machine without
# a GPU, and checks: exit status 77, "no GPU" on stdout, and a summary.json
# whose "gpu" is false. Skips (status 0, says so) where a GPU does answer.
set -u
run_sh=$1
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "a GPU answers here; nothing to check"; exit 0
fi
work=$(mktemp -d) || exit 1
trap 'rm -rf "$work"' EXIT
# No driver path of ours may leak in: the sim would answer like a driver.
env -u TIDEPOOL_CUDA_LIB -u LD_PRELOAD bash "$run_sh" "$work/out" >"$work/stdout" 2>"$work/stderr"
status=$?
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$work/stdout"; echo "--- stderr"; cat "$work/stderr"; exit 1; }
[ "$status" -eq 77 ] || fail "exit status $status, expected 77"
grep -q "no GPU" "$work/stdout" || fail "stdout does not say 'no GPU'"
[ -f "$work/out/summary.json" ] || fail "no summary.json"
python3 - "$work/out/summary.json" <<'PY' || fail "summary.json does not say there is no GPU"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["gpu"] is False, s
assert s["status"] == "no GPU", s
assert s["exit_code"] == 77, s
PY
echo "ok: run.sh says no GPU and exits 77"
