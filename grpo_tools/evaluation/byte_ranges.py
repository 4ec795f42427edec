"""A JSONL file in byte ranges of whole lines, as `grpo-tools score`'s workers read it: cutting it (`line_ranges`), the
lines of a range (`range_lines`), counting newlines (`count_newlines`), and where given lines start (`line_starts`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


__all__ = ["count_newlines", "line_ranges", "line_starts", "range_lines"]


def line_ranges(path: Path, size: int) -> Iterator[tuple[int, int, int]]:
    """`(start, end, first line number)` of consecutive byte ranges of about `size` bytes, each ending at a line's
    end (or the file's)."""
    with path.open("rb") as handle:
        start, line = 0, 1
        while True:
            block = handle.read(size)
            if not block:
                return
            if not block.endswith(b"\n"):
                block += handle.readline()
            yield start, start + len(block), line
            start += len(block)
            line += count_newlines(block)


def line_starts(path: Path, numbers: list[int]) -> list[int]:
    """The byte offset at which each line (1-based, in ascending order) starts; the file's size for a line past its
    end."""
    import numpy as np

    starts: list[int] = []
    wanted = iter(numbers)
    target = next(wanted, None)
    while target == 1:
        starts.append(0)
        target = next(wanted, None)
    position, before = 0, 0  # the block's offset, and the newlines before it
    with path.open("rb") as handle:
        while target is not None:
            block = handle.read(_BLOCK_BYTES)
            if not block:
                break
            newlines = count_newlines(block)
            found = None
            while target is not None and target - 1 <= before + newlines:  # the line starts after newline target-1
                if found is None:
                    found = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
                starts.append(position + int(found[target - 2 - before]) + 1)
                target = next(wanted, None)
            position, before = position + len(block), before + newlines
    size = path.stat().st_size
    return starts + [size] * (len(numbers) - len(starts))


_BLOCK_BYTES = 1 << 20


def count_newlines(block: bytes) -> int:
    """`block.count(b"\\n")`, in numpy's vector loop: a sixth of the time on a MiB (the main process counts every
    line of both files while cutting them into ranges)."""
    import numpy as np

    return int(np.count_nonzero(np.frombuffer(block, dtype=np.uint8) == 10))


def range_lines(path: Path, start: int, end: int) -> list[bytes]:
    """The lines of a byte range, without their newlines."""
    with path.open("rb") as handle:
        handle.seek(start)
        block = handle.read(end - start)
    lines = block.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines
