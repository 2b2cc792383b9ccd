#!/usr/bin/env python3
"""tidepool-snapshot2csv: a PyTorch memory snapshot to an RMM logging CSV trace.

A snapshot is the pickle that torch.cuda.memory._dump_snapshot() writes (the
dict torch.cuda.memory._snapshot() returns) after
torch.cuda.memory._record_memory_history(). Its 'device_traces' holds, per
device, the allocator's event history: dicts with 'action', 'addr', 'size',
'stream' and, in recent versions, 'time_us'. This tool turns one device's
history into the CSV that tidepool-replay (and RMM's replay benchmark) read:

    Thread,Time,Action,Pointer,Size,Stream

  alloc           -> allocate
  free_completed  -> free (when the block really returns to PyTorch's cache;
                     free_requested only marks the program's intent)
  oom             -> allocate failure
  anything else (segment_alloc, segment_free, free_requested, snapshot, ...)
  is the caching allocator's own business and is left out.

Time is measured from the first row written (HH:MM:SS.microseconds, as RMM
writes it); without 'time_us', events are one microsecond apart. The
history is a ring buffer, so it may begin mid-run: a free of a block
allocated before it began is left out and counted on stderr.

Unpickling needs no torch and runs no code: snapshots are plain dicts and
lists, and any other global in the pickle is refused. Only the standard
library is used. Bad input is one line on stderr and exit status 2.
"""

import argparse
import collections
import io
import pickle
import sys

# Filled in by CMake in the built and installed copies (tools/snapshot/CMakeLists.txt).
VERSION = "@PROJECT_VERSION@"

PROG = "tidepool-snapshot2csv"
HEADER = "Thread,Time,Action,Pointer,Size,Stream"
MASK64 = (1 << 64) - 1

# The only globals a plain-data pickle may name: containers, nothing callable
# with side effects.
_SAFE_GLOBALS = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("collections", "OrderedDict"): collections.OrderedDict,
}


class BadInput(Exception):
    """Input that is not a usable snapshot; the message is for stderr."""


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        safe = _SAFE_GLOBALS.get((module, name))
        if safe is None:
            raise pickle.UnpicklingError(
                f"refusing to load the global {module}.{name}: a snapshot holds only plain data")
        return safe

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing a persistent id: a snapshot holds only plain data")


def load_snapshot(data):
    """Unpickles `data` (bytes) without running code; raises BadInput."""
    try:
        snapshot = _PlainDataUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise BadInput(f"not a PyTorch memory snapshot: {e}") from None
    except Exception as e:  # any other failure means the bytes are not a pickle
        raise BadInput(f"not a PyTorch memory snapshot (not a pickle: {type(e).__name__}: {e})") from None
    if not isinstance(snapshot, dict):
        raise BadInput(f"not a PyTorch memory snapshot: the pickle holds a {type(snapshot).__name__}, not a dict")
    traces = snapshot.get("device_traces")
    if traces is None:
        raise BadInput("the snapshot has no 'device_traces': record them with "
                       "torch.cuda.memory._record_memory_history() before taking the snapshot")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise BadInput("'device_traces' is not a list of per-device lists")
    return snapshot


def pick_device(traces, device):
    """The device whose history to convert; raises BadInput."""
    if device is not None:
        if device < 0 or device >= len(traces):
            raise BadInput(f"--device {device}: the snapshot has traces for devices 0..{len(traces) - 1}")
        return device
    busy = [i for i, t in enumerate(traces) if t]
    if not busy:
        raise BadInput("the snapshot's 'device_traces' are empty: nothing was recorded")
    if len(busy) > 1:
        raise BadInput("the snapshot has traces for devices " + ", ".join(map(str, busy)) +
                       ": choose one with --device")
    return busy[0]


def _field(entry, key, index):
    value = entry.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadInput(f"trace entry {index} ('{entry.get('action')}') has no integer '{key}'")
    return value


def _format_time(us):
    seconds, fraction = divmod(us, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"


def _format_stream(stream):
    stream &= MASK64
    return "0" if stream == 0 else f"0x{stream:x}"


class Conversion:
    """The CSV rows of one device's history, and what had to be left out."""

    def __init__(self):
        self.rows = []
        self.unknown_frees = 0  # frees of blocks allocated before the history began
        self.reallocated = 0    # allocs of a live address whose free the history lacks


def convert(entries):
    kept = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise BadInput(f"trace entry {index} is a {type(entry).__name__}, not a dict")
        if entry.get("action") in ("alloc", "free_completed", "oom"):
            kept.append((index, entry))
    timed = bool(kept) and all(isinstance(e.get("time_us"), (int, float)) for _, e in kept)

    result = Conversion()
    live = {}
    last_time = 0
    for position, (index, entry) in enumerate(kept):
        action = entry["action"]
        stream = _field(entry, "stream", index) if "stream" in entry else 0
        time = int(entry["time_us"]) if timed else position
        time = max(time, last_time)  # the history's order is the truth; times never go back
        last_time = time
        if action == "alloc":
            addr = _field(entry, "addr", index)
            size = _field(entry, "size", index)
            if addr in live:
                result.reallocated += 1
                result.rows.append((time, "free", addr, live.pop(addr), stream))
            live[addr] = size
            result.rows.append((time, "allocate", addr, size, stream))
        elif action == "free_completed":
            addr = _field(entry, "addr", index)
            if addr not in live:
                result.unknown_frees += 1
                continue
            result.rows.append((time, "free", addr, live.pop(addr), stream))
        else:  # oom: the request PyTorch could not serve
            result.rows.append((time, "allocate failure", 0, _field(entry, "size", index), stream))
    if result.rows:  # the trace starts at zero, with its first row
        start = result.rows[0][0]
        result.rows = [(time - start, *rest) for time, *rest in result.rows]
    return result


def write_csv(conversion, out):
    out.write(HEADER + "\n")
    for time, action, addr, size, stream in conversion.rows:
        out.write(f"0,{_format_time(time)},{action},0x{addr & MASK64:x},{size},{_format_stream(stream)}\n")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) "
                    "to an RMM logging CSV trace for tidepool-replay.")
    parser.add_argument("snapshot", help="the snapshot pickle ('-' for stdin)")
    parser.add_argument("-o", "--output", help="write the CSV here (default: stdout)")
    parser.add_argument("--device", type=int, help="the device whose history to convert "
                        "(default: the only one with events)")
    version = VERSION if not VERSION.startswith("@") else "(source copy: run the built or installed one)"
    parser.add_argument("--version", action="version", version=f"{PROG} {version}")
    args = parser.parse_args(argv)

    try:
        if args.snapshot == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(args.snapshot, "rb") as f:
                data = f.read()
    except OSError as e:
        print(f"{PROG}: {args.snapshot}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        snapshot = load_snapshot(data)
        traces = snapshot["device_traces"]
        device = pick_device(traces, args.device)
        conversion = convert(traces[device])
    except BadInput as e:
        print(f"{PROG}: {args.snapshot}: {e}", file=sys.stderr)
        return 2

    if args.output:
        try:
            with open(args.output, "w", encoding="ascii", newline="\n") as out:
                write_csv(conversion, out)
        except OSError as e:
            print(f"{PROG}: {args.output}: {e.strerror}", file=sys.stderr)
            return 1
    else:
        write_csv(conversion, sys.stdout)
    if conversion.unknown_frees:
        print(f"{PROG}: left out {conversion.unknown_frees} free(s) of blocks allocated before the history began",
              file=sys.stderr)
    if conversion.reallocated:
        print(f"{PROG}: added {conversion.reallocated} free(s) the history lacked (an address allocated twice)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
