#!/bin/bash
# A stand-in for the GPU machine's python3, for run_sh_plumbing.sh: it
# answers `-c "import torch"`, and runs train.py, graphs.py and ipc.py as they would
# on a GPU, printing their JSON line and writing the tidepool report that
# TIDEPOOL_CONF (or train.py --conf) names: the unconstrained peak is 1 GB,
# a budgeted run holds its budget. Everything else goes to the real python3.
set -u
if [ "${1:-}" = "-c" ]; then exit 0; fi
script=$(basename "${1:-}")
case "$script" in
  train.py | graphs.py) ;;
  ipc.py)
    # Without its cache PyTorch 2.x refuses to share; the preload must too.
    if [ "${PYTORCH_NO_CUDA_MEMORY_CACHING:-0}" = 1 ]; then
      echo '{"ok": false, "share_error": "invalid device pointer: 0x302000000", "consumer_exit": 0}'
      exit 1
    fi
    echo '{"consumer_saw": {"big": 1.5, "small": 2.5, "view": 3.5}, "consumer_saw_ours": true, "we_see_its_writes": true, "its_view_kept_after_our_free": true, "consumer_exit": 0, "ok": true}'
    exit 0 ;;
  *) exec python3 "$@" ;;
esac
shift
conf=${TIDEPOOL_CONF:-}
model=x mode=native
while [ $# -gt 0 ]; do
  case "$1" in
    --conf) conf=$2; shift ;;
    --model) model=$2; shift ;;
    --mode) mode=$2; shift ;;
  esac
  shift
done
value() { printf '%s\n' "$conf" | tr ',' '\n' | sed -n "s/^$1://p" | head -1; }
report=$(value report)
limit=$(value device_limit)
if [ -n "$report" ]; then
  peak=${limit:-1000000000}
  printf '{"launches": {"scanned": 120, "naming_blocks": 100}, "devices": [{"peak_reserved_bytes": %s, "device_limit_bytes": %s, "evicted_bytes": %s}]}\n' \
    "$peak" "${limit:-0}" "$([ -n "$limit" ] && echo 2000000 || echo 0)" > "$report"
fi
if [ "$script" = graphs.py ]; then
  # Without PyTorch's cache a capture fails natively; the preload must too.
  if [ "${PYTORCH_NO_CUDA_MEMORY_CACHING:-0}" = 1 ]; then
    echo '{"mode": "'"$mode"'", "eager_losses": ["0x1.4p+1"], "captured": false, "error": "RuntimeError: x"}'
  else
    echo '{"mode": "'"$mode"'", "eager_losses": ["0x1.4p+1"], "captured": true, "graph_losses": ["0x1.2p+1"]}'
  fi
  exit 0
fi
echo "training $model ($mode)"
echo '{"model": "'"$model"'", "mode": "'"$mode"'", "losses": ["0x1.4p+1", "0x1.2p+1"], "losses_decimal": [2.5, 2.25], "step_ms_median": 100.0, "kernels_per_step": 120, "peak_used_bytes_meminfo": 1000, "torch_version": "fake"}'
