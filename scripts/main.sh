#!/usr/bin/env bash
# The main job: install, build, replay ../shared/traces under every policy and
# baseline on the simulated driver, and write the HTML report.
# Usage: scripts/main.sh [traces-dir] [output-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
traces_dir="${1:-../shared/traces}"
out_dir="${2:-out}"
./scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target tidepool-replay
mkdir -p "$out_dir"
shopt -s nullglob
traces=("$traces_dir"/*.csv "$traces_dir"/*.csv.gz)
if ((${#traces[@]} == 0)); then
  echo "main: no traces in $traces_dir" >&2
  exit 1
fi
./build/default/tools/replay/tidepool-replay --policy all \
  --html "$out_dir/replay.html" --chrome-trace "$out_dir/replay.chrome.json" "${traces[@]}" | tee "$out_dir/replay.txt"
./build/default/tools/replay/tidepool-replay --policy all --json "${traces[@]}" > "$out_dir/replay.jsonl"
echo
echo "HTML report: $(cd "$out_dir" && pwd)/replay.html"
