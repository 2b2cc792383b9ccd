#!/usr/bin/env python3
"""A cached pair through the preload makes no driver call beyond naming its pool.

Runs bench_pair_instructions --calls (LD_PRELOAD=libtidepool.so, the sim as
libcuda.so.1) in each mode: cudaFree-style pairs before any stream and once a
non-blocking stream exists, and stream-ordered pairs, with the sizes of
gpu/hotpath.cu (one block in each arena in turn). Over the measured pairs,
after the warm-up, the hot path (STYLE.md: no driver call) may ask the
current device once an allocation, and, with a stream, the current context
once a barrier (two pairs in five); never a fence, a host wait, a capture
check or a VMM call. A page moving between the two arenas on every call, as
it did while its fences were too young to answer, shows here as event
queries and records.

usage: pair_driver_calls_test.py BENCH_PAIR_INSTRUCTIONS LIBTIDEPOOL SIM_DIR
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from preload_env import preload_env  # noqa: E402

PAIRS = 2000
NEVER = ("cuCtxSetCurrent", "cuStreamIsCapturing", "cuEventQuery", "cuEventRecord", "cuStreamWaitEvent",
         "cuEventSynchronize", "cuStreamSynchronize", "cuCtxSynchronize", "cuMemCreate", "cuMemRelease",
         "cuMemMap", "cuMemUnmap", "cuMemSetAccess")
# The most of each allowed call a pair, by mode.
AT_MOST = {
    "device": {"cuCtxGetDevice": 1.0, "cuCtxGetCurrent": 0.0},
    "device_stream": {"cuCtxGetDevice": 1.0, "cuCtxGetCurrent": 0.4},
    "async": {"cuCtxGetDevice": 1.0, "cuCtxGetCurrent": 0.0},
}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    program, library, sim_dir = sys.argv[1:]
    problems = []
    for mode, allowed in AT_MOST.items():
        env = preload_env(program, LD_LIBRARY_PATH=sim_dir, LD_PRELOAD=library)
        env.pop("TIDEPOOL_CONF", None)
        run = subprocess.run([program, mode, str(PAIRS), "--calls"], env=env, capture_output=True, text=True,
                             timeout=300)
        if run.returncode != 0:
            problems.append(f"{mode}: exit {run.returncode}: {run.stderr.strip()[-400:]}")
            continue
        result = json.loads(run.stdout)
        calls = result["calls"]
        if result["pairs"] != PAIRS or set(calls) != set(NEVER) | set(allowed):
            problems.append(f"{mode}: unexpected output {run.stdout.strip()}")
            continue
        print(f"{mode}: " + ", ".join(f"{name} {count}" for name, count in calls.items() if count), flush=True)
        for name in NEVER:
            if calls[name] != 0:
                problems.append(f"{mode}: {calls[name]} calls of {name} in {PAIRS} cached pairs")
        for name, per_pair in allowed.items():
            if calls[name] > per_pair * PAIRS:
                problems.append(f"{mode}: {calls[name]} calls of {name} in {PAIRS} cached pairs "
                                f"(at most {per_pair:g} a pair)")
    for p in problems:
        print("FAIL: " + p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
