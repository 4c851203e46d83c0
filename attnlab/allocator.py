"""Keep freed memory in the process: large tensors reused instead of page-faulted afresh.

PyTorch's CPU tensors come from the C library's ``malloc``.  glibc serves a
block above its mmap threshold (at most 32 MiB, dynamically) with a fresh
``mmap`` and returns it to the OS on ``free``; the next tensor of that size is
mapped again and every page is faulted in on first touch.  On the 2-core
machine of our benchmarks that costs ≈ 12 ms per 32 MiB tensor — as much as
the band kernel's whole work for 4 heads at n = 16,384 (``benchmarks/
attention_speed.py --system-malloc`` measures the difference).  PyTorch's own
CPU tuning guide recommends a caching allocator (jemalloc, tcmalloc via
``LD_PRELOAD``) for the same reason; this is the same effect with glibc's
``mallopt``, from inside the process:

    M_MMAP_THRESHOLD = 1 GiB   blocks below it come from the heap (reused after free)
    M_TRIM_THRESHOLD = 2 GiB   the heap's free top is kept, not given back

The price: a process's resident memory does not shrink after a peak (its peak
is unchanged).  ``attnlab``'s command line calls ``keep_freed_memory()`` at
start; a library user calls it (or not) once.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 1 << 30
TRIM_THRESHOLD = (1 << 31) - 1  # mallopt takes an int


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; True if the C library took both (False elsewhere: not glibc)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to do
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
