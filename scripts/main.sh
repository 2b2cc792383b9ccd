#!/usr/bin/env bash
# The main job: install, build, and replay the sample traces that ship in
# data/traces (or the traces in a directory you name) under every policy and
# baseline on the simulated driver, in one pass that writes the table, the
# JSON lines, the HTML report and a Perfetto trace. Needs no GPU, no driver
# and nothing outside the repository.
# Usage: scripts/main.sh [traces-dir] [output-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
traces_dir="${1:-data/traces}"
out_dir="${2:-out}"
./scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target tidepool-replay
mkdir -p "$out_dir"
shopt -s nullglob
traces=("$traces_dir"/*.csv "$traces_dir"/*.csv.gz)
if ((${#traces[@]} == 0)); then
  echo "main: no traces (*.csv, *.csv.gz) in $traces_dir" >&2
  exit 1
fi
./build/default/tools/replay/tidepool-replay --policy all --json-out "$out_dir/replay.jsonl" \
  --html "$out_dir/replay.html" --chrome-trace "$out_dir/replay.perfetto.json.gz" "${traces[@]}" |
  tee "$out_dir/replay.txt"
out_abs="$(cd "$out_dir" && pwd)"
echo
echo "table:        $out_abs/replay.txt"
echo "JSON lines:   $out_abs/replay.jsonl (keys: docs/replay.md)"
echo "HTML report:  $out_abs/replay.html"
echo "Perfetto:     $out_abs/replay.perfetto.json.gz (open in https://ui.perfetto.dev or chrome://tracing)"
