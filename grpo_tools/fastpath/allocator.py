"""glibc's allocator set for training on the CPU: large blocks kept for reuse rather than mapped afresh each time.

By default glibc serves a block above its mmap threshold (128 KiB, raised to the size of the last such block freed)
with fresh pages from the kernel and returns them when it is freed; every first touch of each 4 KiB page is then a page
fault that the kernel zeroes. A GRPO step allocates blocks of megabytes thousands of times (a key/value cache that
grows one token at a time is a larger block each step, above the raised threshold). With the threshold at glibc's
maximum (32 MiB) and freed memory kept in the heap, those blocks come from the heap again. The values are those of
glibc's `mallopt(3)`; the same can be set before the process starts with `MALLOC_MMAP_THRESHOLD_`,
`MALLOC_TRIM_THRESHOLD_` and `MALLOC_TOP_PAD_`. Measured effects (page faults, step times): docs/benchmarks.md and
`benchmarks/bench_allocator.py`.
"""

from __future__ import annotations

import ctypes
import logging
import platform


__all__ = ["keep_freed_memory"]

logger = logging.getLogger(__name__)

# mallopt(3) parameters, from glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_SETTINGS = {
    _M_MMAP_THRESHOLD: 32 << 20,  # glibc's largest: blocks up to 32 MiB come from the heap
    _M_TRIM_THRESHOLD: 1 << 30,  # give the heap's free top back to the kernel only above 1 GiB
    _M_TOP_PAD: 64 << 20,  # and grow it 64 MiB at a time
}


def keep_freed_memory() -> bool:
    """Set glibc's allocator as the module docstring says, for this whole process; returns whether it was set (False
    off Linux or glibc, where nothing changes). The resident memory then stays near its peak until the process
    ends, which is what a training process reaches anyway."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = all(mallopt(parameter, value) == 1 for parameter, value in _SETTINGS.items())
    if not done:
        logger.debug("glibc refused a mallopt setting; its defaults stay")
    return done
