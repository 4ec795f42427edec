"""What `grpo-tools score` does in its worker processes: each reads its own byte range of a file, whole lines only.

The data file is indexed in ranges (each row read, checked and placed: id key, byte offset, line, category), then the
predictions file is scored in ranges (each prediction read, joined to its data row through the index, which the
workers share, and scored). The main process only cuts the files into ranges, merges what comes back in file order
and keeps the tallies (about a tenth of the work), so the rest is shared among the workers. Ranges are cut by size
alone, and results merged in their order, so the report is the same for any number of workers.

Predictions are most often written in the data's order, one a row. So while indexing a data range, a worker also
reads the same lines of the predictions file, and where a line's prediction has the id of the data row on the same
line it scores it there, with the gold it has just built (`Prescored`). Scoring later takes that score instead of
reading the data row and building its gold a second time: the same score, each prediction still joined, counted and
merged in file order as any other. A range of the predictions file whose every line was scored so is handed on from
what indexing kept, without reading its lines again.
"""

from __future__ import annotations

import json
import os
from array import array
from dataclasses import dataclass, field
from hashlib import blake2b
from itertools import count
from pathlib import Path
from typing import Any

import orjson

from grpo_tools.data.jsonl import DataError, json_type, parse_jsonl_line
from grpo_tools.data.rows import derive_category
from grpo_tools.evaluation.byte_ranges import count_newlines, range_lines
from grpo_tools.rewards import GoldError, make_gold, score_completion
from grpo_tools.rewards.gold import Gold
from grpo_tools.rewards.parsing.fastjson import no_nineteen_digits


__all__ = [
    "IndexPart",
    "Prescored",
    "ScoredPart",
    "id_key",
    "index_range",
    "load_row",
    "release_index",
    "score_range",
    "set_index",
]


def id_key(row_id: Any) -> int:
    """A 64-bit hash of an id's text (what the join compares), the same in every process: the index holds these, not
    the ids, and a prediction whose key is found is joined only when the row's own id has the same text."""
    return int.from_bytes(blake2b(str(row_id).encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def read_id(handle: Any, offset: int) -> str:
    """The id's text of the (checked) data row at `offset`."""
    handle.seek(offset)
    return str(load_row(handle.readline())["id"])


def _row_label(path: Path | str, line_number: int, row_id: Any = None) -> str:
    return f"{path}: row {line_number}" + (f" (id={row_id})" if row_id is not None else "")


def load_row(line: bytes) -> Any:
    """`json.loads(line)` for a data line: the same value or error, read by orjson where it reads the line exactly as
    `json` does (see `fastjson`: no run of 19 digits; orjson refuses everything else it would read otherwise)."""
    if no_nineteen_digits(line):
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
    scored: Prescored | None = None  # the predictions on the same lines scored with the row's gold


@dataclass
class Prescored:
    """Predictions scored while indexing, by line number: each had the id of the data row on its line."""

    lines: array = field(default_factory=lambda: array("q"))
    scores: array = field(default_factory=lambda: array("d"))
    errors: list[tuple[str, ...]] = field(default_factory=list)
    gold_errors: dict[int, str] = field(default_factory=dict)  # line number -> message

    def add(self, other: Prescored) -> None:
        self.lines += other.lines
        self.scores += other.scores
        self.errors += other.errors
        self.gold_errors.update(other.gold_errors)


# A range stops trying its predictions' lines once this many have missed, and more than have matched: the
# predictions are in another order, and the join does the work.
_MISSES_ALLOWED = 64


def index_range(task: tuple[str, int, int, int, tuple[str, int, int, str] | None]) -> IndexPart:
    """Read and check the data rows of one byte range: `(path, start, end, first line number, same lines)`, where
    `same lines` is `(predictions path, start, end, reward)`, the predictions file's byte range of the same line
    numbers, or None."""
    name, start, end, line_number, same_lines = task
    path = Path(name)
    part = IndexPart()
    data_lines = range_lines(path, start, end)
    predictions: list[bytes] = []
    if same_lines is not None:
        predictions = range_lines(Path(same_lines[0]), same_lines[1], same_lines[2])
        part.scored = Prescored()
    misses = 0
    offset = start
    for number, line in enumerate(data_lines, start=line_number):
        line_offset, offset = offset, offset + len(line) + 1
        if not line or line.isspace():  # `not line.strip()`, without copying the line
            continue
        found = _index_row(part, name, line, line_offset, number)
        if type(found) is str:
            part.problems.append((number, found))
        elif number - line_number < len(predictions) and (
            misses <= _MISSES_ALLOWED or misses <= len(part.scored.lines)
        ):
            label = f"{name}: row {number}"  # as `score_range` names the row
            if not _prescore(part.scored, predictions[number - line_number], number, *found, same_lines[3], label):
                misses += 1
    return part


def _prescore(scored: Prescored, line: bytes, number: int, row_id: Any, gold: Gold, reward: str, label: str) -> bool:
    """Score the prediction on the data row's line if it has the row's id, as `score_range` would; whether it did."""
    prediction = parse_jsonl_line(line, number)
    if not (isinstance(prediction, dict) and "id" in prediction and "completion" in prediction):
        return False
    if str(prediction["id"]) != str(row_id):
        return False
    scored.lines.append(number)
    gold.row = label  # indexing named the row with its id, in errors it found; scoring names it by its line
    try:
        verdict = score_completion(reward, prediction["completion"], gold)
    except GoldError as error:
        scored.gold_errors[number] = str(error)
        scored.scores.append(0.0)
        scored.errors.append(())
        return True
    scored.scores.append(verdict.score)
    if len(_ERRORS) >= 4096:
        _ERRORS.clear()
    scored.errors.append(_ERRORS.setdefault(verdict.errors, verdict.errors))  # one tuple for each set of errors
    return True


# The error kinds of prescored predictions, each distinct tuple kept once (the partial scorer makes one per output).
_ERRORS: dict[tuple[str, ...], tuple[str, ...]] = {}


def _index_row(part: IndexPart, path: str, line: bytes, offset: int, line_number: int) -> str | tuple[Any, Gold]:
    """Add one data line to the part and return its id and gold; or a message naming the row and field when it cannot
    be scored."""
    try:
        row = load_row(line)
    except ValueError as error:
        return f"{_row_label(path, line_number)}: not valid JSON ({error})"
    if not isinstance(row, dict):
        return f"{_row_label(path, line_number)}: expected a JSON object"
    row_id = row.get("id")
    if row_id is None:
        return f"{_row_label(path, line_number)}: id: missing"
    label = f"{path}: row {line_number} (id={row_id})"  # `_row_label`, inline
    if "tools" not in row or "answers" not in row:
        return f"{label}: {'tools' if 'tools' not in row else 'answers'}: missing"
    category = row.get("category")
    if category is not None and type(category) is not str:
        return f"{label}: category: expected a string, got {json_type(category)}"
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
    part.categories.append(category or derive_category(gold.calls, tools))
    return row_id, gold


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


def set_index(index: Any, predictions: str, reward: str, ids: bool = True) -> None:
    """Give this process what `score_range` reads (a pool's initializer; with fork the index is not copied). Without
    `ids`, a prediction scored while indexing is not read again, and its id (the data row's) is left None."""
    _STATE.update(index=index, predictions=Path(predictions), reward=reward, ids=ids, handle=None, pid=None)


def release_index() -> None:
    """Forget what `set_index` gave this process, closing the data file (after scoring in the main process)."""
    if _STATE.get("handle") is not None:
        _STATE["handle"].close()
    _STATE.clear()


def _data_handle() -> Any:
    if _STATE["handle"] is None or _STATE["pid"] != os.getpid():
        _STATE["handle"], _STATE["pid"] = _STATE["index"].path.open("rb"), os.getpid()
    return _STATE["handle"]


def _all_prescored(
    path: Path, start: int, end: int, first_line: int, prescored: Prescored, data_lines: array
) -> ScoredPart | None:
    """The range's part without reading its lines one by one, when indexing scored every line of it (then none is
    blank, unreadable or joined to another row, and none needs its id read); None otherwise."""
    import numpy as np

    with path.open("rb") as handle:
        handle.seek(start)
        block = handle.read(end - start)
    lines = count_newlines(block) + (not block.endswith(b"\n"))  # the last line may lack its newline
    scored_lines = np.frombuffer(prescored.lines, dtype=np.int64)
    first = int(np.searchsorted(scored_lines, first_line))
    last = first + lines - 1
    # The scored lines are sorted and distinct: `lines` of them from `first_line` to its last line are all of them.
    if (
        not block
        or last >= len(scored_lines)
        or (scored_lines[first], scored_lines[last]) != (first_line, first_line + lines - 1)
    ):
        return None
    numbers = scored_lines[first : last + 1]
    part = ScoredPart(lines=lines, predictions=lines, ids=[None] * lines, errors=prescored.errors[first : last + 1])
    part.rows.frombytes(np.searchsorted(np.frombuffer(data_lines, dtype=np.int64), numbers).astype(np.int64).tobytes())
    part.line_numbers.frombytes(numbers.tobytes())
    part.scores = prescored.scores[first : last + 1]
    if prescored.gold_errors:
        for position, number in enumerate(range(first_line, first_line + lines)):
            if number in prescored.gold_errors:
                part.gold_errors[position] = prescored.gold_errors[number]
    return part


def score_range(task: tuple[int, int, int]) -> ScoredPart:
    """Read, join and score the predictions of one byte range of the predictions file: `(start, end, first line)`."""
    import numpy as np

    start, end, first_line = task
    path, index, reward = _STATE["predictions"], _STATE["index"], _STATE["reward"]
    keys, rows, offsets, data_lines = index.keys, index.rows, index.offsets, index.line_numbers
    prescored: Prescored | None = index.prescored
    data = _data_handle()
    if prescored is not None and not _STATE["ids"]:
        whole = _all_prescored(path, start, end, first_line, prescored, data_lines)
        if whole is not None:
            return whole
    part = ScoredPart()
    lines = range_lines(path, start, end)
    part.lines = len(lines)
    # Each line's position among the lines whose prediction indexing scored, or -1.
    known = [-1] * len(lines)
    if prescored is not None and len(prescored.lines) and lines:
        scored_lines = np.frombuffer(prescored.lines, dtype=np.int64)
        numbers = np.arange(first_line, first_line + len(lines), dtype=np.int64)
        position = np.minimum(np.searchsorted(scored_lines, numbers), len(scored_lines) - 1)
        known = np.where(scored_lines[position] == numbers, position, -1).tolist()
    with_ids = _STATE["ids"]
    readable = []
    for number, raw, done in zip(count(first_line), lines, known):
        if done >= 0 and not with_ids:  # read when indexing, and its id is the data row's on the same line
            readable.append((number, None, done))
            continue
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
            readable.append((number, row, done))
    numbers = np.fromiter((number for number, _, _ in readable), dtype=np.int64, count=len(readable))
    # The data row on each line, for the prescored; the others are found by the key of their id.
    row_on_line = np.searchsorted(np.frombuffer(data_lines, dtype=np.int64), numbers).tolist()
    sought = np.fromiter(
        (id_key(row["id"]) if done < 0 else 0 for _, row, done in readable), dtype=np.uint64, count=len(readable)
    )
    found = np.searchsorted(np.frombuffer(keys, dtype=np.uint64), sought).tolist() if readable else []
    for (number, row, done), on_line, key, position in zip(readable, row_on_line, sought.tolist(), found, strict=True):
        part.predictions += 1
        if done >= 0:
            part.rows.append(on_line)
            part.line_numbers.append(number)
            part.ids.append(None if row is None else str(row["id"]))
            if number in prescored.gold_errors:
                part.gold_errors[len(part.scores)] = prescored.gold_errors[number]
            part.scores.append(prescored.scores[done])
            part.errors.append(prescored.errors[done])
            continue
        text = str(row["id"])
        gold_row, row_index = None, -1
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
