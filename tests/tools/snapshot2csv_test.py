#!/usr/bin/env python3
"""Specification of tidepool-snapshot2csv: synthetic PyTorch memory snapshots
become the expected RMM CSV, which tidepool-replay then replays; bad input is
one line on stderr and exit status 2, and a pickle's globals never run.

Usage: snapshot2csv_test.py CONVERTER REPLAY   (run by ctest)
"""

import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

CONVERTER = None
REPLAY = None


def entry(action, addr, size, stream=0, time_us=None, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": stream,
         "frames": [{"filename": "train.py", "line": 12, "name": "step"}]}
    if time_us is not None:
        e["time_us"] = time_us
    e.update(extra)
    return e


# One training-step-like history on device 0, as PyTorch records it: segment
# events and free_requested interleaved with the ones that matter.
T0 = 1_700_000_000_000_000  # time_us is wall-clock microseconds
STREAM = 0x55D0C0FFEE00
HISTORY = [
    entry("free_completed", 0x7F0000000000, 4096, time_us=T0 - 5),      # allocated before the ring began
    entry("segment_alloc", 0x7F1000000000, 2 << 20, time_us=T0),
    entry("alloc", 0x7F1000000000, 1024, time_us=T0 + 1),
    entry("alloc", 0x7F1000000400, 512, time_us=T0 + 3),
    entry("alloc", 0x7F2000000000, 20 << 20, stream=STREAM, time_us=T0 + 3_600_000_000 + 61_000_250),
    entry("free_requested", 0x7F1000000000, 1024, time_us=T0 + 3_600_000_000 + 61_000_300),
    entry("free_completed", 0x7F1000000000, 1024, time_us=T0 + 3_600_000_000 + 61_000_400),
    entry("oom", 0, 8 << 30, time_us=T0 + 3_600_000_000 + 61_000_500, device_free=1 << 20),
    entry("free_completed", 0x7F2000000000, 20 << 20, stream=STREAM, time_us=T0 + 3_600_000_000 + 61_000_600),
    entry("snapshot", 0, 0, time_us=T0 + 3_600_000_000 + 61_000_700),
]
EXPECTED_CSV = """Thread,Time,Action,Pointer,Size,Stream
0,00:00:00.000000,allocate,0x7f1000000000,1024,0
0,00:00:00.000002,allocate,0x7f1000000400,512,0
0,01:01:01.000249,allocate,0x7f2000000000,20971520,0x55d0c0ffee00
0,01:01:01.000399,free,0x7f1000000000,1024,0
0,01:01:01.000499,allocate failure,0x0,8589934592,0
0,01:01:01.000599,free,0x7f2000000000,20971520,0x55d0c0ffee00
"""


def snapshot(device_traces, protocol=pickle.DEFAULT_PROTOCOL):
    return pickle.dumps({"segments": [], "device_traces": device_traces}, protocol=protocol)


class ConverterTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="tidepool_snapshot_")
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def write(self, name, data):
        with open(self.path(name), "wb") as f:
            f.write(data)
        return self.path(name)

    def convert(self, *args):
        return subprocess.run([sys.executable, CONVERTER, *args], capture_output=True, text=True)

    def assert_bad_input(self, result, needle):
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(result.stdout, "")
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn(needle, lines[0])
        self.assertTrue(lines[0].startswith("tidepool-snapshot2csv: "), lines[0])

    def test_version_is_the_projects(self):
        result = self.convert("--version")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout.strip(), r"^tidepool-snapshot2csv \d+\.\d+\.\d+$")

    def test_alloc_free_completed_and_oom_become_rmm_csv(self):
        for protocol in (2, pickle.HIGHEST_PROTOCOL):
            with self.subTest(protocol=protocol):
                src = self.write(f"snap{protocol}.pickle", snapshot([HISTORY, []], protocol))
                result = self.convert(src)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stdout, EXPECTED_CSV)
                self.assertIn("left out 1 free(s) of blocks allocated before the history began", result.stderr)

    def test_the_csv_replays_with_tidepool_replay(self):
        src = self.write("snap.pickle", snapshot([HISTORY]))
        csv = self.path("snap.csv")
        result = self.convert(src, "-o", csv)
        self.assertEqual(result.returncode, 0, result.stderr)
        # Under a 1 GiB budget the 8 GiB request PyTorch could not serve fails here too.
        replay = subprocess.run([REPLAY, "--policy", "best_fit", "--policy", "pytorch_rules", "--device-memory",
                                 "1GiB", "--json", csv], capture_output=True, text=True)
        self.assertEqual(replay.returncode, 0, replay.stderr)
        rows = [json.loads(line) for line in replay.stdout.splitlines()]
        self.assertEqual([r["policy"] for r in rows], ["best_fit", "pytorch_rules"])
        for r in rows:
            self.assertEqual(r["events"], 6)
            self.assertEqual(r["peak_live_bytes"], 1024 + 512 + (20 << 20))
            self.assertEqual(r["failed_allocations"], 1)

    def test_without_time_us_events_are_a_microsecond_apart(self):
        history = [entry("alloc", 0x1000, 64), entry("alloc", 0x2000, 64), entry("free_completed", 0x1000, 64)]
        result = self.convert(self.write("untimed.pickle", snapshot([history])))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines()[1:], [
            "0,00:00:00.000000,allocate,0x1000,64,0",
            "0,00:00:00.000001,allocate,0x2000,64,0",
            "0,00:00:00.000002,free,0x1000,64,0",
        ])
        self.assertEqual(result.stderr, "")

    def test_a_device_is_chosen_when_several_have_events(self):
        src = self.write("two.pickle", snapshot([HISTORY, [entry("alloc", 0xA000, 256)]]))
        self.assert_bad_input(self.convert(src), "devices 0, 1: choose one with --device")
        result = self.convert(src, "--device", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines()[1:], ["0,00:00:00.000000,allocate,0xa000,256,0"])
        self.assert_bad_input(self.convert(src, "--device", "5"), "--device 5")

    def test_bytes_that_are_not_a_pickle_exit_2(self):
        src = self.write("trace.csv", b"Thread,Time,Action,Pointer,Size,Stream\n")
        self.assert_bad_input(self.convert(src), "not a PyTorch memory snapshot")

    def test_a_pickle_without_device_traces_exits_2(self):
        src = self.write("segments_only.pickle", pickle.dumps({"segments": []}))
        self.assert_bad_input(self.convert(src), "no 'device_traces'")
        src = self.write("list.pickle", pickle.dumps([1, 2, 3]))
        self.assert_bad_input(self.convert(src), "not a dict")

    def test_a_malformed_entry_names_its_index(self):
        src = self.write("bad_entry.pickle", snapshot([[entry("alloc", 0x1000, 64), {"action": "alloc", "size": 8}]]))
        self.assert_bad_input(self.convert(src), "trace entry 1 ('alloc') has no integer 'addr'")

    def test_a_missing_file_exits_2(self):
        self.assert_bad_input(self.convert(self.path("absent.pickle")), "No such file")

    def test_globals_in_the_pickle_are_refused_and_never_run(self):
        marker = self.path("pwned")

        class Evil:
            def __reduce__(self):
                return (os.mkdir, (marker,))

        src = self.write("evil.pickle", pickle.dumps({"device_traces": [[Evil()]]}))
        result = self.convert(src)
        self.assert_bad_input(result, "refusing to load the global")
        self.assertIn("mkdir", result.stderr)
        self.assertFalse(os.path.exists(marker))


if __name__ == "__main__":
    CONVERTER, REPLAY = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0]], verbosity=2)
