#!/usr/bin/env bash
# Installs everything tidepool needs to build and test, from Debian packages.
# Idempotent and non-interactive: a second run installs nothing and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config python3 python3-pip
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev zlib1g-dev
  libkainjow-mustache-dev  # the replay report's page template (tools/replay/report.html), header only
  clang libclang-rt-dev  # libFuzzer targets (tests/fuzz)
  chromium  # the HTML report's browser test (tests/tools), headless
  chromium-driver python3-selenium  # the browser tests drive Chromium with Selenium (/usr/bin/python3)
  python3-setuptools-whl python3-wheel-whl python3-venv  # pip install ./python offline (a Debian-packaged build backend)
  valgrind  # instruction counts that repeat exactly (bench/pair_instructions.py, bench/launch_hook_instructions.py)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda_home/include/cuda.h" ]; then
  echo "setup: CUDA headers not found at $cuda_home/include/cuda.h (set CUDA_HOME)" >&2
  exit 1
fi

# RMM's headers (with the CCCL they ship), from the librmm wheel of the Python
# registry, so that include/tidepool/rmm.hpp is compiled and tested. Only that
# one test (tests/rmm) needs them, and the wheels are a 28 MB download, once:
# best effort, and TIDEPOOL_SETUP_RMM=0 skips it. Without them that test is
# skipped and nothing else changes.
rmm_version="26.10.0"
logger_version="0.3.0"  # librmm.so's one run-time dependency beyond libc and libstdc++
if [ "${TIDEPOOL_SETUP_RMM:-1}" = 0 ]; then
  echo "setup: TIDEPOOL_SETUP_RMM=0: librmm not fetched; tidepool/rmm.hpp will not be tested" >&2
elif [ ! -f .deps/librmm/include/rmm/resource_ref.hpp ] || [ ! -f .deps/rapids_logger/lib64/librapids_logger.so ]; then
  rm -rf .deps/wheels .deps/unpacked
  if python3 -m pip download --quiet --no-deps --only-binary=:all: -d .deps/wheels \
      "librmm-cu12==$rmm_version" "rapids-logger==$logger_version" >/dev/null 2>&1; then
    for wheel in .deps/wheels/*.whl; do python3 -m zipfile -e "$wheel" .deps/unpacked; done
    rm -rf .deps/librmm .deps/rapids_logger
    mv .deps/unpacked/librmm .deps/librmm
    mv .deps/unpacked/rapids_logger .deps/rapids_logger
  else
    echo "setup: librmm-cu12 $rmm_version not fetched; tidepool/rmm.hpp will not be tested" >&2
  fi
  rm -rf .deps/wheels .deps/unpacked
fi
