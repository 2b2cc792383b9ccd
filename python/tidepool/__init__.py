"""tidepool: a drop-in CUDA device-memory allocator.

This package only finds and loads libtidepool.so; the allocator itself is
the C++ library. See tidepool.torch for PyTorch.
"""

import ctypes
import os
from pathlib import Path

__all__ = ["library_path", "load", "prefetch", "advise", "WILL_NEED", "WONT_NEED", "KEEP_RESIDENT"]

# tidepool_advice (tidepool.h).
WILL_NEED = 1
WONT_NEED = 2
KEEP_RESIDENT = 3

_ADVICE_NAMES = {"will_need": WILL_NEED, "wont_need": WONT_NEED, "keep_resident": KEEP_RESIDENT}


def library_path() -> str:
    """The libtidepool.so to use.

    In order: $TIDEPOOL_LIBRARY; the library installed beside this package
    (PREFIX/lib/libtidepool.so for PREFIX/lib/tidepool/python/tidepool); the
    loader's search path.
    """
    explicit = os.environ.get("TIDEPOOL_LIBRARY")
    if explicit:
        return explicit
    here = Path(__file__).resolve().parent
    for candidate in (here.parents[2] / "libtidepool.so", here.parents[1] / "libtidepool.so"):
        if candidate.exists():
            return str(candidate)
    return "libtidepool.so"


def load(conf: str | None = None) -> ctypes.CDLL:
    """Loads libtidepool.so into this process.

    `conf` becomes TIDEPOOL_CONF. It must be set before the first allocation:
    tidepool reads its configuration once.
    """
    if conf is not None:
        os.environ["TIDEPOOL_CONF"] = conf
    return ctypes.CDLL(library_path(), mode=ctypes.RTLD_GLOBAL)


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


def _check(status: int, what: str) -> None:
    if status != 0:
        library = load()
        library.tidepool_status_string.restype = ctypes.c_char_p
        library.tidepool_status_string.argtypes = [ctypes.c_int]
        raise RuntimeError(f"tidepool.{what}: {library.tidepool_status_string(status).decode()}")


def prefetch(tensor, nbytes: int | None = None, stream=None) -> None:
    """Brings the evicted pages of `tensor` back to the device (evict:on).

    The copies are ordered before any work queued afterwards, on `stream` and
    every other stream; the call does not wait for them. `stream` is a
    torch.cuda.Stream, a raw cudaStream_t as an int, or None (the legacy
    default stream). Raises RuntimeError when the tensor is not tidepool
    memory; a budget with no room leaves pages on the host (still correct)
    and raises RuntimeError("... out of memory").
    """
    address, size = _pointer_and_size(tensor, nbytes)
    raw = getattr(stream, "cuda_stream", stream) or 0
    library = load()
    library.tidepool_prefetch.restype = ctypes.c_int
    library.tidepool_prefetch.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    _check(library.tidepool_prefetch(address, size, raw), "prefetch")


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
    library = load()
    library.tidepool_advise.restype = ctypes.c_int
    library.tidepool_advise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _check(library.tidepool_advise(address, size, advice), "advise")
