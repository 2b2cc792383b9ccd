"""tidepool as PyTorch's pluggable CUDA allocator.

    import tidepool.torch
    tidepool.torch.use("device_limit:20GiB,report:run.json")
    ... # then use torch as usual

use() must run before PyTorch allocates any device memory: PyTorch refuses to
change its allocator once the caching allocator has been used.
"""

from . import library_path, load

__all__ = ["use", "MALLOC_SYMBOL", "FREE_SYMBOL"]

MALLOC_SYMBOL = "tidepool_torch_malloc"
FREE_SYMBOL = "tidepool_torch_free"


def use(conf: str | None = None):
    """Makes tidepool PyTorch's CUDA allocator and returns the allocator object."""
    import torch  # imported here so that `import tidepool` never needs torch

    load(conf)  # sets TIDEPOOL_CONF first, and checks the library loads
    allocator = torch.cuda.memory.CUDAPluggableAllocator(library_path(), MALLOC_SYMBOL, FREE_SYMBOL)
    torch.cuda.memory.change_current_allocator(allocator)
    return allocator
