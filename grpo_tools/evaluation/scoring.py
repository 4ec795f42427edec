"""Score a file of model outputs against a canonical dataset: `grpo-tools score`, and the report `eval` writes.

Predictions (`{"id": ..., "completion": ...}` per line) are joined to data rows by `id`. The data file is indexed
once (id -> byte offset, category), each gold row checked on the way, and predictions are streamed: memory grows with
the number of ids, not the size of the files. Worker processes each read their own byte ranges of both files
(`score_ranges`), and their results are merged in file order, so any number of workers gives the same report. The
report layout is in docs/cli.md ("`grpo-tools score`").
"""

from __future__ import annotations

import json
import os
import sys
from array import array
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from grpo_tools.data.rows import DataError
from grpo_tools.evaluation.byte_ranges import line_ranges, line_starts
from grpo_tools.evaluation.score_ranges import (
    Prescored,
    ScoredPart,
    index_range,
    read_id,
    release_index,
    score_range,
    set_index,
)
from grpo_tools.rewards import ERROR_KINDS, REWARDS


__all__ = ["SCORERS", "DataIndex", "index_data", "score_files"]

# `--scorer` names: the reward registry's names without their `tool_` prefix.
SCORERS: dict[str, str] = {name.removeprefix("tool_"): name for name in REWARDS}
# The byte ranges the workers read (whole lines): large enough that handing one over costs nothing next to scoring it,
# small enough that every worker has many. Cut by size alone, so any number of workers merges the same ranges.
_RANGE_BYTES = 1 << 20
_WINDOW = 8  # ranges per worker merged at a time
# Below this size of predictions file (about 20,000 predictions), worker processes cost more to start than they save.
_PARALLEL_BYTES = 3 << 20
_MAX_REPORTED = 20  # problems printed one per line before the rest are only counted


@dataclass
class DataIndex:
    """Where each data row is, by id: its byte offset, line and category, in arrays of numbers (a few dozen bytes a
    row, no object per row). Ids are found by their 64-bit key (`score_ranges.id_key`): `keys` sorted, `rows` the
    row index of each, the row's own id compared on reading it."""

    path: Path
    keys: array  # id_key of every row's id, sorted
    rows: array  # the row index (0-based, in file order) of each key
    offsets: array  # byte offset of each row's line
    line_numbers: array  # 1-based line number of each row, for messages
    categories: array  # index into category_names, per row (four bytes: any number of categories)
    category_names: list[str]
    prescored: Prescored | None = None  # predictions scored while indexing (`score_ranges`), by line number

    def __len__(self) -> int:
        return len(self.offsets)


def _pool(workers: int, initializer: Any = None, initargs: tuple = ()) -> Any:
    import multiprocessing

    return multiprocessing.get_context().Pool(workers, initializer, initargs)


def index_data(
    path: str | os.PathLike[str],
    workers: int = 1,
    predictions: Path | None = None,
    reward: str | None = None,
    progress: bool = False,
) -> DataIndex:
    """Read a canonical dataset once, checking every row can be scored; raise `DataError` listing the bad rows.

    With `predictions` and `reward`, each prediction on the same line as a data row with its id is scored on the way
    (`index.prescored`), which `score_range` then reads instead of the data row."""
    from tqdm import tqdm

    path = Path(path)
    try:
        path.open("rb").close()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror or error})") from None
    index = DataIndex(path, array("Q"), array("q"), array("q"), array("q"), array("I"), [])
    category_codes: dict[str, int] = {}
    keys = array("Q")
    found: list[tuple[int, str]] = []
    ranges = list(line_ranges(path, _RANGE_BYTES))
    tasks = [(str(path), *task, None) for task in ranges]
    if predictions is not None and reward is not None and ranges:
        # The predictions file's bytes of each range's lines: from its first line to the next range's first.
        last = ranges[-1]
        with path.open("rb") as handle:
            handle.seek(last[0])
            block = handle.read(last[1] - last[0])
        after = last[2] + block.count(b"\n") + (not block.endswith(b"\n"))
        starts = line_starts(predictions, [first for _, _, first in ranges] + [after])
        same = [(str(predictions), begin, end, reward) for begin, end in pairwise(starts)]
        tasks = [(*task[:4], lines) for task, lines in zip(tasks, same, strict=True)]
        index.prescored = Prescored()
    bar = tqdm(total=ranges[-1][1] if ranges else 0, unit="B", unit_scale=True, desc="reading data",
               disable=not progress or None, file=sys.stderr)  # fmt: skip
    with ExitStack() as stack:
        stack.enter_context(bar)
        pool = stack.enter_context(_pool(workers)) if workers > 1 and len(tasks) > 1 else None
        for task, part in zip(tasks, pool.imap(index_range, tasks) if pool else map(index_range, tasks), strict=True):
            found += part.problems
            keys += part.keys
            index.offsets += part.offsets
            index.line_numbers += part.line_numbers
            for category in part.categories:
                if category not in category_codes:
                    category_codes[category] = len(index.category_names)
                    index.category_names.append(category)
                index.categories.append(category_codes[category])
            if part.scored is not None:
                index.prescored.add(part.scored)
            bar.update(task[2] - task[1])
    found += _sort_keys(index, keys)
    if found:
        problems = [message for _, message in sorted(found, key=lambda item: item[0])]
        shown = "\n".join(problems[:_MAX_REPORTED])
        more = f"\n... and {len(problems) - _MAX_REPORTED} more" if len(problems) > _MAX_REPORTED else ""
        raise DataError(
            f"{shown}{more}\n{len(problems)} data row(s) cannot be scored; `grpo-tools check-data {path}` lists every"
            " problem"
        )
    if not len(index):
        raise DataError(f"{path}: no data rows")
    return index


def _sort_keys(index: DataIndex, keys: array) -> list[tuple[int, str]]:
    """Put the rows' keys in order in the index; return a message for each row whose id an earlier row has."""
    import numpy as np

    order = np.argsort(np.frombuffer(keys, dtype=np.uint64), kind="stable")  # equal keys in file order
    ordered = np.frombuffer(keys, dtype=np.uint64)[order]
    index.rows.frombytes(memoryview(order.astype(np.int64, copy=False)).cast("B"))  # no intermediate copy
    index.keys.frombytes(memoryview(ordered).cast("B"))
    del order
    repeated = np.flatnonzero(ordered[1:] == ordered[:-1]).tolist()  # the same id, or (rarely) two ids' keys collide
    runs: list[list[int]] = []
    for position in repeated:
        if runs and runs[-1][-1] == position:
            runs[-1].append(position + 1)
        else:
            runs.append([position, position + 1])
    duplicates = []
    with index.path.open("rb") as handle:
        for run in runs:
            first: dict[str, int] = {}
            for row in sorted(index.rows[position] for position in run):
                row_id, line = read_id(handle, index.offsets[row]), index.line_numbers[row]
                if row_id in first:
                    message = f"{index.path}: row {line} (id={row_id}): id: duplicate of row {first[row_id]}; ids must"
                    duplicates.append((line, message + " be unique to join predictions"))
                else:
                    first[row_id] = line
    return duplicates


@dataclass
class _Tally:
    """Running totals for the report."""

    rows: Counter = field(default_factory=Counter)
    by_category: dict[str, list[float]] = field(default_factory=dict)  # category -> [rows, correct, reward sum]
    errors: Counter = field(default_factory=Counter)
    invalid_data: list[str] = field(default_factory=list)

    def add(self, category: str, score: float, errors: tuple[str, ...] | list[str]) -> None:
        totals = self.by_category.get(category)
        if totals is None:  # not `setdefault`, which builds a new list for every row
            totals = self.by_category[category] = [0, 0, 0.0]
        totals[0] += 1
        totals[1] += score >= 1.0
        totals[2] += score
        if errors:
            self.errors.update(set(errors))  # rows with each error kind


def score_files(
    data: str | os.PathLike[str],
    predictions: str | os.PathLike[str],
    scorer: str = "bfcl",
    workers: int | None = None,
    per_row: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> tuple[dict[str, Any], list[str]]:
    """Score a predictions file against a data file; return the report (docs/cli.md layout) and notes on skipped lines.

    `workers=None` uses every core when there are many predictions; any number gives the same report.
    """
    import numpy as np
    from tqdm import tqdm

    reward = SCORERS[scorer]
    predictions = Path(predictions)
    if workers is None:
        many = predictions.is_file() and predictions.stat().st_size >= _PARALLEL_BYTES
        workers = (os.cpu_count() or 1) if many else 1
    index = index_data(data, workers, predictions if predictions.is_file() else None, reward, progress)
    if not predictions.is_file():
        raise DataError(f"{predictions}: no such file")
    tasks = list(line_ranges(predictions, _RANGE_BYTES))
    total_lines = len(_lines_of(predictions, tasks))
    tally, notes = _Tally(), []
    seen = bytearray(len(index))
    cleanup = ExitStack()
    try:
        # The ExitStack closes it (with the progress bar and the pool) however scoring ends.
        per_row_handle = cleanup.enter_context(Path(per_row).open("w", encoding="utf-8")) if per_row else None  # noqa: SIM115
    except OSError as error:
        raise DataError(f"{per_row}: cannot be written ({error.strerror or error})") from None

    def record(row_index: int, score: float, errors: tuple[str, ...] | list[str], row_id: str) -> None:
        category = index.category_names[index.categories[row_index]]
        tally.add(category, score, errors)
        if per_row_handle:
            verdict = {"id": row_id, "category": category, "score": score, "correct": score >= 1.0}
            per_row_handle.write(json.dumps({**verdict, "errors": list(errors)}) + "\n")

    bar = cleanup.enter_context(
        tqdm(total=total_lines, unit="rows", desc="scoring", disable=not progress or None, file=sys.stderr)
    )
    state = (index, str(predictions), reward, per_row_handle is not None)
    pool = cleanup.enter_context(_pool(workers, set_index, state)) if workers > 1 and len(tasks) > 1 else None
    if pool is None:
        set_index(*state)
        cleanup.callback(release_index)
    with cleanup:
        # A bounded window of ranges at a time, so that results never pile up in memory ahead of the merge.
        for start in range(0, len(tasks), _WINDOW * workers):
            window = tasks[start : start + _WINDOW * workers]
            for part in pool.imap(score_range, window) if pool else map(score_range, window):
                if per_row_handle is not None or not _merge_at_once(part, index, tally, seen):
                    _merge(part, index, tally, seen, record, predictions)
                notes += [message for _, message in sorted(part.notes, key=lambda item: item[0])]
                bar.update(part.lines)
        with index.path.open("rb") as handle:
            for row_index in np.flatnonzero(np.frombuffer(seen, dtype=np.uint8) == 0).tolist():
                tally.rows["missing_prediction"] += 1
                row_id = read_id(handle, index.offsets[row_index]) if per_row_handle else ""
                record(row_index, 0.0, ["missing_prediction"], row_id)
    return _report(reward, index, predictions, tally), notes + tally.invalid_data


def _lines_of(path: Path, tasks: list[tuple[int, int, int]]) -> range:
    """The lines of the file the ranges cover (its last line counted even without a newline)."""
    if not tasks:
        return range(0)
    start, end, first = tasks[-1]
    with path.open("rb") as handle:
        handle.seek(start)
        block = handle.read(end - start)
    return range(first - 1 + block.count(b"\n") + (not block.endswith(b"\n")))


def _merge_at_once(part: ScoredPart, index: DataIndex, tally: _Tally, seen: bytearray) -> bool:
    """`_merge` with numpy, where it needs no row on its own: no prediction of the range is for a row already seen or
    seen twice in it, and no verdict is written per row; False (nothing done) otherwise. The totals are the same
    numbers: each category's rewards are added one after another in file order (`np.add.accumulate`, which does not
    pair them as `np.sum` does), and categories first met in this range enter the tally in the order they are met."""
    import numpy as np

    rows = np.frombuffer(part.rows, dtype=np.int64)
    marks = np.frombuffer(seen, dtype=np.uint8)
    if marks[rows].any() or len(np.unique(rows)) != len(rows):
        return False
    _count_lines(part, tally)
    marks[rows] = 1
    tally.invalid_data += [part.gold_errors[position] for position in sorted(part.gold_errors)]
    codes = np.frombuffer(index.categories, dtype=np.uint32)[rows]
    scores = np.frombuffer(part.scores, dtype=np.float64)
    distinct, first = np.unique(codes, return_index=True)
    for code in distinct[np.argsort(first)].tolist():
        mine = scores[codes == code]
        totals = tally.by_category.setdefault(index.category_names[code], [0, 0, 0.0])
        totals[0] += len(mine)
        totals[1] += int(np.count_nonzero(mine >= 1.0))
        totals[2] = float(np.add.accumulate(np.concatenate(([totals[2]], mine)))[-1])
    for errors, times in Counter(part.errors).items():
        for kind in set(errors):
            tally.errors[kind] += times
    return True


def _count_lines(part: ScoredPart, tally: _Tally) -> None:
    tally.rows["predictions"] += part.predictions
    tally.rows["unreadable"] += part.unreadable
    tally.rows["unmatched_prediction"] += part.unmatched


def _merge(part: ScoredPart, index: DataIndex, tally: _Tally, seen: bytearray, record: Any, predictions: Path) -> None:
    """Add one range's results in file order: a second prediction for a row is counted and noted (in `part.notes`),
    never scored."""
    _count_lines(part, tally)
    for position, row_index in enumerate(part.rows):
        if seen[row_index]:
            tally.rows["duplicate_prediction"] += 1
            number, row_id = part.line_numbers[position], part.ids[position]
            if row_id is None:  # a prediction scored while indexing: its id is its data row's
                with index.path.open("rb") as handle:
                    row_id = read_id(handle, index.offsets[row_index])
            part.notes.append((number, f"{predictions}: row {number} (id={row_id}): a second prediction for this id; "
                                       "the first is scored"))  # fmt: skip
            continue
        seen[row_index] = 1
        if position in part.gold_errors:
            tally.invalid_data.append(part.gold_errors[position])
        record(row_index, part.scores[position], part.errors[position], part.ids[position])


def _report(reward: str, index: DataIndex, predictions: Path, tally: _Tally) -> dict[str, Any]:
    data_rows = len(index)
    rows = {"data": data_rows, "predictions": tally.rows["predictions"]}
    rows["scored"] = data_rows - tally.rows["missing_prediction"]
    for key in ("missing_prediction", "unmatched_prediction", "duplicate_prediction", "unreadable"):
        rows[key] = tally.rows[key]
    rows["invalid_data"] = len(tally.invalid_data)
    correct = sum(totals[1] for totals in tally.by_category.values())
    reward_sum = sum(totals[2] for totals in tally.by_category.values())
    by_category = {
        category: {
            "rows": int(count),
            "correct": int(right),
            "accuracy": right / count,
            "mean_reward": total / count,
        }
        for category, (count, right, total) in sorted(tally.by_category.items())
    }
    return {
        "scorer": reward.removeprefix("tool_"),
        "data": str(index.path),
        "predictions": str(predictions),
        "rows": rows,
        "accuracy": correct / data_rows,
        "mean_reward": reward_sum / data_rows,
        "by_category": by_category,
        "errors": {kind: tally.errors[kind] for kind in ERROR_KINDS if tally.errors[kind]},
    }
