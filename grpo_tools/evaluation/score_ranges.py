"""What `grpo-tools score` does in its worker processes: each reads its own byte range of a file, whole lines only.

The data file is indexed in ranges (each row read, checked and placed: id key, byte offset, line, category), then the
predictions file is scored in ranges (each prediction read, joined to its data row through the index, which the
workers share, and scored). The main process only cuts the files into ranges, merges what comes back in file order
and keeps the tallies (about a tenth of the work), so the rest is shared among the workers. Ranges are cut by size
alone, and results merged in their order, so the report is the same for any number of workers.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from hashlib import blake2b
from pathlib import Path
from typing import Any

import orjson

from grpo_tools.data.jsonl import DataError, parse_jsonl_line
from grpo_tools.data.rows import derive_category
from grpo_tools.rewards import GoldError, make_gold, score_completion
from grpo_tools.rewards.parsing.fastjson import DIGITS_AS_ZERO, NINETEEN_DIGITS


__all__ = [
    "IndexPart",
    "ScoredPart",
    "id_key",
    "index_range",
    "line_ranges",
    "load_row",
    "release_index",
    "score_range",
    "set_index",
]


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
            line += block.count(b"\n")


def _lines(path: Path, start: int, end: int) -> list[bytes]:
    with path.open("rb") as handle:
        handle.seek(start)
        block = handle.read(end - start)
    lines = block.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def id_key(row_id: Any) -> int:
    """A 64-bit hash of an id's text (what the join compares), the same in every process: the index holds these, not
    the ids, and a prediction whose key is found is joined only when the row's own id has the same text."""
    return int.from_bytes(blake2b(str(row_id).encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def read_id(handle: Any, offset: int) -> str:
    """The id's text of the (checked) data row at `offset`."""
    handle.seek(offset)
    return str(load_row(handle.readline())["id"])


def _row_label(path: Path, line_number: int, row_id: Any = None) -> str:
    return f"{path}: row {line_number}" + (f" (id={row_id})" if row_id is not None else "")


def load_row(line: bytes) -> Any:
    """`json.loads(line)` for a data line: the same value or error, read by orjson where it reads the line exactly as
    `json` does (see `fastjson`: no run of 19 digits; orjson refuses everything else it would read otherwise)."""
    if NINETEEN_DIGITS not in line.translate(DIGITS_AS_ZERO):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass  # NaN, a byte-order mark, UTF-16, a lone surrogate, not UTF-8 or not JSON: json's value or error
    return json.loads(line)


@dataclass
class IndexPart:
    """The data rows of one byte range that can be scored, and a message for each that cannot."""

    keys: array = field(default_factory=lambda: array("Q"))  # `id_key` of each row's id
    offsets: array = field(default_factory=lambda: array("q"))
    line_numbers: array = field(default_factory=lambda: array("q"))
    categories: list[Any] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line number, message)


def index_range(task: tuple[str, int, int, int]) -> IndexPart:
    """Read and check the data rows of one byte range: `(path, start, end, first line number)`."""
    name, start, end, line_number = task
    path = Path(name)
    part = IndexPart()
    offset = start
    for number, line in enumerate(_lines(path, start, end), start=line_number):
        line_offset, offset = offset, offset + len(line) + 1
        if not line.strip():
            continue
        problem = _index_row(part, path, line, line_offset, number)
        if problem:
            part.problems.append((number, problem))
    return part


def _index_row(part: IndexPart, path: Path, line: bytes, offset: int, line_number: int) -> str | None:
    """Add one data line to the part; return a message naming the row and field when it cannot be scored."""
    try:
        row = load_row(line)
    except ValueError as error:
        return f"{_row_label(path, line_number)}: not valid JSON ({error})"
    if not isinstance(row, dict):
        return f"{_row_label(path, line_number)}: expected a JSON object"
    row_id = row.get("id")
    if row_id is None:
        return f"{_row_label(path, line_number)}: id: missing"
    label = _row_label(path, line_number, row_id)
    for required in ("tools", "answers"):
        if required not in row:
            return f"{label}: {required}: missing"
    try:
        gold = make_gold(row["tools"], row["answers"], row.get("possible_answers"), label)
        if gold.possible_answers is not None:  # derived from the gold calls they cannot be wrong: not worth building
            gold.possible  # noqa: B018 -- read now so that a malformed possible_answers is reported before scoring
        tools = gold.tool_list
    except GoldError as error:
        return str(error)
    part.keys.append(id_key(row_id))
    part.offsets.append(offset)
    part.line_numbers.append(line_number)
    part.categories.append(row.get("category") or derive_category(gold.calls, tools))
    return None


@dataclass
class ScoredPart:
    """The predictions of one byte range: each joined one's data row, score and errors, in file order, and the
    lines that could not be joined."""

    lines: int = 0  # lines in the range
    predictions: int = 0  # readable predictions (an id and a completion)
    unreadable: int = 0
    unmatched: int = 0
    notes: list[tuple[int, str]] = field(default_factory=list)  # (line number, message)
    rows: array = field(default_factory=lambda: array("q"))  # data row index of each joined prediction
    line_numbers: array = field(default_factory=lambda: array("q"))
    ids: list[str] = field(default_factory=list)  # the id's text of each joined prediction
    scores: array = field(default_factory=lambda: array("d"))
    errors: list[tuple[str, ...]] = field(default_factory=list)
    gold_errors: dict[int, str] = field(default_factory=dict)  # position in `rows` -> message


# What every scoring worker reads: the data index (keys in order, their rows, offsets, line numbers), the files and
# the reward.
_STATE: dict[str, Any] = {}


def set_index(index: Any, predictions: str, reward: str) -> None:
    """Give this process what `score_range` reads (a pool's initializer; with fork the index is not copied)."""
    _STATE.update(index=index, predictions=Path(predictions), reward=reward, handle=None, pid=None)


def release_index() -> None:
    """Forget what `set_index` gave this process, closing the data file (after scoring in the main process)."""
    if _STATE.get("handle") is not None:
        _STATE["handle"].close()
    _STATE.clear()


def _data_handle() -> Any:
    if _STATE["handle"] is None or _STATE["pid"] != os.getpid():
        _STATE["handle"], _STATE["pid"] = _STATE["index"].path.open("rb"), os.getpid()
    return _STATE["handle"]


def score_range(task: tuple[int, int, int]) -> ScoredPart:
    """Read, join and score the predictions of one byte range of the predictions file: `(start, end, first line)`."""
    import numpy as np

    start, end, first_line = task
    path, index, reward = _STATE["predictions"], _STATE["index"], _STATE["reward"]
    keys, rows, offsets, data_lines = index.keys, index.rows, index.offsets, index.line_numbers
    data = _data_handle()
    part = ScoredPart()
    lines = _lines(path, start, end)
    part.lines = len(lines)
    readable = []
    for number, raw in enumerate(lines, start=first_line):
        row = parse_jsonl_line(raw, number)
        if row is None:
            continue
        if isinstance(row, DataError):
            part.unreadable += 1
            part.notes.append((number, f"{path}: row {number}: {row}"))
        elif "id" not in row or "completion" not in row:
            part.unreadable += 1
            part.notes.append((number, f"{path}: row {number}: {'id' if 'id' not in row else 'completion'}: missing"))
        else:
            readable.append((number, row, id_key(row["id"])))
    sought = np.array([key for _, _, key in readable], dtype=np.uint64)
    found = np.searchsorted(np.frombuffer(keys, dtype=np.uint64), sought).tolist() if readable else []
    for (number, row, key), position in zip(readable, found, strict=True):
        part.predictions += 1
        gold_row, row_index, text = None, -1, str(row["id"])
        while position < len(keys) and keys[position] == key:  # more than one only where two ids' keys collide
            data.seek(offsets[rows[position]])
            gold_row = load_row(data.readline())
            if str(gold_row["id"]) == text:
                row_index = rows[position]
                break
            position += 1
        if row_index < 0:
            part.unmatched += 1
            part.notes.append((number, f"{path}: row {number} (id={row['id']}): no data row has this id"))
            continue
        part.rows.append(row_index)
        part.line_numbers.append(number)
        part.ids.append(text)
        try:
            # The rewards' own path: the completion is read with the row's tools, which Qwen3-Coder's values need.
            label = f"{index.path}: row {data_lines[row_index]}"
            gold = make_gold(gold_row["tools"], gold_row["answers"], gold_row.get("possible_answers"), label)
            verdict = score_completion(reward, row["completion"], gold)
        except GoldError as error:  # a tool list only this scorer reads (e.g. an invalid schema): report, score 0
            part.gold_errors[len(part.scores)] = str(error)
            part.scores.append(0.0)
            part.errors.append(())
            continue
        part.scores.append(verdict.score)
        part.errors.append(verdict.errors)
    return part
