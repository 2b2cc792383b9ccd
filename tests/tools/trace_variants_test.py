#!/usr/bin/env python3
"""Specification of bench/trace_variants.py: a scaled copy keeps every event,
thread, time, pointer, stream and owner, multiplies each size exactly and
rounds it up to 512 bytes; tidepool-replay replays the copy with its live
peak scaled; a malformed trace or scale is a clear error and leaves no copy.

Usage: trace_variants_test.py BENCH_DIR REPLAY   (run by ctest)
"""

import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

BENCH_DIR = None
REPLAY = None

HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"
# Three blocks live at once, then freed; the 100-byte block rounds up, the 1 MiB one scales exactly.
LINES = [
    "0,00:00:00:000001,allocate,0x1000,1048576,0",
    "0,00:00:00:000002,allocate,0x200000,100,7",
    "1,00:00:00:000003,allocate,0x300000,4096,0",
    "0,00:00:00:000004,free,0x200000,100,7",
    "0,00:00:00:000005,free,0x1000,1048576,0",
    "1,00:00:00:000006,free,0x300000,4096,0",
]


def write(path, text, compress=False):
    opener = gzip.open if compress else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(text)


def run_tool(*args):
    return subprocess.run([sys.executable, os.path.join(BENCH_DIR, "trace_variants.py"), *args],
                          capture_output=True, text=True, check=False)


class TraceVariants(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.trace = os.path.join(self.dir.name, "toy.csv.gz")
        write(self.trace, HEADER + "\n".join(LINES) + "\n", compress=True)
        self.out = os.path.join(self.dir.name, "out")

    def test_a_copy_scales_every_size_and_keeps_everything_else(self):
        done = run_tool("--scales", "0.5,3", "--out", self.out, self.trace)
        self.assertEqual(done.returncode, 0, done.stderr)
        half, triple = os.path.join(self.out, "toy_x0.5.csv"), os.path.join(self.out, "toy_x3.csv")
        self.assertEqual(done.stdout.splitlines(), [half, triple])
        expected = {half: [524288, 512, 2048, 512, 524288, 2048], triple: [3145728, 512, 12288, 512, 3145728, 12288]}
        for path, sizes in expected.items():
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
            self.assertEqual(lines[0] + "\n", HEADER)
            self.assertEqual(len(lines) - 1, len(LINES))
            for original, copied, size in zip(LINES, lines[1:], sizes):
                kept = original.split(",")
                fields = copied.split(",")
                self.assertEqual(fields[:4] + fields[5:], kept[:4] + kept[5:])
                self.assertEqual(int(fields[4]), size, copied)

    def test_a_scale_is_taken_as_written_and_each_scale_once(self):
        # 25600 * 1.1 is 28160 exactly, a multiple of 512; in binary floating
        # point it is a little more, which would round up to 28672.
        trace = os.path.join(self.dir.name, "tenth.csv")
        write(trace, HEADER + "0,00:00:00:000001,allocate,0x1000,25600,0\n")
        done = run_tool("--scales", "1.1,1.10,2,2.0", "--out", self.out, trace)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(sorted(os.listdir(self.out)), ["tenth_x1.1.csv", "tenth_x2.csv"])
        with open(os.path.join(self.out, "tenth_x1.1.csv"), encoding="utf-8") as f:
            self.assertEqual(f.read().splitlines()[1].split(",")[4], "28160")

    def test_tidepools_own_traces_keep_their_owner_column(self):
        trace = os.path.join(self.dir.name, "owned.csv")
        write(trace, HEADER.rstrip("\n") + ",Owner\n" + "0,00:00:00:000001,allocate,0x1000,4096,0,model.py:12\n" +
              "0,00:00:00:000002,free,0x1000,4096,0,\n")
        done = run_tool("--scales", "0.5", "--out", self.out, trace)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(self.out, "owned_x0.5.csv"), encoding="utf-8") as f:
            self.assertEqual(f.read().splitlines(), [HEADER.rstrip("\n") + ",Owner",
                                                     "0,00:00:00:000001,allocate,0x1000,2048,0,model.py:12",
                                                     "0,00:00:00:000002,free,0x1000,2048,0,"])

    def test_two_traces_of_one_name_are_refused_before_anything_is_written(self):
        other = os.path.join(self.dir.name, "elsewhere")
        os.makedirs(other)
        twin = os.path.join(other, "toy.csv")
        write(twin, HEADER + "\n".join(LINES) + "\n")
        done = run_tool("--scales", "2", "--out", self.out, self.trace, twin)
        self.assertEqual(done.returncode, 1)
        self.assertIn("two traces are named toy", done.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_the_replay_takes_a_copy_and_its_live_peak_scales(self):
        done = run_tool("--scales", "2", "--out", self.out, self.trace)
        self.assertEqual(done.returncode, 0, done.stderr)
        peaks = []
        for path in (self.trace, os.path.join(self.out, "toy_x2.csv")):
            replay = subprocess.run([REPLAY, "--policy", "best_fit", "--steps", "1", "--json", path],
                                    capture_output=True, text=True, check=False)
            self.assertEqual(replay.returncode, 0, replay.stderr)
            result = json.loads(replay.stdout.splitlines()[0])
            self.assertEqual(result["events"], len(LINES))
            self.assertEqual(result["unknown_frees"], 0)
            peaks.append(result["peak_live_bytes"])
        # 1 MiB + 100 B + 4 KiB live at once; doubled: 2 MiB + 512 B (rounded) + 8 KiB.
        self.assertEqual(peaks, [1048576 + 100 + 4096, 2097152 + 512 + 8192])

    def test_a_malformed_trace_is_an_error_naming_its_line(self):
        bad = os.path.join(self.dir.name, "bad.csv")
        write(bad, HEADER + LINES[0] + "\n" + "0,00:00:00:000002,allocate,0x200000,lots,0\n")
        done = run_tool("--scales", "2", "--out", self.out, bad)
        self.assertEqual(done.returncode, 1)
        self.assertIn("bad.csv: line 3", done.stderr)
        self.assertIn("'lots'", done.stderr)
        short = os.path.join(self.dir.name, "short.csv")
        write(short, HEADER + "0,00:00:00:000001,allocate,0x1000\n")
        done = run_tool("--scales", "2", "--out", self.out, short)
        self.assertEqual(done.returncode, 1)
        self.assertIn("short.csv: line 2: 4 fields, expected 6", done.stderr)
        headless = os.path.join(self.dir.name, "headless.csv")
        write(headless, "\n".join(LINES) + "\n")
        done = run_tool("--scales", "2", "--out", self.out, headless)
        self.assertEqual(done.returncode, 1)
        self.assertIn("headless.csv: line 1: expected the header", done.stderr)
        # A gzip file cut short or corrupt, and bytes that are not text: errors, not tracebacks.
        cut = os.path.join(self.dir.name, "cut.csv.gz")
        with open(self.trace, "rb") as f:
            whole = f.read()
        with open(cut, "wb") as f:
            f.write(whole[: len(whole) // 2])
        corrupt = os.path.join(self.dir.name, "corrupt.csv.gz")
        with open(corrupt, "wb") as f:
            long_trace = gzip.compress((HEADER + (LINES[0] + "\n") * 2000).encode())
            f.write(long_trace[:20] + bytes(b ^ 0xFF for b in long_trace[20:60]) + long_trace[60:])
        binary = os.path.join(self.dir.name, "binary.csv")
        with open(binary, "wb") as f:
            f.write(HEADER.encode() + b"\xff\xfe\x00\n")
        for path in (cut, corrupt, binary):
            done = run_tool("--scales", "2", "--out", self.out, path)
            self.assertEqual(done.returncode, 1, path)
            self.assertIn(f"{path}: not a readable trace", done.stderr)
            self.assertNotIn("Traceback", done.stderr)
        # No copy is left behind, the part written before the bad line included.
        self.assertEqual(os.listdir(self.out), [])

    def test_a_scale_that_is_not_a_positive_number_is_refused(self):
        for scales in ("0", "-1", "x", "inf", ","):
            done = run_tool("--scales", scales, "--out", self.out, self.trace)
            self.assertEqual(done.returncode, 2, scales)
            self.assertIn("--scales", done.stderr)
            self.assertFalse(os.path.exists(self.out), scales)


if __name__ == "__main__":
    BENCH_DIR, REPLAY = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1])
