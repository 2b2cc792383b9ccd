#!/usr/bin/env python3
"""Instructions per cached allocate/free pair through the preload, exactly.

Runs bench_pair_instructions (a build's bench/bench_pair_instructions) with
LD_PRELOAD=libtidepool.so and the sim as libcuda.so.1 under valgrind's
callgrind, collecting only inside its measured_pairs(), at two pair counts;
the difference divided by the difference in pairs leaves out the start and
the warm-up. The loop's own instructions are left out; the rest is split
into tidepool's own (its code and what it calls in libc and libstdc++) and
the driver's (every call from libtidepool.so into the sim, inclusive),
read from the calls in callgrind's output. Unlike a time, the figures repeat exactly on a noisy
machine; the driver's part is the sim's, not a GPU driver's, so only
tidepool's own and the number of driver calls carry over to a GPU.

usage: bench/pair_instructions.py BUILD_DIR [MODE,...]
  MODE: device (before any stream), device_stream (once a non-blocking
  stream exists), async (cuMemAllocAsync/cuMemFreeAsync); all three if none
"""
import os
import re
import subprocess
import sys
import tempfile

MODES = ("device", "device_stream", "async")
FEW, MANY = 2000, 12000


def parse(path: str):
    """Instructions in libtidepool.so's calls (the program's own loop left out), and the
    instructions and count of its calls into the sim."""
    names = {}  # "ob"/"cob" share one table of object names

    def name(value: str) -> str:
        m = re.match(r"\((\d+)\)\s*(.*)", value)
        if not m:
            return value
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), "")

    total = 0
    program = 0  # the benchmark's own loop, not tidepool's
    into_driver = 0
    driver_calls = 0
    obj = callee_obj = ""
    pending_call = None  # the calls= line whose inclusive cost is the next line
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("summary:"):
                total = int(line.split()[1])
            elif line.startswith("ob="):
                obj = name(line[3:].strip())
                callee_obj = obj
            elif line.startswith("cob="):
                callee_obj = name(line[4:].strip())
            elif line.startswith("fn="):
                callee_obj = obj
            elif line.startswith("calls="):
                pending_call = int(line.split("=")[1].split()[0])
            elif line[:1] in "0123456789+-*":
                fields = line.split()
                if len(fields) < 2:
                    continue
                cost = int(fields[1])
                if pending_call is None:
                    if os.path.basename(obj) == "bench_pair_instructions":
                        program += cost
                    continue
                if "libtidepool.so" in obj and os.path.basename(callee_obj).startswith("libcuda.so"):
                    into_driver += cost
                    driver_calls += pending_call
                pending_call = None
                callee_obj = obj
    return total - program, into_driver, driver_calls


def run(build: str, mode: str, pairs: int):
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "sim"),
               LD_PRELOAD=os.path.join(build, "libtidepool.so"))
    env.pop("TIDEPOOL_CONF", None)
    with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}",
                        "--toggle-collect=*measured_pairs*",
                        os.path.join(build, "bench", "bench_pair_instructions"), mode, str(pairs)],
                       env=env, capture_output=True, text=True, check=True, timeout=1200)
        return parse(out.name)


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    build = sys.argv[1]
    modes = sys.argv[2].split(",") if len(sys.argv) > 2 else list(MODES)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        sys.exit(f"unknown mode {', '.join(unknown)}; modes: {', '.join(MODES)}")
    for mode in modes:
        few, many = run(build, mode, FEW), run(build, mode, MANY)
        total, driver, calls = ((b - a) / (MANY - FEW) for a, b in zip(few, many))
        print(f"{mode}: {total - driver:.0f} tidepool instructions a pair, {calls:.2f} driver calls "
              f"({driver:.0f} instructions in the sim), {total:.0f} in all", flush=True)


if __name__ == "__main__":
    main()
