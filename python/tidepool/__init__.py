"""tidepool: a drop-in CUDA device-memory allocator.

This package owns the Python face of the C API (include/tidepool/tidepool.h):
finding and loading libtidepool.so, the statistics and their summary table,
the JSON report, trim, the device budget and the residency hints. The
allocator itself is the C++ library; tidepool.torch holds the PyTorch glue.

`import tidepool` loads nothing: the library is opened by the first call that
needs it, so the package imports (and tells its __version__) on a machine
without the library or a GPU.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

from ._version import __version__

__all__ = [
    "__version__", "TidepoolError", "LibraryNotFoundError", "library_path", "load", "library_version",
    "status_string", "stats", "summary", "report", "trim", "set_device_limit", "prefetch", "advise",
    "WILL_NEED", "WONT_NEED", "KEEP_RESIDENT",
]

# tidepool_advice (tidepool.h).
WILL_NEED = 1
WONT_NEED = 2
KEEP_RESIDENT = 3

_ADVICE_NAMES = {"will_need": WILL_NEED, "wont_need": WONT_NEED, "keep_resident": KEEP_RESIDENT}

# tidepool_status values the messages below single out (tidepool.h).
_OUT_OF_MEMORY = 1
_INVALID_VALUE = 2
_NOT_INITIALIZED = 4
_BAD_CONFIG = 6
_IO = 7

LIBRARY_NAME = "libtidepool.so"
# The soname (SOVERSION is the major version): a runtime-only install may
# carry it without the unversioned development link.
_SONAME = LIBRARY_NAME + "." + __version__.split(".")[0]


class TidepoolError(RuntimeError):
    """A tidepool C API call failed. `status` holds the tidepool_status value."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class LibraryNotFoundError(OSError):
    """libtidepool.so could not be loaded. An OSError, as ctypes raises."""


class _Stats(ctypes.Structure):
    # tidepool_stats, field for field and in order (tidepool.h).
    _fields_ = [
        ("allocations", ctypes.c_uint64),
        ("frees", ctypes.c_uint64),
        ("live_bytes", ctypes.c_uint64),
        ("peak_live_bytes", ctypes.c_uint64),
        ("reserved_bytes", ctypes.c_uint64),
        ("peak_reserved_bytes", ctypes.c_uint64),
        ("internal_waste_bytes", ctypes.c_uint64),
        ("ooms", ctypes.c_uint64),
        ("maps", ctypes.c_uint64),
        ("unmaps", ctypes.c_uint64),
        ("trims", ctypes.c_uint64),
        ("passthrough_allocations", ctypes.c_uint64),
        ("utilization", ctypes.c_double),
        ("external_fragmentation", ctypes.c_double),
    ]


# One library per process: a second copy would be a second pool, so the first
# successful load is kept and every later call uses it.
_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_loaded_from: str | None = None


def _installed_beside() -> Path | None:
    """PREFIX/lib/libtidepool.so when this package is PREFIX/lib/tidepool/python/tidepool
    (where `cmake --install` puts it), if that file exists."""
    parents = Path(__file__).resolve().parent.parents
    if len(parents) < 3:
        return None
    candidate = parents[2] / LIBRARY_NAME
    return candidate if candidate.exists() else None


def _candidates() -> list[str]:
    explicit = os.environ.get("TIDEPOOL_LIBRARY")
    if explicit:
        # Set on purpose: a wrong value is an error, never a silent fallback
        # to some other copy on the loader path.
        return [explicit]
    beside = _installed_beside()
    # Bare names go through the dynamic loader: LD_LIBRARY_PATH, the runpath,
    # ld.so.cache (an installed prefix after ldconfig).
    return ([str(beside)] if beside else []) + [LIBRARY_NAME, _SONAME]


def library_path() -> str:
    """The libtidepool.so this process uses, or will try first.

    In order: $TIDEPOOL_LIBRARY; the library installed beside this package
    (PREFIX/lib/libtidepool.so for PREFIX/lib/tidepool/python/tidepool); the
    dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache). Once load()
    has succeeded, the name it loaded.
    """
    if _loaded_from is not None:
        return _loaded_from
    return _candidates()[0]


def _declare(library: ctypes.CDLL) -> None:
    # Prototypes once, so that every call converts its arguments the same way.
    library.tidepool_version.restype = ctypes.c_char_p
    library.tidepool_version.argtypes = []
    library.tidepool_status_string.restype = ctypes.c_char_p
    library.tidepool_status_string.argtypes = [ctypes.c_int]
    library.tidepool_get_stats.restype = ctypes.c_int
    library.tidepool_get_stats.argtypes = [ctypes.c_int, ctypes.POINTER(_Stats)]
    library.tidepool_get_foreign_bytes.restype = ctypes.c_int
    library.tidepool_get_foreign_bytes.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint64),
    ]
    library.tidepool_report.restype = ctypes.c_int
    library.tidepool_report.argtypes = [ctypes.c_char_p]
    library.tidepool_trim.restype = ctypes.c_int
    library.tidepool_trim.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]
    library.tidepool_set_device_limit.restype = ctypes.c_int
    library.tidepool_set_device_limit.argtypes = [ctypes.c_int, ctypes.c_size_t]
    library.tidepool_prefetch.restype = ctypes.c_int
    library.tidepool_prefetch.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    library.tidepool_advise.restype = ctypes.c_int
    library.tidepool_advise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def load(conf: str | None = None) -> ctypes.CDLL:
    """Loads libtidepool.so into this process (once) and returns it.

    `conf` becomes TIDEPOOL_CONF. It must be given before the first
    allocation: tidepool reads its configuration once. Raises
    LibraryNotFoundError (an OSError) naming every place tried, the loader's
    error for each, and what to set.
    """
    global _library, _loaded_from
    if conf is not None:
        os.environ["TIDEPOOL_CONF"] = conf
    with _lock:
        if _library is not None:
            return _library
        failures = []
        candidates = _candidates()
        for candidate in candidates:
            try:
                # RTLD_GLOBAL: the preload hooks and PyTorch's dlopen of the
                # same path must find this copy, not open a second one.
                library = ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
            except OSError as error:
                failures.append(f"  {candidate}: {error}")
                continue
            _declare(library)
            _library, _loaded_from = library, candidate
            return library
    origin = "$TIDEPOOL_LIBRARY" if os.environ.get("TIDEPOOL_LIBRARY") else "the package's folder and the loader path"
    raise LibraryNotFoundError(
        f"tidepool: cannot load {LIBRARY_NAME} (looked in {origin}):\n" + "\n".join(failures) + "\n"
        f"Set TIDEPOOL_LIBRARY to the full path of {LIBRARY_NAME} (PREFIX/lib/{LIBRARY_NAME} after "
        "`cmake --install`, or build/<dir>/libtidepool.so in a build tree), or put its folder on "
        "LD_LIBRARY_PATH before Python starts.")


def library_version() -> str:
    """The loaded library's tidepool_version(); equals __version__ for a matching install."""
    return load().tidepool_version().decode()


def status_string(status: int) -> str:
    """The library's name for a tidepool_status value ("out of memory", ...)."""
    return load().tidepool_status_string(int(status)).decode()


def _check(status: int, what: str, hint: str = "") -> None:
    if status != 0:
        message = f"tidepool.{what}: {status_string(status)}"
        if status == _NOT_INITIALIZED:
            hint = hint or "no CUDA driver answered, or this is a forked child; tidepool passes everything through"
        elif status == _BAD_CONFIG:
            hint = hint or "TIDEPOOL_CONF was refused or says passthrough; tidepool passes everything through"
        raise TidepoolError(f"{message} ({hint})" if hint else message, status)


def _device_index(device) -> int:
    # bool is an int to Python, but True as a device is a mistake.
    if isinstance(device, bool) or not isinstance(device, int):
        raise ValueError(f"device must be a CUDA device index (an int), not {device!r}")
    if not 0 <= device < 2**31:
        raise ValueError(f"device must be a CUDA device index >= 0, not {device}")
    return device


def stats(device: int = 0) -> dict:
    """tidepool_stats of `device` as a dict, one key per field of tidepool.h,
    then foreign_bytes and peak_foreign_bytes (tidepool_get_foreign_bytes:
    device memory made outside the pool with cuMemCreate, which counts
    against the budget).

    Byte counts are of requested sizes unless named otherwise; reserved bytes
    are device memory the pool holds. utilization is peak_live_bytes /
    peak_reserved_bytes (1.0 before anything was reserved);
    external_fragmentation is 1 - largest free block / free bytes, now.
    Raises ValueError for a bad index, TidepoolError for a device the
    driver does not have or when tidepool passes everything through.
    """
    index = _device_index(device)
    out = _Stats()
    status = load().tidepool_get_stats(index, ctypes.byref(out))
    hint = f"no CUDA device {index}" if status == _INVALID_VALUE else ""
    _check(status, f"stats(device={index})", hint)
    figures = {name: getattr(out, name) for name, _ in _Stats._fields_}
    held = ctypes.c_uint64()
    peak = ctypes.c_uint64()
    status = load().tidepool_get_foreign_bytes(index, ctypes.byref(held), ctypes.byref(peak))
    _check(status, f"stats(device={index})", hint)
    figures["foreign_bytes"] = held.value
    figures["peak_foreign_bytes"] = peak.value
    return figures


def _format_bytes(count: int) -> str:
    # Binary units, as torch.cuda.memory_summary() prints them.
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024.0
        if value < 1024.0 or unit == "TiB":
            return f"{value:.2f} {unit}"
    raise AssertionError("unreachable")


def _format_percent(fraction: float) -> str:
    return f"{100.0 * fraction:.1f} %"


def summary(device: int = 0) -> str:
    """A text table of stats(device), in the spirit of torch.cuda.memory_summary()."""
    s = stats(device)
    width_name, width_value = 40, 14
    rule = "|" + "=" * (width_name + 2 * width_value + 8) + "|"
    thin = "|" + "-" * (width_name + 2) + "|" + "-" * (width_value + 2) + "|" + "-" * (width_value + 2) + "|"

    def row(name: str, current: str = "", peak: str = "") -> str:
        return f"| {name:<{width_name}} | {current:>{width_value}} | {peak:>{width_value}} |"

    title = f"tidepool {__version__} memory summary, device {_device_index(device)}"
    nothing_reserved = s["peak_reserved_bytes"] == 0
    lines = [
        rule,
        f"| {title:^{width_name + 2 * width_value + 6}} |",
        rule,
        row("Memory", "Current", "Peak"),
        thin,
        row("Live (bytes requested)", _format_bytes(s["live_bytes"]), _format_bytes(s["peak_live_bytes"])),
        row("Reserved (device memory held)", _format_bytes(s["reserved_bytes"]),
            _format_bytes(s["peak_reserved_bytes"])),
        row("Internal waste (rounding)", _format_bytes(s["internal_waste_bytes"])),
        row("Utilization (peak live / peak reserved)", "",
            "-" if nothing_reserved else _format_percent(s["utilization"])),
        row("Fragmentation (1 - largest free / free)", _format_percent(s["external_fragmentation"])),
        rule,
        row("Events", "Total", "Live"),
        thin,
        row("Allocations", str(s["allocations"]), str(s["allocations"] - s["frees"])),
        row("Frees", str(s["frees"])),
        row("Out-of-memory errors", str(s["ooms"])),
        row("Maps (device memory mapped)", str(s["maps"]), str(s["maps"] - s["unmaps"])),
        row("Unmaps", str(s["unmaps"])),
        row("Trims", str(s["trims"])),
        row("Passthrough allocations (to the driver)", str(s["passthrough_allocations"])),
        rule,
    ]
    return "\n".join(lines) + "\n"


def report(path: str | os.PathLike | None = None) -> str | None:
    """Writes the JSON report (every device, the run, the configuration) to
    `path`, or to the `report` path of TIDEPOOL_CONF when `path` is None.
    Returns `path` as a str (None when the configured path was used).
    Raises TidepoolError saying why it could not write."""
    library = load()
    target = None if path is None else os.fspath(path)
    status = library.tidepool_report(None if target is None else os.fsencode(target))
    if status == 0:
        return target
    if target is None and status == _INVALID_VALUE:
        hint = "no path given and no report:PATH in TIDEPOOL_CONF"
    elif status == _IO:
        hint = (f"cannot write {target or 'the configured report path'!r}: its folder must exist and be writable, "
                "and tidepool writes only regular files, never through a symbolic link")
    else:
        hint = ""
    _check(status, "report", hint)
    raise AssertionError("unreachable")


def trim(device: int = 0) -> int:
    """Gives the device memory the pool holds but does not use back to the
    driver; returns the bytes released."""
    index = _device_index(device)
    released = ctypes.c_size_t(0)
    status = load().tidepool_trim(index, ctypes.byref(released))
    _check(status, f"trim(device={index})", f"no CUDA device {index}" if status == _INVALID_VALUE else "")
    return int(released.value)


def set_device_limit(nbytes: int, device: int = 0) -> None:
    """Sets the device budget in bytes; 0 restores the default (what the device reports).

    A budget below what the pool holds takes effect at once or not at all:
    the pool first gives back what it can (cached pages, and with evict:on
    pages of live blocks moved to the host). If live memory that cannot leave
    the device still exceeds it, TidepoolError (out of memory) is raised and
    the old budget stays. Like TIDEPOOL_CONF's device_limit, a budget below
    2 MiB or above the device's size is refused (invalid value)."""
    index = _device_index(device)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"nbytes must be a byte count >= 0, not {nbytes!r}")
    status = load().tidepool_set_device_limit(index, nbytes)
    hints = {
        _INVALID_VALUE: f"no CUDA device {index}, or a budget below 2 MiB or above the device's size",
        _OUT_OF_MEMORY: "live memory that cannot leave the device exceeds it; the old budget stays",
    }
    _check(status, f"set_device_limit(device={index})", hints.get(status, ""))


def _pointer_and_size(tensor_or_pointer, nbytes):
    """A device address and byte count from a tensor (anything with
    data_ptr(), and numel()/element_size()) or from an int address."""
    if hasattr(tensor_or_pointer, "data_ptr"):
        address = int(tensor_or_pointer.data_ptr())
        if nbytes is None:
            nbytes = int(tensor_or_pointer.numel()) * int(tensor_or_pointer.element_size())
    else:
        address = int(tensor_or_pointer)
    if nbytes is None or nbytes < 0:
        raise ValueError("give the number of bytes for a plain address")
    return address, nbytes


def prefetch(tensor, nbytes: int | None = None, stream=None) -> None:
    """Brings the evicted pages of `tensor` back to the device (evict:on).

    The copies are ordered before any work queued afterwards, on `stream` and
    every other stream; the call does not wait for them. `stream` is a
    torch.cuda.Stream, a raw cudaStream_t as an int, or None (the legacy
    default stream). Raises TidepoolError (a RuntimeError) when the tensor
    is not tidepool memory; a budget with no room leaves pages on the host
    (still correct) and raises TidepoolError("... out of memory").
    """
    address, size = _pointer_and_size(tensor, nbytes)
    raw = getattr(stream, "cuda_stream", stream) or 0
    _check(load().tidepool_prefetch(address, size, raw), "prefetch")


def advise(tensor, advice, nbytes: int | None = None) -> None:
    """Residency advice for `tensor`: WILL_NEED (bring back, evict last),
    WONT_NEED (evict first) or KEEP_RESIDENT (bring back, never evict until
    freed); the names "will_need", "wont_need", "keep_resident" work too."""
    if isinstance(advice, str):
        if advice not in _ADVICE_NAMES:
            raise ValueError(f"unknown advice {advice!r}; expected one of {sorted(_ADVICE_NAMES)}")
        advice = _ADVICE_NAMES[advice]
    if advice not in (WILL_NEED, WONT_NEED, KEEP_RESIDENT):
        raise ValueError(f"unknown advice {advice!r}")
    address, size = _pointer_and_size(tensor, nbytes)
    _check(load().tidepool_advise(address, size, advice), "advise")
