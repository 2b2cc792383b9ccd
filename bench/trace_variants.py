#!/usr/bin/env python3
"""trace_variants: scaled copies of RMM-format traces, to test a class of
traces rather than the few that ship.

A training trace run at another batch size (or model width) keeps its order
of allocations and frees, and most sizes move with the scale: a copy with
every size multiplied by SCALE is a stand-in for it. Each size is rounded up
to 512 bytes, as PyTorch's caching allocator rounds a request, and never
falls to 0. Threads, times, pointers, streams and owners (the column
tidepool's own traces add) are kept, so every free still names its
allocation. A trace it cannot read is an error naming the file and line,
and leaves no copy behind.

Usage:
  bench/trace_variants.py [--scales 0.5,0.75,1.3,1.7,2.5] --out DIR TRACE...
writes DIR/<trace>_x<scale>.csv for each trace and scale. bench/live_table.py
--scales runs its table on such copies beside the originals.
"""
import argparse
import csv
import gzip
import math
import os
import sys
import zlib
from fractions import Fraction

DEFAULT_SCALES = "0.5,0.75,1.3,1.7,2.5"
ROUNDING = 512
RMM_COLUMNS = ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]
# tidepool's own traces (trace:PATH) add who asked.
TIDEPOOL_COLUMNS = RMM_COLUMNS + ["Owner"]
SIZE_COLUMN = RMM_COLUMNS.index("Size")


class TraceError(Exception):
    """A trace this tool cannot scale: the message names the file and line."""


def parse_scales(text):
    """'0.5,1.3' -> [0.5, 1.3], each once, in order; ValueError on a non-number or a scale <= 0."""
    scales = []
    for part in text.split(","):
        if not part.strip():
            continue
        value = float(part)
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"a scale must be a positive number, not {part.strip()}")
        if value not in scales:
            scales.append(value)
    if not scales:
        raise ValueError("no scale given")
    return scales


def scaled_size(size, scale):
    """`size` bytes times `scale`, rounded up to ROUNDING, at least ROUNDING (0 stays 0).
    Exact: the scale as written (1.1 is 11/10), not its nearest binary fraction."""
    if size == 0:
        return 0
    exact = size * Fraction(repr(scale))
    return max(ROUNDING, math.ceil(exact / ROUNDING) * ROUNDING)


def trace_name(path):
    name = os.path.basename(path)
    for suffix in (".gz", ".csv"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def scale_text(scale):
    """The scale as a name: short (2, 0.5), and never the same for two scales."""
    short = f"{scale:g}"
    return short if float(short) == scale else repr(scale)


def variant_path(out_dir, trace, scale):
    return os.path.join(out_dir, f"{trace_name(trace)}_x{scale_text(scale)}.csv")


def scaled_rows(trace, source, scale):
    """The lines of `source` (an open trace) with every size scaled, header first."""
    rows = csv.reader(source)
    header = next(rows, None)
    columns = [h.strip() for h in header] if header is not None else None
    if columns not in (RMM_COLUMNS, TIDEPOOL_COLUMNS):
        raise TraceError(f"{trace}: line 1: expected the header {','.join(RMM_COLUMNS)} (with ,Owner or without)")
    yield header
    for line, row in enumerate(rows, start=2):
        if not row:
            continue
        if len(row) != len(columns):
            raise TraceError(f"{trace}: line {line}: {len(row)} fields, expected {len(columns)}")
        try:
            size = int(row[SIZE_COLUMN])
        except ValueError:
            raise TraceError(f"{trace}: line {line}: size {row[SIZE_COLUMN]!r} is not a number") from None
        if size < 0:
            raise TraceError(f"{trace}: line {line}: negative size {size}")
        row[SIZE_COLUMN] = str(scaled_size(size, scale))
        yield row


def write_variant(trace, scale, out_path):
    """Writes `trace` with every size scaled to `out_path`; on any error none of it is left there."""
    opener = gzip.open if trace.endswith(".gz") else open
    try:
        with opener(trace, "rt", encoding="utf-8", newline="") as source, \
                open(out_path, "w", encoding="utf-8", newline="") as sink:
            csv.writer(sink, lineterminator="\n").writerows(scaled_rows(trace, source, scale))
    except BaseException as error:
        remove_quietly(out_path)
        # A gzip file cut short or corrupt, or bytes that are not text.
        if isinstance(error, (UnicodeDecodeError, EOFError, csv.Error, gzip.BadGzipFile, zlib.error)):
            raise TraceError(f"{trace}: not a readable trace: {error}") from None
        raise


def remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass


def write_variants(traces, scales, out_dir):
    """Every (trace, scale) copy in `out_dir`, originals' order kept: the paths written."""
    names = [trace_name(t) for t in traces]
    for name in names:
        if names.count(name) > 1:
            raise TraceError(f"two traces are named {name}: their copies would overwrite each other")
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for trace in traces:
        for scale in scales:
            path = variant_path(out_dir, trace, scale)
            write_variant(trace, scale, path)
            paths.append(path)
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default=DEFAULT_SCALES, help="size multipliers, comma-separated")
    parser.add_argument("--out", required=True, help="the folder the copies go to")
    parser.add_argument("traces", nargs="+")
    args = parser.parse_args()
    try:
        scales = parse_scales(args.scales)
    except ValueError as error:
        parser.error(f"--scales: {error}")
    try:
        for path in write_variants(args.traces, scales, args.out):
            print(path)
    except (TraceError, OSError) as error:
        print(f"trace_variants: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
