"""Tests for `grpo_tools.training.allocator.keep_freed_memory`: on Linux with glibc, blocks of megabytes freed and
allocated again no longer come back from the kernel as fresh pages (each a page fault)."""

import platform
import subprocess
import sys

import pytest


PAGE_FAULTS = """
import ctypes, resource, sys
from grpo_tools.training.allocator import keep_freed_memory
if sys.argv[1] == "tuned":
    assert keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
# 32 blocks of 4 to 6 MiB, each larger than the last, as a growing cache
for size in range(4 << 20, 6 << 20, 64 << 10):
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_freed_blocks_are_reused_rather_than_faulted_in_again():
    def faults(mode):
        result = subprocess.run([sys.executable, "-c", PAGE_FAULTS, mode], capture_output=True, text=True, check=True)
        return int(result.stdout)

    pages = (5 << 20) // 4096  # about one block's pages
    assert faults("default") > 20 * pages  # glibc maps each growing block afresh
    assert faults("tuned") < 3 * pages  # the heap keeps it: only the first block's pages fault in
