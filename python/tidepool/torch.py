"""tidepool as PyTorch's pluggable CUDA allocator, and its statistics.

This module owns the PyTorch glue: use() (checks, then installs tidepool with
torch.cuda.memory.CUDAPluggableAllocator) and the torch-shaped statistics
(memory_stats, memory_summary, memory_allocated, ...) that stand in for
torch.cuda's own, which raise under a pluggable allocator.

    import tidepool.torch
    tidepool.torch.use("device_limit:20GiB,report:run.json")
    ... # then use torch as usual
    print(tidepool.torch.memory_summary())

use() must run before PyTorch initialises CUDA: PyTorch refuses to change its
allocator once the caching allocator has been set up. torch is imported only
inside these functions, so `import tidepool.torch` works without it.
"""

from __future__ import annotations

import os
import re
import sys
import threading

from . import library_path, load, stats, summary, trim

__all__ = [
    "use", "MALLOC_SYMBOL", "FREE_SYMBOL", "memory_stats", "memory_summary", "memory_allocated",
    "max_memory_allocated", "memory_reserved", "max_memory_reserved", "empty_cache",
]

MALLOC_SYMBOL = "tidepool_torch_malloc"
FREE_SYMBOL = "tidepool_torch_free"

_NEEDS = "tidepool.torch.use() needs PyTorch >= 2.0 with CUDA"

# The allocator use() installed, and the configuration it was installed with:
# PyTorch cannot swap allocators twice, so a second use() returns the first.
_lock = threading.Lock()
_installed = None
_installed_conf: str | None = None


def _torch_version(torch) -> str:
    return str(getattr(torch, "__version__", "of unknown version"))


def _major_minor(version: str):
    # "2.1.0+cu121", "2.3.0a0+git1234", "1.13.1+cpu": the leading numbers.
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _checked_torch():
    """torch, once every requirement of use() holds; else a RuntimeError that
    names the requirement and what was found."""
    try:
        import torch
    except ImportError as error:
        raise RuntimeError(f"{_NEEDS}; torch is not importable ({error})") from error

    version = _torch_version(torch)
    found = f"found torch {version}"
    major_minor = _major_minor(version)
    if major_minor is not None and major_minor < (2, 0):
        raise RuntimeError(f"{_NEEDS}; {found}")
    # A build that says 2.x but lacks the API (a trimmed or odd build), or a
    # version string that does not parse: the API itself decides.
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    for name in ("CUDAPluggableAllocator", "change_current_allocator"):
        if not hasattr(memory, name):
            raise RuntimeError(f"{_NEEDS}; {found}, which has no torch.cuda.memory.{name}")

    cuda_version = getattr(getattr(torch, "version", None), "cuda", None)
    if not cuda_version:
        hip_version = getattr(getattr(torch, "version", None), "hip", None)
        built_for = f"built for ROCm {hip_version}" if hip_version else "a CPU-only build"
        raise RuntimeError(f"{_NEEDS}; {found}, {built_for} (torch.version.cuda is None); "
                           "install a CUDA build of PyTorch")
    if not torch.cuda.is_available():
        raise RuntimeError(f"{_NEEDS} and a visible GPU; {found} (CUDA {cuda_version}), but "
                           "torch.cuda.is_available() is False: no CUDA driver loaded or no device visible "
                           "(check nvidia-smi and CUDA_VISIBLE_DEVICES)")
    is_initialized = getattr(torch.cuda, "is_initialized", None)
    if callable(is_initialized) and is_initialized():
        # CUDA's lazy init sets up the caching allocator, after which
        # change_current_allocator refuses to swap it.
        raise RuntimeError("tidepool.torch.use() must run before PyTorch initialises CUDA; found "
                           "torch.cuda.is_initialized() True, so PyTorch's caching allocator is already "
                           "in use and cannot be replaced. Call use() first, before any CUDA tensor, "
                           "model.cuda() or torch.cuda call that touches a device")
    return torch


def use(conf: str | None = None):
    """Makes tidepool PyTorch's CUDA allocator and returns the allocator object.

    `conf` becomes TIDEPOOL_CONF. Checks first that torch imports, is 2.0 or
    newer with CUDAPluggableAllocator, was built with CUDA, sees a device, and
    has not initialised CUDA yet; each failure is a RuntimeError naming the
    requirement and what was found. A second call returns the allocator of
    the first (PyTorch cannot swap twice); a different `conf` then raises.
    """
    global _installed, _installed_conf
    with _lock:
        if _installed is not None:
            if conf is not None and conf != _installed_conf:
                raise RuntimeError(f"tidepool.torch.use() already installed tidepool with TIDEPOOL_CONF="
                                   f"{_installed_conf!r}; the configuration is read once and cannot "
                                   f"become {conf!r}")
            return _installed
        torch = _checked_torch()
        load(conf)  # sets TIDEPOOL_CONF first, and fails clearly when the library cannot load
        allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), MALLOC_SYMBOL, FREE_SYMBOL)
        torch.cuda.memory.change_current_allocator(allocator)
        _installed = allocator
        _installed_conf = os.environ.get("TIDEPOOL_CONF")
        return allocator


def _current_device() -> int:
    # torch.cuda.current_device() would initialise CUDA, which must not
    # happen before use(); before initialisation nothing is on any device
    # through torch, and device 0 is the default.
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    is_initialized = getattr(cuda, "is_initialized", None)
    if callable(is_initialized) and is_initialized():
        return int(cuda.current_device())
    return 0


def _device_index(device) -> int:
    """A device index from what torch.cuda's functions accept: None (the
    current device), an int, "cuda" / "cuda:N", or a torch.device."""
    if device is None:
        return _current_device()
    if isinstance(device, bool):
        raise ValueError(f"not a CUDA device: {device!r}")
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        match = re.fullmatch(r"cuda(?::(\d+))?", device.strip())
        if not match:
            raise ValueError(f"not a CUDA device: {device!r} (expected 'cuda' or 'cuda:N')")
        return int(match.group(1)) if match.group(1) is not None else _current_device()
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if kind is not None:
        if kind != "cuda":
            raise ValueError(f"not a CUDA device: {device!r}")
        return int(index) if index is not None else _current_device()
    raise ValueError(f"not a CUDA device: {device!r}")


def memory_stats(device=None) -> dict:
    """tidepool's figures for `device` under the keys torch.cuda.memory_stats()
    uses, so code that reads those keys keeps working under use(); the
    tidepool_stats fields follow as "tidepool.<field>".

    Mapping: allocated_bytes = bytes requested and live; reserved_bytes =
    device memory the pool holds; allocation.* counts allocations; segment.*
    counts physical mappings (maps and unmaps) rather than cudaMalloc calls.
    """
    s = stats(_device_index(device))
    result = {
        "allocated_bytes.all.current": s["live_bytes"],
        "allocated_bytes.all.peak": s["peak_live_bytes"],
        "reserved_bytes.all.current": s["reserved_bytes"],
        "reserved_bytes.all.peak": s["peak_reserved_bytes"],
        "requested_bytes.all.current": s["live_bytes"],
        "requested_bytes.all.peak": s["peak_live_bytes"],
        "allocation.all.allocated": s["allocations"],
        "allocation.all.freed": s["frees"],
        "allocation.all.current": s["allocations"] - s["frees"],
        "segment.all.allocated": s["maps"],
        "segment.all.freed": s["unmaps"],
        "segment.all.current": s["maps"] - s["unmaps"],
        "num_device_alloc": s["maps"],
        "num_device_free": s["unmaps"],
        "num_ooms": s["ooms"],
    }
    result.update({f"tidepool.{name}": value for name, value in s.items()})
    return dict(sorted(result.items()))


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """tidepool's summary table for `device`, in place of torch.cuda.memory_summary().
    `abbreviated` is accepted for the same signature; the table is always short."""
    del abbreviated
    return summary(_device_index(device))


def memory_allocated(device=None) -> int:
    """Bytes requested and live on `device`, as torch.cuda.memory_allocated()."""
    return stats(_device_index(device))["live_bytes"]


def max_memory_allocated(device=None) -> int:
    """Peak of memory_allocated() since the start, as torch.cuda.max_memory_allocated()."""
    return stats(_device_index(device))["peak_live_bytes"]


def memory_reserved(device=None) -> int:
    """Device memory the pool holds, as torch.cuda.memory_reserved()."""
    return stats(_device_index(device))["reserved_bytes"]


def max_memory_reserved(device=None) -> int:
    """Peak of memory_reserved() since the start, as torch.cuda.max_memory_reserved()."""
    return stats(_device_index(device))["peak_reserved_bytes"]


def empty_cache(device=None) -> int:
    """Gives the pool's unused device memory back to the driver (tidepool.trim),
    in place of torch.cuda.empty_cache(); returns the bytes released."""
    return trim(_device_index(device))
