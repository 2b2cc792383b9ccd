#!/usr/bin/env python3
"""Checks bench_residency_live's JSON: every run completed under the preload,
and no budgeted run reserved more device memory than its budget. Shape and
bounds only: step times are never judged here."""
import json
import sys


def main(path, frees, budgets, modes):
    with open(path, encoding="utf-8") as f:
        runs = json.load(f)
    expected = frees * (1 + budgets * modes)
    if len(runs) != expected:
        sys.exit(f"{len(runs)} runs, expected {expected}")
    for run in runs:
        result = run["result"]
        where = f"{run['frees']} {run['budget']} {run['mode']}"
        if not result.get("completed"):
            sys.exit(f"{where}: {result.get('failure', 'did not complete')}")
        if len(result["step_ms"]) == 0:
            sys.exit(f"{where}: no timed step")
        if run["budget"] != "none" and result["peak_reserved_bytes"] > run["budget_bytes"]:
            sys.exit(f"{where}: reserved {result['peak_reserved_bytes']} over the budget {run['budget_bytes']}")
        if run["budget"] != "none" and result["ooms"] != 0:
            sys.exit(f"{where}: {result['ooms']} allocations failed under eviction")
    print(f"{len(runs)} runs completed within their budgets")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
