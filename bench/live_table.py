#!/usr/bin/env python3
"""live_table: the lagged live-replay table, trace x free mode x lag.

Runs bench_live_replay (a build's bench/bench_live_replay) on every trace in
each free mode --frees names (default both: cudaFree-style and stream-ordered
on a stream of its own; legacy: stream-ordered on the legacy stream, as
tidepool-replay --frees stream replays) at each device lag, --reps times,
and prints one row per (trace, mode, lag): utilization, the last step's VMM
calls and host waits (context, stream and event synchronisations) as the
range over the runs, and wall ns per event as their mean. With --before, a second build runs
interleaved with the first (same machine, same moments), and each row
gives before and after. The last column names the goals a row misses, read
from the runs of the build given last: utilization under 0.97, cudaFree-
style more than 0.01 under stream-ordered (means, same trace and lag), more
than 16 VMM calls or any host wait in the last step. The device lags the
host, so runs differ; the ranges show by how much. With --replay, a column
gives tidepool-replay's utilization (best_fit, the same --lag-us) for the
rows it models, cudaFree-style (--frees device) and the legacy stream
(--frees stream, the trace's stream 0 as the program ran it), and a row
misses "replay" when it lies more than 0.005 outside the live runs' range.
With --scales, each trace also runs as copies with every size scaled
(bench/trace_variants.py: a stand-in for the same model at other batch
sizes), each a row of its own named <trace>_x<scale>.

It reports what was measured and asserts nothing; its exit status says only
whether every run completed.

Usage:
  bench/live_table.py [--reps 3] [--lags 2,50] [--frees both] [--replay] [--scales S,...] [--before BUILD] [--json PATH] BUILD [TRACE...]
TRACE defaults to every trace in data/traces.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import trace_variants

UTILIZATION_GOAL = 0.97
MODE_GAP_GOAL = 0.01
VMM_GOAL = 16
REPLAY_GOAL = 0.005
# The live free modes tidepool-replay models, and its --frees for each.
REPLAY_FREES = {"device": "device", "legacy": "stream"}


MODE_NAMES = {"device": "cudaFree", "stream": "stream", "legacy": "stream (legacy)"}


def run_bench(build, traces, lag, frees):
    """One bench_live_replay run of every trace in each free mode: its JSON objects."""
    binary = os.path.join(build, "bench", "bench_live_replay")
    command = [binary, "--frees", frees, "--kernel-us", str(lag), "--json"] + traces
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def run_replay(build, traces, lag, frees):
    """tidepool-replay's best_fit utilization of each trace at this lag: {trace name: utilization}."""
    binary = os.path.join(build, "tools", "replay", "tidepool-replay")
    command = [binary, "--policy", "best_fit", "--frees", frees, "--lag-us", "%g" % lag, "--json"] + traces
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    figures = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            figures[trace_name(result["trace"])] = result["utilization"]
    return figures


def row_of(result):
    last = result["last_step"]
    calls = last["driver_calls"]
    return {
        "utilization": result["utilization"],
        "vmm": last["vmm"],
        "waits": calls["context_syncs"] + calls["stream_syncs"] + calls["event_syncs"],
        "ns_per_event": result["ns_per_event"],
    }


trace_name = trace_variants.trace_name


def span(values, form):
    low, high = min(values), max(values)
    return form % low if low == high else (form % low) + "–" + (form % high)


def missed_goals(runs, other_mode_runs, mode, replay=None):
    missed = []
    if min(r["utilization"] for r in runs) < UTILIZATION_GOAL:
        missed.append("util")
    if mode == "device" and other_mode_runs:
        mean = sum(r["utilization"] for r in runs) / len(runs)
        stream_mean = sum(r["utilization"] for r in other_mode_runs) / len(other_mode_runs)
        if stream_mean - mean > MODE_GAP_GOAL:
            missed.append("gap")
    if max(r["vmm"] for r in runs) > VMM_GOAL:
        missed.append("vmm")
    if max(r["waits"] for r in runs) > 0:
        missed.append("waits")
    if replay is not None:
        live = [r["utilization"] for r in runs]
        if replay < min(live) - REPLAY_GOAL or replay > max(live) + REPLAY_GOAL:
            missed.append("replay")
    return ", ".join(missed) if missed else "met"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--lags", default="2,50", help="kernel microseconds, comma-separated")
    parser.add_argument("--frees", default="both", choices=["device", "stream", "legacy", "both", "all"],
                        help="bench_live_replay's free modes (legacy: stream-ordered on the legacy stream)")
    parser.add_argument("--replay", action="store_true",
                        help="also replay each trace with BUILD's tidepool-replay at each lag, for the modes it models")
    parser.add_argument("--scales", help="also run each trace with every size scaled by each of these "
                        f"(comma-separated; bench/trace_variants.py, e.g. {trace_variants.DEFAULT_SCALES})")
    parser.add_argument("--before", help="a second build directory, run interleaved with BUILD")
    parser.add_argument("--json", help="write every run's figures here")
    parser.add_argument("build")
    parser.add_argument("traces", nargs="*")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    try:
        lags = sorted({float(x) for x in args.lags.split(",") if x.strip()})
    except ValueError:
        parser.error(f"--lags: not a list of numbers: {args.lags}")
    if not lags:
        parser.error("--lags: no lag given")
    here = os.path.dirname(os.path.abspath(__file__))
    default_traces = os.path.join(here, "..", "data", "traces")
    traces = args.traces or sorted(glob.glob(os.path.join(default_traces, "*.csv")) +
                                   glob.glob(os.path.join(default_traces, "*.csv.gz")))
    if not traces:
        parser.error("no traces given and none in data/traces")
    scales = []
    if args.scales:
        try:
            scales = trace_variants.parse_scales(args.scales)
        except ValueError as error:
            parser.error(f"--scales: {error}")
    builds = [("before", args.before), ("after", args.build)] if args.before else [("after", args.build)]
    with tempfile.TemporaryDirectory(prefix="live_table_") as variants_dir:
        try:
            traces = traces + trace_variants.write_variants(traces, scales, variants_dir)
        except (trace_variants.TraceError, OSError) as error:
            print(f"live_table: {error}", file=sys.stderr)
            return 1
        return tabulate(args, builds, traces, lags)


def tabulate(args, builds, traces, lags):
    """Runs every build on `traces` at `lags` and prints the table: main's exit status."""
    runs = {}  # (build, trace, mode, lag) -> [row]
    try:
        for _ in range(args.reps):
            for lag in lags:
                for label, build in builds:
                    for result in run_bench(build, traces, lag, args.frees):
                        key = (label, trace_name(result["trace"]), result["frees"], lag)
                        runs.setdefault(key, []).append(row_of(result))
        replays = {}  # (trace, live mode, lag) -> utilization
        if args.replay:
            live_modes = {key[2] for key in runs}
            for lag in lags:
                for mode, frees in REPLAY_FREES.items():
                    if mode not in live_modes:
                        continue
                    for trace, utilization in run_replay(args.build, traces, lag, frees).items():
                        replays[(trace, mode, lag)] = utilization
    except (RuntimeError, OSError) as error:
        print(f"live_table: {error}", file=sys.stderr)
        return 1

    labels = [label for label, _ in builds]
    header = ["trace", "frees", "lag µs"]
    for column in ("util", "VMM", "waits", "ns/event"):
        header += [f"{column} {label}" for label in labels] if len(labels) > 1 else [column]
    if args.replay:
        header.append("replay")
    header.append("goals")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    cells = sorted({key[1:] for key in runs})
    met = 0
    for trace, mode, lag in cells:
        row = [trace, MODE_NAMES.get(mode, mode), "%g" % lag]
        for field, form in (("utilization", "%.4f"), ("vmm", "%d"), ("waits", "%d")):
            row += [span([r[field] for r in runs[(label, trace, mode, lag)]], form)
                    if (label, trace, mode, lag) in runs else "—" for label in labels]
        for label in labels:
            values = [r["ns_per_event"] for r in runs.get((label, trace, mode, lag), [])]
            row.append("%.0f" % (sum(values) / len(values)) if values else "—")
        replay = replays.get((trace, mode, lag))
        if args.replay:
            row.append("%.4f" % replay if replay is not None else "—")
        after_runs = runs.get(("after", trace, mode, lag))
        goals = (missed_goals(after_runs, runs.get(("after", trace, "stream", lag), []), mode, replay)
                 if after_runs else "not run")
        met += goals == "met"
        row.append(goals)
        print("| " + " | ".join(row) + " |")
    print(f"\n{met} of {len(cells)} rows meet every goal in all {args.reps} runs of {args.build}.")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump([{"build": k[0], "trace": k[1], "frees": k[2], "lag_us": k[3], "runs": v,
                        "replay_utilization": replays.get(k[1:]) if k[0] == "after" else None}
                       for k, v in sorted(runs.items())], out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
