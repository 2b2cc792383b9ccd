#!/usr/bin/env python3
"""gpu/hotpath.py: the hot path from Python, as one JSON line of nanoseconds
per allocate/free pair of cached sizes (512 B to 8 MiB, warmed first):

  torch_caching_ns   torch.cuda.caching_allocator_alloc / caching_allocator_delete
  cupy_async_ns      cupy.cuda.runtime.mallocAsync / freeAsync, default pool, threshold max
  tidepool_ctypes_ns tidepool_malloc / tidepool_free through ctypes ($TIDEPOOL_LIBRARY)
  ctypes_call_ns     two empty ctypes calls: the Python overhead in the row above

Every call crosses Python, so compare these rows with each other, and the C
rows of hotpath.cu with each other. A source that cannot load is reported as
"<name>_error" and the others still run.
"""
import ctypes
import json
import os
import sys
import time

SIZES = [512, 4096, 65536, 1 << 20, 8 << 20]
ITERS = 20000


def per_pair(alloc, free):
    for n in SIZES:
        free(alloc(n))
    start = time.perf_counter_ns()
    for i in range(ITERS):
        free(alloc(SIZES[i % 5]))
    return (time.perf_counter_ns() - start) / ITERS


def main():
    out = {}
    try:
        import torch
        torch.cuda.init()
        stream = torch.cuda.current_stream().cuda_stream
        out["torch_caching_ns"] = per_pair(lambda n: torch.cuda.caching_allocator_alloc(n, 0, stream),
                                           torch.cuda.caching_allocator_delete)
    except Exception as e:  # noqa: BLE001 - report any failure as data
        out["torch_caching_error"] = repr(e)
    try:
        import cupy
        rt = cupy.cuda.runtime
        pool = rt.deviceGetDefaultMemPool(0)
        rt.memPoolSetAttribute(pool, rt.cudaMemPoolAttrReleaseThreshold, 2**64 - 1)
        s = cupy.cuda.Stream(non_blocking=True)
        out["cupy_async_ns"] = per_pair(lambda n: rt.mallocAsync(n, s.ptr), lambda p: rt.freeAsync(p, s.ptr))
        s.synchronize()
    except Exception as e:  # noqa: BLE001
        out["cupy_async_error"] = repr(e)
    try:
        lib = ctypes.CDLL(os.environ["TIDEPOOL_LIBRARY"])
        lib.tidepool_malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_int]
        lib.tidepool_free.argtypes = [ctypes.c_void_p]
        ptr = ctypes.c_void_p()
        ref = ctypes.byref(ptr)

        def alloc(n):
            if lib.tidepool_malloc(ref, n, 0) != 0:
                raise RuntimeError("tidepool_malloc failed")
            return ptr.value

        out["tidepool_ctypes_ns"] = per_pair(alloc, lib.tidepool_free)
        libc = ctypes.CDLL(None)
        out["ctypes_call_ns"] = per_pair(lambda n: libc.abs(n), libc.abs)
    except Exception as e:  # noqa: BLE001
        out["tidepool_ctypes_error"] = repr(e)
    print(json.dumps(out))
    return 0 if "torch_caching_ns" in out and "tidepool_ctypes_ns" in out else 1


if __name__ == "__main__":
    sys.exit(main())
