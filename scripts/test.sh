#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite.
# Usage: scripts/test.sh [preset]   (default: "default"; "asan" for ASan+UBSan,
# "tsan" for the concurrency tests under ThreadSanitizer)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
./scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset" -j "$(nproc)"
