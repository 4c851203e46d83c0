"""attnlab.allocator: with freed memory kept, a large tensor comes from the heap, not from a fresh mmap."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

PROBE = """
import ctypes, sys, torch
class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
if sys.argv[1] == "keep":
    from attnlab.allocator import keep_freed_memory
    assert keep_freed_memory()
x = torch.empty(64 << 20, dtype=torch.uint8)   # 64 MiB: above glibc's largest default mmap threshold
print(libc.mallinfo2().hblkhd)                 # bytes held in mmap-ed blocks
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt thresholds are glibc's")
def test_large_tensors_come_from_the_heap_once_freed_memory_is_kept():
    def mmapped(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
        return int(out.stdout.split()[-1])

    assert mmapped("system") >= 64 << 20  # glibc's default: a fresh mapping (page faults on first touch, unmapped on free)
    assert mmapped("keep") < 64 << 20     # kept: served by the heap, reused after free
