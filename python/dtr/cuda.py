"""dtr.cuda: dtr's CUDA caching allocator (libdtr_cuda.so) as PyTorch's CUDA allocator.

PyTorch 2.0 and later can route every CUDA allocation through a shared library's
malloc/free pair (torch.cuda.memory.CUDAPluggableAllocator). This module does the swap and
reads the library's counters (docs/cuda.md):

    import dtr.cuda
    dtr.cuda.use(budget="8G")        # before anything allocates CUDA memory
    ...train...
    dtr.cuda.memory_stats()          # {"allocated_bytes.all.peak": ..., "num_ooms": ...}
    dtr.cuda.empty_cache()           # cached segments back to CUDA; returns the bytes
    dtr.cuda.reset_peak_stats()

The budget caps live CUDA bytes per device; a request over it is refused (dtr does not
evict CUDA tensors). The library is found, in order: the `library` argument of use(), the
one this process has loaded already (however it was swapped in), the DTR_CUDA_LIBRARY
environment variable, build/lib/libdtr_cuda.so of the source tree this file lives in.
Importing this module loads nothing.
"""

import ctypes
import json
import os

from dtr import DtrError, _find_library

__all__ = ["empty_cache", "library_path", "memory_stats", "reset_peak_stats", "use"]

LIBRARY_NAME = "libdtr_cuda.so"
_lib = None
_path = None


def library_path():
    """Where libdtr_cuda.so is (in use, loaded, DTR_CUDA_LIBRARY, or the source tree's
    build/lib)."""
    return _path or _find_library(LIBRARY_NAME, "DTR_CUDA_LIBRARY")


def _open(path):
    global _lib, _path
    if not os.path.exists(path):
        raise DtrError(f"{path} does not exist: configure with -DDTR_WITH_CUDA=ON (needs the "
                       "CUDA toolkit) and build the dtr_cuda target, or set DTR_CUDA_LIBRARY")
    lib = ctypes.CDLL(path)  # the same handle as PyTorch's: one allocator state
    lib.dtr_cuda_memory_stats_json.argtypes = [ctypes.c_int]
    lib.dtr_cuda_memory_stats_json.restype = ctypes.c_char_p
    lib.dtr_cuda_empty_cache.argtypes = [ctypes.c_int]
    lib.dtr_cuda_empty_cache.restype = ctypes.c_uint64
    lib.dtr_cuda_reset_peak_stats.argtypes = [ctypes.c_int]
    lib.dtr_cuda_reset_peak_stats.restype = None
    _lib, _path = lib, path
    return lib


def _library():
    return _lib if _lib is not None else _open(library_path())


def use(budget=None, library=None):
    """Makes libdtr_cuda.so PyTorch's CUDA allocator; returns its path. Call it before
    anything allocates CUDA memory (PyTorch refuses the swap after that). `budget` is bytes
    (int) or a size string ("8G"); it sets DTR_BUDGET, which the library reads on its first
    allocation and which overrides a budget in DTR_CONF. None keeps DTR_BUDGET / DTR_CONF
    as they are."""
    import torch

    memory = getattr(torch.cuda, "memory", None)
    if memory is None or not hasattr(memory, "CUDAPluggableAllocator"):
        raise DtrError(f"torch {torch.__version__} has no torch.cuda.memory."
                       "CUDAPluggableAllocator: dtr's CUDA allocator needs PyTorch 2.0 or later")
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, (int, str)):
            raise TypeError("budget must be bytes (int) or a size string such as '8G'")
        if isinstance(budget, int) and budget < 0:
            raise ValueError(f"budget must be >= 0 bytes, not {budget}")
        os.environ["DTR_BUDGET"] = str(budget)
    path = os.path.abspath(library or library_path())
    _open(path)
    allocator = memory.CUDAPluggableAllocator(path, "dtr_malloc", "dtr_free")
    try:
        memory.change_current_allocator(allocator)
    except RuntimeError as error:
        raise DtrError(f"PyTorch refused to swap its CUDA allocator ({error}): call "
                       "dtr.cuda.use() before anything allocates CUDA memory") from error
    return path


def memory_stats(device=0):
    """The device's counters under torch.cuda.memory_stats()'s key names, summed over the
    CUDA streams that allocated, plus dtr.* ones. allocated_bytes.all.peak and
    reserved_bytes.all.peak are the device's own peaks; the other peaks are sums of the
    streams' peaks, exact when one stream allocates."""
    return json.loads(_library().dtr_cuda_memory_stats_json(int(device)).decode())


def empty_cache(device=0):
    """Gives every fully free cached segment on `device` back to CUDA; returns the bytes."""
    return int(_library().dtr_cuda_empty_cache(int(device)))


def reset_peak_stats(device=0):
    """Peaks restart from the current values (torch.cuda.reset_peak_memory_stats())."""
    _library().dtr_cuda_reset_peak_stats(int(device))
