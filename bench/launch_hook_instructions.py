#!/usr/bin/env python3
"""The launch hook's own instructions per launch, exactly, under callgrind.

Runs bench_launch_hook's hooked launches under valgrind's callgrind and
divides the inclusive instructions of the calls to Runtime::before_launch
and Runtime::after_submission by their call counts (callgrind_annotate's
"=>" lines in the hook's annotated source). Unlike a time, the figure
repeats exactly on a noisy machine; unlike dividing a total by the
benchmark's iterations, it does not depend on how many trials Google
Benchmark ran before the last.

usage: bench/launch_hook_instructions.py BUILD_DIR [LABEL] [Scalars,PoolPointers,Struct]
"""
import re
import subprocess
import sys
import tempfile

CALLS = ("Runtime::before_launch(", "Runtime::after_submission(")


def per_launch(annotated: str, function: str):
    pattern = re.compile(r"\s*([\d,]+)\s+\([^)]*\)\s+=>\s+\S*" + re.escape(function) + r".*\(([\d,]+)x\)\s*$")
    for line in annotated.splitlines():
        m = pattern.match(line)
        if m and "{lambda" not in line:  # the function itself, not a lambda of it called out of line
            return int(m.group(1).replace(",", "")) / int(m.group(2).replace(",", ""))
    return None


def measure(build: str, kind: str):
    with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}",
                        f"{build}/bench/bench_launch_hook", f"--benchmark_filter=BM_HookedLaunch_{kind}$",
                        "--benchmark_min_time=0.05"], capture_output=True, text=True, check=True, timeout=1500)
        annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--auto=yes", out.name],
                                   capture_output=True, text=True, check=True).stdout
    parts = {f: per_launch(annotated, f) for f in CALLS}
    if any(v is None for v in parts.values()):
        sys.exit(f"{kind}: no calls to {', '.join(f for f, v in parts.items() if v is None)} found")
    return parts


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    label = sys.argv[2] if len(sys.argv) > 2 else build
    kinds = sys.argv[3].split(",") if len(sys.argv) > 3 else ["Scalars", "PoolPointers", "Struct"]
    for kind in kinds:
        parts = measure(build, kind)
        detail = ", ".join(f"{f.rstrip('(')} {round(v)}" for f, v in parts.items())
        print(f"{label} {kind}: {round(sum(parts.values()))} instructions a launch ({detail})", flush=True)


if __name__ == "__main__":
    main()
