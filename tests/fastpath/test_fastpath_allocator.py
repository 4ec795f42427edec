"""Tests for `grpo_tools.fastpath.keep_freed_memory`: on Linux with glibc, a block of megabytes comes from the heap
rather than from a fresh mapping once it is set (glibc's own accounting, `mallinfo2`), and elsewhere nothing is
changed and it says so. How many page faults that saves is measured by benchmarks/bench_allocator.py."""

import platform
import subprocess
import sys

import pytest


MAPPED_BYTES = """
import ctypes, sys
from grpo_tools.fastpath import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
if sys.argv[1] == "tuned":
    assert keep_freed_memory()
before = libc.mallinfo2().hblkhd
block = libc.malloc(5 << 20)  # 5 MiB, above glibc's default mmap threshold of 128 KiB
print(libc.mallinfo2().hblkhd - before)  # bytes newly mapped for it
"""


def _has_mallinfo2() -> bool:
    import ctypes

    return hasattr(ctypes.CDLL(None), "mallinfo2")


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or not _has_mallinfo2(),
    reason="glibc's mallopt and mallinfo2 (glibc 2.33 on)",
)
def test_large_blocks_come_from_the_heap_once_set():
    def mapped(mode):
        result = subprocess.run([sys.executable, "-c", MAPPED_BYTES, mode], capture_output=True, text=True, check=True)
        return int(result.stdout)

    assert mapped("default") >= 5 << 20  # glibc maps the block on its own
    assert mapped("tuned") == 0  # the heap serves it


def test_off_glibc_nothing_is_changed(monkeypatch):
    from grpo_tools.fastpath import allocator

    monkeypatch.setattr(allocator.platform, "system", lambda: "Darwin")
    assert allocator.keep_freed_memory() is False
