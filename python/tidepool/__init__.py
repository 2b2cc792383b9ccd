"""tidepool: a drop-in CUDA device-memory allocator.

This package only finds and loads libtidepool.so; the allocator itself is
the C++ library. See tidepool.torch for PyTorch.
"""

import ctypes
import os
from pathlib import Path

__all__ = ["library_path", "load"]


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
