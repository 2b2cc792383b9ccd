#!/usr/bin/env python3
"""Smoke check of bench_live_replay --json output (read from the file named
first, or stdin): one object per free mode, each with at least MIN_STEPS
steps and a utilization in (0, 1]. Shape only: no performance target."""
import json
import sys

MIN_STEPS = 3


def main() -> int:
    text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
    objects = [json.loads(line) for line in text.splitlines() if line.strip()]
    problems = []
    if len(objects) != 2:
        problems.append(f"expected 2 objects (device, stream), got {len(objects)}")
    if sorted(o.get("frees") for o in objects) != ["device", "stream"]:
        problems.append(f"free modes: {[o.get('frees') for o in objects]}")
    for o in objects:
        name = f"{o.get('trace')} frees={o.get('frees')}"
        steps = o.get("steps", [])
        if len(steps) < MIN_STEPS:
            problems.append(f"{name}: {len(steps)} steps, expected >= {MIN_STEPS}")
        if not 0 < o.get("utilization", 0) <= 1:
            problems.append(f"{name}: utilization {o.get('utilization')} not in (0, 1]")
        if steps and o.get("last_step") != steps[-1]:
            problems.append(f"{name}: last_step is not the last of steps")
        if sum(s["events"] for s in steps) != o.get("events"):
            problems.append(f"{name}: the steps do not cover the trace")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
