"""Specification of the Python package (python/tidepool) on the simulated driver.

Owns: the version (against CMakeLists.txt and the library), finding and
loading libtidepool.so, stats/summary/report/trim/set_device_limit against
allocations made through the C API, and tidepool.torch's checks and
statistics against stand-in torch modules (torch is not installed here).

Run by ctest (python_package) with PYTHONPATH=python, TIDEPOOL_LIBRARY,
TIDEPOOL_CUDA_LIB and TIDEPOOL_SIM_MEMORY set.
"""

import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
import types
import unittest
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parents[2]
MiB = 1 << 20

# Status values of tidepool.h.
OK, OUT_OF_MEMORY, INVALID_VALUE, IO = 0, 1, 2, 7

# The library reads TIDEPOOL_CONF once: a report path or a budget left in the
# caller's environment would change what these tests see.
os.environ.pop("TIDEPOOL_CONF", None)

import tidepool  # noqa: E402  (after the environment is settled)
import tidepool.torch  # noqa: E402


def cmake_project_version():
    text = (SOURCE_DIR / "CMakeLists.txt").read_text()
    match = re.search(r"project\(\s*tidepool\s+VERSION\s+([0-9][0-9.]*)", text)
    assert match, "no project(tidepool VERSION ...) in CMakeLists.txt"
    return match.group(1)


def header_stats_fields():
    """(C type, name) of each tidepool_stats field, in order, from tidepool.h."""
    header = (SOURCE_DIR / "include" / "tidepool" / "tidepool.h").read_text()
    body = re.search(r"typedef struct tidepool_stats \{(.*?)\} tidepool_stats;", header, re.S).group(1)
    return re.findall(r"^\s*(uint64_t|double)\s+(\w+);", body, re.M)


class CApi:
    """tidepool_malloc / tidepool_free through ctypes, as a C program calls them."""

    def __init__(self):
        library = ctypes.CDLL(tidepool.library_path())
        self._malloc = library.tidepool_malloc
        self._malloc.restype = ctypes.c_int
        self._malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_int]
        self._free = library.tidepool_free
        self._free.restype = ctypes.c_int
        self._free.argtypes = [ctypes.c_void_p]

    def malloc(self, size, device=0):
        """(status, pointer)."""
        pointer = ctypes.c_void_p()
        status = self._malloc(ctypes.byref(pointer), size, device)
        return status, pointer.value

    def free(self, pointer):
        return self._free(pointer)


def run_python(code, env_changes, drop=()):
    """Runs `code` in a fresh interpreter (a fresh library load) and returns
    the completed process; PYTHONPATH carries over so it imports this tree's package."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


class Version(unittest.TestCase):
    def test_the_package_version_is_the_cmake_project_version(self):
        self.assertEqual(tidepool.__version__, cmake_project_version())

    def test_the_library_reports_the_same_version(self):
        self.assertEqual(tidepool.library_version(), tidepool.__version__)

    def test_importing_loads_no_library_and_needs_no_torch(self):
        # A CPU-only machine without the library can still import and ask the version.
        code = ("import sys, tidepool, tidepool.torch\n"
                "maps = open('/proc/self/maps').read()\n"
                "print(tidepool.__version__, 'libtidepool' in maps, 'torch' in sys.modules)\n")
        done = run_python(code, {"TIDEPOOL_LIBRARY": "/nonexistent/libtidepool.so"})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.split(), [cmake_project_version(), "False", "False"])


class LibraryLoading(unittest.TestCase):
    LIBRARY = os.environ["TIDEPOOL_LIBRARY"]

    def test_a_wrong_TIDEPOOL_LIBRARY_is_an_error_with_the_loader_text_and_what_to_set(self):
        code = ("import tidepool\n"
                "try:\n"
                "    tidepool.stats()\n"
                "except tidepool.LibraryNotFoundError as error:\n"
                "    print(isinstance(error, OSError)); print(error)\n")
        done = run_python(code, {"TIDEPOOL_LIBRARY": "/nonexistent/libtidepool.so"})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(done.stdout.startswith("True\n"), done.stdout)
        self.assertIn("/nonexistent/libtidepool.so: cannot open shared object file", done.stdout)  # dlerror
        self.assertIn("Set TIDEPOOL_LIBRARY", done.stdout)
        self.assertIn("LD_LIBRARY_PATH", done.stdout)
        # Set on purpose, so never silently replaced by another copy.
        self.assertNotIn("libtidepool.so.0:", done.stdout)

    def test_without_TIDEPOOL_LIBRARY_the_loader_path_finds_it(self):
        code = ("import os, tidepool\n"
                "print(tidepool.library_version()); print(tidepool.library_path())\n"
                "print(any(os.path.realpath(l.split()[-1]) == os.path.realpath(os.environ['EXPECTED'])\n"
                "          for l in open('/proc/self/maps') if l.rstrip().endswith('.so.' + tidepool.__version__)))\n")
        done = run_python(code, {"LD_LIBRARY_PATH": os.path.dirname(self.LIBRARY), "EXPECTED": self.LIBRARY},
                          drop=("TIDEPOOL_LIBRARY",))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.split(), [cmake_project_version(), "libtidepool.so", "True"])

    def test_nothing_found_names_every_place_tried(self):
        code = ("import ctypes, tidepool\n"
                "try:\n"
                "    ctypes.CDLL('libtidepool.so')\n"
                "    print('INSTALLED')\n"
                "except OSError:\n"
                "    try:\n"
                "        tidepool.load()\n"
                "    except OSError as error:\n"
                "        print(error)\n")
        done = run_python(code, {"LD_LIBRARY_PATH": ""}, drop=("TIDEPOOL_LIBRARY",))
        self.assertEqual(done.returncode, 0, done.stderr)
        if done.stdout.strip() == "INSTALLED":
            self.skipTest("a libtidepool.so is installed on the loader path of this machine")
        self.assertIn("libtidepool.so: cannot open shared object file", done.stdout)
        self.assertIn("libtidepool.so.%s: cannot open shared object file" % cmake_project_version().split(".")[0],
                      done.stdout)
        self.assertIn("Set TIDEPOOL_LIBRARY", done.stdout)


class Statistics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.api = CApi()
        cls.dir = tempfile.TemporaryDirectory(prefix="tidepool-package-")

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def allocate(self, sizes):
        pointers = []
        for size in sizes:
            status, pointer = self.api.malloc(size)
            self.assertEqual(status, OK, "allocation of %d bytes" % size)
            pointers.append(pointer)
        return pointers

    def free_all(self, pointers):
        for pointer in pointers:
            self.assertEqual(self.api.free(pointer), OK)

    def test_the_fields_are_those_of_tidepool_h_in_order_and_type(self):
        fields = header_stats_fields()
        self.assertEqual(len(fields), 14)
        s = tidepool.stats()
        # Then the two of tidepool_get_foreign_bytes.
        self.assertEqual(list(s), [name for _, name in fields] + ["foreign_bytes", "peak_foreign_bytes"])
        for c_type, name in fields:
            self.assertIsInstance(s[name], int if c_type == "uint64_t" else float, name)
        self.assertEqual(s["foreign_bytes"], 0)  # nothing made outside the pool here
        self.assertEqual(ctypes.sizeof(tidepool._Stats), 8 * len(fields))

    def test_stats_count_the_allocations_and_their_bytes(self):
        before = tidepool.stats(0)
        sizes = [3 * MiB + 5, 4096, MiB]
        pointers = self.allocate(sizes)
        during = tidepool.stats(0)
        self.assertEqual(during["allocations"] - before["allocations"], 3)
        self.assertEqual(during["live_bytes"] - before["live_bytes"], sum(sizes))
        self.assertGreaterEqual(during["peak_live_bytes"], during["live_bytes"])
        self.assertGreaterEqual(during["reserved_bytes"], during["live_bytes"])
        self.assertGreater(during["maps"], 0)
        self.assertAlmostEqual(during["utilization"], during["peak_live_bytes"] / during["peak_reserved_bytes"])
        self.free_all(pointers)
        after = tidepool.stats(0)
        self.assertEqual(after["frees"] - before["frees"], 3)
        self.assertEqual(after["live_bytes"], before["live_bytes"])
        self.assertEqual(after["peak_live_bytes"], max(before["peak_live_bytes"], during["live_bytes"]))

    def test_the_summary_shows_the_figures_in_human_units(self):
        pointers = self.allocate([3 * MiB])
        s = tidepool.stats()
        table = tidepool.summary()
        self.free_all(pointers)
        rows = {}
        for line in table.splitlines():
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if len(cells) == 3:
                rows[cells[0]] = cells[1:]
        self.assertIn("tidepool %s memory summary, device 0" % tidepool.__version__, table)
        self.assertEqual(rows["Live (bytes requested)"][0], "3.00 MiB")
        self.assertEqual(rows["Allocations"], [str(s["allocations"]), str(s["allocations"] - s["frees"])])
        self.assertEqual(rows["Frees"][0], str(s["frees"]))
        self.assertEqual(rows["Out-of-memory errors"][0], str(s["ooms"]))
        self.assertEqual(rows["Maps (device memory mapped)"][0], str(s["maps"]))
        self.assertEqual(rows["Unmaps"][0], str(s["unmaps"]))
        self.assertEqual(rows["Trims"][0], str(s["trims"]))
        self.assertEqual(rows["Passthrough allocations (to the driver)"][0], str(s["passthrough_allocations"]))
        self.assertEqual(rows["Utilization (peak live / peak reserved)"][1], "%.1f %%" % (100 * s["utilization"]))
        self.assertEqual(rows["Fragmentation (1 - largest free / free)"][0],
                         "%.1f %%" % (100 * s["external_fragmentation"]))
        reserved = rows["Reserved (device memory held)"][0]
        self.assertRegex(reserved, r"^\d+\.\d\d (KiB|MiB|GiB)$")
        # Every line has the same width: a table, not a ragged list.
        self.assertEqual(len({len(line) for line in table.splitlines()}), 1)

    def test_human_units(self):
        self.assertEqual(tidepool._format_bytes(0), "0 B")
        self.assertEqual(tidepool._format_bytes(1023), "1023 B")
        self.assertEqual(tidepool._format_bytes(1536), "1.50 KiB")
        self.assertEqual(tidepool._format_bytes(20 << 30), "20.00 GiB")
        self.assertEqual(tidepool._format_bytes(3 << 40), "3.00 TiB")

    def test_the_report_is_valid_json_with_the_same_figures(self):
        pointers = self.allocate([2 * MiB])
        path = os.path.join(self.dir.name, "report.json")
        self.assertEqual(tidepool.report(Path(path)), path)  # a PathLike works
        s = tidepool.stats()
        self.free_all(pointers)
        with open(path) as f:
            devices = json.load(f)["devices"]
        device = next(d for d in devices if d["device"] == 0)
        for name in ("allocations", "frees", "live_bytes", "reserved_bytes", "maps", "ooms"):
            self.assertEqual(device[name], s[name], name)

    def test_a_report_that_cannot_be_written_says_why(self):
        missing = os.path.join(self.dir.name, "no-such-folder", "report.json")
        with self.assertRaises(tidepool.TidepoolError) as caught:
            tidepool.report(missing)
        self.assertIsInstance(caught.exception, RuntimeError)
        self.assertEqual(caught.exception.status, IO)
        self.assertIn("i/o error", str(caught.exception))
        self.assertIn(missing, str(caught.exception))
        self.assertFalse(os.path.exists(missing))
        with self.assertRaisesRegex(RuntimeError, r"invalid value \(no path given and no report:PATH"):
            tidepool.report()

    def test_trim_returns_the_bytes_it_gave_back(self):
        self.free_all(self.allocate([8 * MiB, MiB]))
        before = tidepool.stats()
        self.assertGreater(before["reserved_bytes"], 0)
        released = tidepool.trim()
        after = tidepool.stats()
        self.assertIsInstance(released, int)
        self.assertGreater(released, 0)
        self.assertEqual(after["reserved_bytes"], before["reserved_bytes"] - released)
        self.assertGreater(after["unmaps"], before["unmaps"])
        self.assertEqual(tidepool.trim(0), 0)  # nothing left to give back

    def test_the_device_budget_is_set_and_restored(self):
        tidepool.trim()
        before = tidepool.stats()
        tidepool.set_device_limit(64 * MiB)
        try:
            status, pointer = self.api.malloc(128 * MiB)
            self.assertEqual(status, OUT_OF_MEMORY)
            self.assertIsNone(pointer)
            self.assertEqual(tidepool.stats()["ooms"], before["ooms"] + 1)
        finally:
            tidepool.set_device_limit(0)
        self.free_all(self.allocate([128 * MiB]))
        tidepool.trim()

    def test_a_budget_below_live_memory_is_refused_and_the_old_one_stays(self):
        blocks = self.allocate([16 * MiB] * 3)
        try:
            held = tidepool.stats()["reserved_bytes"]
            with self.assertRaises(tidepool.TidepoolError) as caught:
                tidepool.set_device_limit(16 * MiB)
            self.assertEqual(caught.exception.status, OUT_OF_MEMORY)
            self.assertIn("the old budget stays", str(caught.exception))
            self.assertEqual(tidepool.stats()["reserved_bytes"], held)
        finally:
            self.free_all(blocks)
        tidepool.set_device_limit(16 * MiB)  # nothing live now: it holds at once
        try:
            self.assertLessEqual(tidepool.stats()["reserved_bytes"], 16 * MiB)
        finally:
            tidepool.set_device_limit(0)

    def test_bad_arguments_are_value_errors_and_failures_carry_the_status_string(self):
        for bad in (-1, True, "0", 1.0, None):
            with self.assertRaises(ValueError):
                tidepool.stats(bad)
        with self.assertRaises(ValueError):
            tidepool.set_device_limit(-1)
        # The rule TIDEPOOL_CONF's device_limit follows: at least 2 MiB, at
        # most the device.
        for refused in (1, 2 * MiB - 1, 1 << 50):
            with self.assertRaises(tidepool.TidepoolError) as caught:
                tidepool.set_device_limit(refused)
            self.assertEqual(caught.exception.status, INVALID_VALUE)
            self.assertIn("below 2 MiB or above the device's size", str(caught.exception))
        # The sim has one device: device 7 is refused by the library.
        for call in (tidepool.stats, tidepool.trim, tidepool.summary):
            with self.assertRaises(tidepool.TidepoolError) as caught:
                call(7)
            self.assertEqual(caught.exception.status, INVALID_VALUE)
            self.assertIn("invalid value (no CUDA device 7)", str(caught.exception))
        self.assertEqual(tidepool.status_string(OUT_OF_MEMORY), "out of memory")


def fake_torch(version="2.3.1+cu121", cuda="12.1", hip=None, available=True, initialized=False,
               pluggable=True, current_device=0, calls=None):
    """A stand-in torch module: just the attributes tidepool.torch touches,
    recording the allocator calls in `calls`."""
    calls = [] if calls is None else calls
    torch = types.ModuleType("torch")
    torch.__version__ = version
    torch.version = types.SimpleNamespace(cuda=cuda, hip=hip)
    memory = types.SimpleNamespace()
    if pluggable:
        class CUDAPluggableAllocator:
            def __init__(self, path, alloc_fn_name, free_fn_name):
                calls.append(("allocator", path, alloc_fn_name, free_fn_name))

        def change_current_allocator(allocator):
            calls.append(("change", allocator))

        memory.CUDAPluggableAllocator = CUDAPluggableAllocator
        memory.change_current_allocator = change_current_allocator

    def current():
        calls.append(("current_device",))
        return current_device

    torch.cuda = types.SimpleNamespace(memory=memory, is_available=lambda: available,
                                       is_initialized=lambda: initialized, current_device=current)
    return torch, calls


class TorchGlue(unittest.TestCase):
    def setUp(self):
        self.saved_torch = sys.modules.get("torch", "absent")
        self.saved_conf = os.environ.get("TIDEPOOL_CONF")
        tidepool.torch._installed = None
        tidepool.torch._installed_conf = None

    def tearDown(self):
        if self.saved_torch == "absent":
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = self.saved_torch
        if self.saved_conf is None:
            os.environ.pop("TIDEPOOL_CONF", None)
        else:
            os.environ["TIDEPOOL_CONF"] = self.saved_conf
        tidepool.torch._installed = None
        tidepool.torch._installed_conf = None

    def refused(self, torch, calls):
        """use() on `torch` raises; returns the message, after checking
        that nothing was installed and TIDEPOOL_CONF was not touched."""
        sys.modules["torch"] = torch
        with self.assertRaises(RuntimeError) as caught:
            tidepool.torch.use("device_limit:1GiB")
        self.assertEqual(calls, [])
        self.assertEqual(os.environ.get("TIDEPOOL_CONF"), self.saved_conf)
        return str(caught.exception)

    def test_no_torch(self):
        sys.modules["torch"] = None  # makes `import torch` raise ImportError
        with self.assertRaisesRegex(RuntimeError, r"needs PyTorch >= 2.0 with CUDA; torch is not importable"):
            tidepool.torch.use()

    def test_an_old_torch_is_named_with_its_version(self):
        message = self.refused(*fake_torch(version="1.13.1+cpu", cuda=None, pluggable=False))
        self.assertEqual(message, "tidepool.torch.use() needs PyTorch >= 2.0 with CUDA; found torch 1.13.1+cpu")

    def test_a_cpu_only_torch(self):
        message = self.refused(*fake_torch(version="2.2.0+cpu", cuda=None))
        self.assertIn("needs PyTorch >= 2.0 with CUDA; found torch 2.2.0+cpu, a CPU-only build", message)
        self.assertIn("torch.version.cuda is None", message)

    def test_a_rocm_torch(self):
        message = self.refused(*fake_torch(version="2.2.0+rocm5.7", cuda=None, hip="5.7.31921"))
        self.assertIn("found torch 2.2.0+rocm5.7, built for ROCm 5.7.31921", message)

    def test_a_torch_without_the_pluggable_allocator(self):
        message = self.refused(*fake_torch(version="2.0.0", pluggable=False))
        self.assertIn("found torch 2.0.0, which has no torch.cuda.memory.CUDAPluggableAllocator", message)

    def test_no_visible_gpu(self):
        message = self.refused(*fake_torch(available=False))
        self.assertIn("found torch 2.3.1+cu121 (CUDA 12.1), but torch.cuda.is_available() is False", message)

    def test_cuda_already_initialised(self):
        message = self.refused(*fake_torch(initialized=True))
        self.assertIn("must run before PyTorch initialises CUDA", message)
        self.assertIn("torch.cuda.is_initialized() True", message)

    def test_use_installs_the_library_once(self):
        torch, calls = fake_torch()
        sys.modules["torch"] = torch
        allocator = tidepool.torch.use("device_limit:1GiB")
        self.assertEqual(calls, [("allocator", tidepool.library_path(), "tidepool_torch_malloc",
                                  "tidepool_torch_free"), ("change", allocator)])
        self.assertEqual(os.environ["TIDEPOOL_CONF"], "device_limit:1GiB")
        # The symbols PyTorch will look up are there.
        library = ctypes.CDLL(tidepool.library_path())
        for name in (tidepool.torch.MALLOC_SYMBOL, tidepool.torch.FREE_SYMBOL):
            self.assertTrue(hasattr(library, name), name)
        # PyTorch cannot swap twice: the same allocator, no new calls.
        self.assertIs(tidepool.torch.use(), allocator)
        self.assertIs(tidepool.torch.use("device_limit:1GiB"), allocator)
        self.assertEqual(len(calls), 2)
        with self.assertRaisesRegex(RuntimeError, "already installed tidepool"):
            tidepool.torch.use("device_limit:2GiB")

    def test_memory_stats_are_tidepools_under_torchs_keys(self):
        sys.modules["torch"], calls = fake_torch()
        api = CApi()
        status, pointer = api.malloc(2 * MiB)
        self.assertEqual(status, OK)
        try:
            s = tidepool.stats(0)
            for device in (None, 0, "cuda", "cuda:0", types.SimpleNamespace(type="cuda", index=0)):
                m = tidepool.torch.memory_stats(device)
                self.assertEqual(m["allocated_bytes.all.current"], s["live_bytes"])
                self.assertEqual(m["allocated_bytes.all.peak"], s["peak_live_bytes"])
                self.assertEqual(m["reserved_bytes.all.current"], s["reserved_bytes"])
                self.assertEqual(m["reserved_bytes.all.peak"], s["peak_reserved_bytes"])
                self.assertEqual(m["allocation.all.current"], s["allocations"] - s["frees"])
                self.assertEqual(m["segment.all.allocated"], s["maps"])
                self.assertEqual(m["num_ooms"], s["ooms"])
                self.assertEqual({k: v for k, v in m.items() if k.startswith("tidepool.")},
                                 {"tidepool." + k: v for k, v in s.items()})
            self.assertEqual(tidepool.torch.memory_allocated(), s["live_bytes"])
            self.assertEqual(tidepool.torch.max_memory_allocated(), s["peak_live_bytes"])
            self.assertEqual(tidepool.torch.memory_reserved(), s["reserved_bytes"])
            self.assertEqual(tidepool.torch.max_memory_reserved(), s["peak_reserved_bytes"])
            self.assertEqual(tidepool.torch.memory_summary(), tidepool.summary(0))
        finally:
            self.assertEqual(api.free(pointer), OK)
        self.assertIsInstance(tidepool.torch.empty_cache(), int)
        self.assertEqual(tidepool.stats()["reserved_bytes"], 0)
        # CUDA not initialised: the current device is taken as 0 without asking torch.
        self.assertNotIn(("current_device",), calls)
        for bad in ("cpu", "cuda:x", types.SimpleNamespace(type="cpu", index=None), 1.5):
            with self.assertRaises(ValueError):
                tidepool.torch.memory_stats(bad)

    def test_the_current_device_comes_from_torch_once_cuda_is_up(self):
        sys.modules["torch"], calls = fake_torch(initialized=True, current_device=5)
        with self.assertRaisesRegex(RuntimeError, "no CUDA device 5"):
            tidepool.torch.memory_stats()
        self.assertIn(("current_device",), calls)


if __name__ == "__main__":
    unittest.main()
