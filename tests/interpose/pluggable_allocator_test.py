"""Specification of tidepool as PyTorch's pluggable allocator, without torch.

The entry points PyTorch calls (tidepool_torch_malloc / tidepool_torch_free)
are called here exactly as PyTorch's CUDAPluggableAllocator calls them, on the
simulated driver; tidepool.torch.use() is checked against a stand-in torch
module that records what it was asked to do.

Run by ctest with TIDEPOOL_LIBRARY, TIDEPOOL_CUDA_LIB and PYTHONPATH set.
"""

import ctypes
import json
import os
import sys
import tempfile
import types
import unittest


def stand_in_torch(calls):
    # A CUDA build of PyTorch 2.x with a device and CUDA not yet initialised:
    # what use() checks for before it installs anything.
    torch = types.ModuleType("torch")
    torch.__version__ = "2.3.1+cu121"
    torch.version = types.SimpleNamespace(cuda="12.1", hip=None)
    torch.cuda = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: False)

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc_fn_name, free_fn_name):
            calls.append(("allocator", path, alloc_fn_name, free_fn_name))

    def change_current_allocator(allocator):
        calls.append(("change", allocator))

    torch.cuda.memory = types.SimpleNamespace(
        CUDAPluggableAllocator=CUDAPluggableAllocator, change_current_allocator=change_current_allocator)
    return torch


class PluggableAllocator(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Kept after the tests: the library writes the report again at exit.
        cls.dir = tempfile.mkdtemp(prefix="tidepool-pluggable-")
        cls.report = os.path.join(cls.dir, "report.json")
        calls = []
        sys.modules["torch"] = stand_in_torch(calls)
        import tidepool.torch

        cls.allocator = tidepool.torch.use("report:" + cls.report)
        cls.calls = calls
        cls.lib = ctypes.CDLL(tidepool.library_path())
        cls.malloc = cls.lib.tidepool_torch_malloc
        cls.malloc.restype = ctypes.c_void_p
        cls.malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        cls.free = cls.lib.tidepool_torch_free
        cls.free.restype = None
        cls.free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        cls.write_report = cls.lib.tidepool_report
        cls.write_report.argtypes = [ctypes.c_char_p]

    def device_report(self):
        self.assertEqual(self.write_report(self.report.encode()), 0)
        with open(self.report) as f:
            devices = json.load(f)["devices"]
        return devices[0] if devices else {"allocations": 0, "frees": 0, "live_bytes": 0}

    def test_prefetch_and_advise_reach_the_library_and_refuse_foreign_pointers(self):
        import tidepool

        class Tensor:
            def __init__(self, address, size):
                self.address, self.size = address, size

            def data_ptr(self):
                return self.address

            def numel(self):
                return self.size

            def element_size(self):
                return 1

        p = self.malloc(4 << 20, 0, None)
        self.assertTrue(p)
        tensor = Tensor(p, 4 << 20)
        # Without evict:on nothing is on the host: both succeed and move nothing.
        tidepool.prefetch(tensor)
        tidepool.advise(tensor, tidepool.KEEP_RESIDENT)
        tidepool.advise(tensor, "wont_need")
        tidepool.prefetch(p + 4096, nbytes=4096)  # an interior address works
        with self.assertRaises(ValueError):
            tidepool.advise(tensor, "sometimes")
        with self.assertRaises(RuntimeError):
            tidepool.prefetch(Tensor(0x1000, 16))
        with self.assertRaises(RuntimeError):
            tidepool.advise(Tensor(0x1000, 16), tidepool.WILL_NEED)
        self.free(p, 4 << 20, 0, None)
        with self.assertRaises(RuntimeError):
            tidepool.prefetch(tensor)  # freed: no longer a live allocation

    def test_use_installs_the_library_with_the_right_entry_points(self):
        import tidepool

        self.assertEqual(self.calls[0], ("allocator", tidepool.library_path(), "tidepool_torch_malloc",
                                         "tidepool_torch_free"))
        self.assertEqual(self.calls[1][0], "change")
        self.assertEqual(os.environ["TIDEPOOL_CONF"], "report:" + self.report)

    def test_memory_comes_from_the_pool_and_goes_back(self):
        before = self.device_report()
        sizes = [512, 4096, 1 << 20, 3 * (1 << 20) + 7]
        blocks = []
        for i, size in enumerate(sizes):
            ptr = self.malloc(size, 0, None)
            self.assertTrue(ptr, "allocation of %d bytes failed" % size)
            ctypes.memset(ptr, 0x40 + i, size)  # sim device memory is host-addressable
            blocks.append((ptr, size, 0x40 + i))
        for ptr, size, byte in blocks:
            self.assertEqual(ctypes.string_at(ptr, size), bytes([byte]) * size)
            self.free(ptr, size, 0, None)
        after = self.device_report()
        self.assertEqual(after["allocations"] - before["allocations"], len(sizes))
        self.assertEqual(after["frees"] - before["frees"], len(sizes))
        self.assertEqual(after["live_bytes"], 0)

    def test_failures_are_null_and_harmless(self):
        self.assertIsNone(self.malloc(-1, 0, None))
        self.assertIsNone(self.malloc(1 << 50, 0, None))  # out of memory: PyTorch raises its OOM error
        self.free(12345, 8, 0, None)  # unknown pointer: logged, ignored
        ptr = self.malloc(4096, 0, None)
        self.assertTrue(ptr)
        self.free(ptr, 4096, 0, None)


if __name__ == "__main__":
    unittest.main()
