#!/usr/bin/env python3
"""The steady training step under a lagging device: no host wait, few VMM calls.

Replays each shipped training trace (data/traces) with tidepool-replay's best_fit
policy in both free modes, the device lagging by 2 and by 50 us of work per
allocation on the sim's virtual clock, so that each run gives the same answers
(issue 28's goals). In the last (steady) step the pool makes no host wait of any
kind (context, stream or event synchronisation) and at most 16 VMM calls, and no
allocation of the trace fails. Counts of driver calls, not times.

usage: steady_step_test.py TIDEPOOL_REPLAY TRACE...
"""
import json
import subprocess
import sys

LAGS_US = (2, 50)
FREE_MODES = ("device", "stream")
MOST_VMM_CALLS = 16


def replay(binary, traces, frees, lag):
    command = [binary, "--policy", "best_fit", "--frees", frees, "--lag-us", str(lag), "--json"] + traces
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, traces = sys.argv[1], sys.argv[2:]
    problems = []
    checked = 0
    for lag in LAGS_US:
        for frees in FREE_MODES:
            results = replay(binary, traces, frees, lag)
            if len(results) != len(traces):
                problems.append(f"lag {lag} us, frees {frees}: {len(results)} results for {len(traces)} traces")
            for r in results:
                checked += 1
                where = f"{r['trace']} (frees {frees}, lag {lag} us)"
                last = r["last_step"]
                calls = last["driver_calls"]
                waits = calls["context_syncs"] + calls["stream_syncs"] + calls["event_syncs"]
                if waits != 0:
                    problems.append(f"{where}: {waits} host waits in the last step ({calls})")
                if last["vmm"] > MOST_VMM_CALLS:
                    problems.append(f"{where}: {last['vmm']} VMM calls in the last step, more than {MOST_VMM_CALLS}")
                if r["failed_allocations"] != 0:
                    problems.append(f"{where}: {r['failed_allocations']} allocations failed")
                if r["lag_us"] != lag or r["host_us"] is None:
                    problems.append(f"{where}: not replayed on the virtual clock at that lag")
    for p in problems:
        print("FAIL", p)
    print(f"{checked} replays checked, {len(problems)} problems")
    sys.exit(1 if problems or checked == 0 else 0)


if __name__ == "__main__":
    main()
