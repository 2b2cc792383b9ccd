#!/usr/bin/env python3
"""Smoke check of bench/live_table.py: its table (read from the file named
first) and its --json (the file named second) for one trace, one lag, one
run, with --replay and --scales 0.5. Shape only: one row per (trace, free
mode), the trace's scaled copy among them, each with a goals verdict, a
replay figure on the cudaFree-style rows (the ones the replay models) and
none on the stream rows, and one run per (trace, mode, lag) in the JSON with
its figures. No performance target."""
import json
import sys


def main() -> int:
    table = open(sys.argv[1], encoding="utf-8").read().splitlines()
    runs = json.load(open(sys.argv[2], encoding="utf-8"))
    problems = []
    rows = [line for line in table if line.startswith("| ") and not line.startswith("| trace")]
    if len(rows) != 4:
        problems.append(f"expected 4 table rows (cudaFree, stream; the trace and its copy), got {len(rows)}")
    names = sorted({row.split("|")[1].strip() for row in rows})
    if len(names) != 2 or not names[1].endswith("_x0.5") or names[1] != names[0] + "_x0.5":
        problems.append(f"expected a trace and its copy scaled by 0.5, got {names}")
    for row in rows:
        verdict = row.rstrip(" |").split("|")[-1].strip()
        if verdict != "met" and not set(verdict.split(", ")) <= {"util", "gap", "vmm", "waits", "replay"}:
            problems.append(f"no goals verdict in: {row}")
        replay = row.rstrip(" |").split("|")[-2].strip()
        modelled = "| cudaFree |" in row
        if modelled and not (replay.replace(".", "", 1).isdigit() and 0 < float(replay) <= 1):
            problems.append(f"no replay figure in: {row}")
        if not modelled and replay != "—":
            problems.append(f"a replay figure where the replay models nothing: {row}")
    if not any(line.startswith("| trace |") and "| replay |" in line for line in table):
        problems.append("no header with a replay column")
    if not any("rows meet every goal" in line for line in table):
        problems.append("no summary line")
    if sorted(r["frees"] for r in runs) != ["device", "device", "stream", "stream"]:
        problems.append(f"JSON free modes: {[r.get('frees') for r in runs]}")
    for r in runs:
        if len(r["runs"]) != 1:
            problems.append(f"{r['frees']}: {len(r['runs'])} runs, expected 1")
        for figures in r["runs"]:
            if not 0 < figures["utilization"] <= 1:
                problems.append(f"{r['frees']}: utilization {figures['utilization']}")
            if figures["vmm"] < 0 or figures["waits"] < 0:
                problems.append(f"{r['frees']}: negative counts {figures}")
        replay = r.get("replay_utilization")
        if (r["frees"] == "device") != (replay is not None) or (replay is not None and not 0 < replay <= 1):
            problems.append(f"{r['frees']}: replay_utilization {replay}")
    for p in problems:
        print(f"live_table_check: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
