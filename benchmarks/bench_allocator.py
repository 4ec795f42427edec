"""Page faults with and without `keep_freed_memory`: 32 blocks of 4 to 6 MiB, each larger than the last (as a
key/value cache that grows a token at a time), allocated, written and freed in a fresh process each way. Linux with
glibc only; a measurement, not a test (the counts depend on the kernel and glibc):

    .venv/bin/python -m benchmarks.bench_allocator [--output benchmarks/results/allocator.json]
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys

from benchmarks.common import RESULTS, write_result


PAGE_FAULTS = """
import ctypes, resource, sys
from grpo_tools.fastpath import keep_freed_memory
if sys.argv[1] == "tuned":
    assert keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for size in range(4 << 20, 6 << 20, 64 << 10):
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    """Minor page faults of the 32 blocks in a fresh process, glibc's defaults (`default`) or set (`tuned`)."""
    result = subprocess.run([sys.executable, "-c", PAGE_FAULTS, mode], capture_output=True, text=True, check=True)
    return int(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=str(RESULTS / "allocator.json"))
    args = parser.parse_args()
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        print("bench_allocator: glibc on Linux only; nothing measured")
        return
    counts = {mode: faults(mode) for mode in ("default", "tuned")}
    block_pages = (5 << 20) // 4096
    print("page faults of 32 growing blocks of 4-6 MiB, allocated, written and freed")
    for mode, count in counts.items():
        print(f"{mode:<8} {count:>7} ({count / block_pages:.1f} blocks' worth of 4 KiB pages)")
    print(f"\nwrote {write_result(args.output, {'page_faults': counts, 'block_pages': block_pages})}")


if __name__ == "__main__":
    main()
