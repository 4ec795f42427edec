"""Score a file of model outputs against a canonical dataset: `grpo-tools score`, and the report `eval` writes.

Predictions (`{"id": ..., "completion": ...}` per line) are joined to data rows by `id`. The data file is indexed
once (id -> byte offset, category), each gold row checked on the way, and predictions are streamed: memory grows with
the number of ids, not the size of the files. Scoring is spread over worker processes in ordered chunks, so any
number of workers gives the same report. The report layout is in docs/cli.md ("`grpo-tools score`").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from array import array
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from grpo_tools.data.rows import DataError, derive_category
from grpo_tools.rewards import ERROR_KINDS, REWARDS, GoldError, make_gold, score_completion


__all__ = ["SCORERS", "DataIndex", "index_data", "main", "score_files"]

# `--scorer` names: the reward registry's names without their `tool_` prefix.
SCORERS: dict[str, str] = {name.removeprefix("tool_"): name for name in REWARDS}
_CHUNK_ROWS = 1_000
# Below this many predictions, worker processes cost more to start than they save.
_PARALLEL_THRESHOLD = 20_000
_MAX_REPORTED = 20  # problems printed one per line before the rest are only counted


@dataclass
class DataIndex:
    """Where each data row is, by id: its byte offset, its category, and whether a prediction has been scored."""

    path: Path
    rows: dict[str, int]  # id -> row index (0-based)
    offsets: array  # byte offset of each row's line
    line_numbers: array  # 1-based line number of each row, for messages
    categories: bytearray  # index into category_names, per row
    category_names: list[str]


def _row_label(path: Path, line_number: int, row_id: Any = None) -> str:
    return f"{path}: row {line_number}" + (f" (id={row_id})" if row_id is not None else "")


def index_data(path: str | os.PathLike[str]) -> DataIndex:
    """Read a canonical dataset once, checking every row can be scored; raise `DataError` listing the bad rows."""
    path = Path(path)
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror or error})") from None
    index = DataIndex(path, {}, array("q"), array("q"), bytearray(), [])
    category_codes: dict[str, int] = {}
    problems: list[str] = []
    offset = 0
    with handle:
        for line_number, line in enumerate(handle, start=1):
            line_offset, offset = offset, offset + len(line)
            if not line.strip():
                continue
            problem = _index_row(index, category_codes, line, line_offset, line_number)
            if problem:
                problems.append(problem)
    if problems:
        shown = "\n".join(problems[:_MAX_REPORTED])
        more = f"\n... and {len(problems) - _MAX_REPORTED} more" if len(problems) > _MAX_REPORTED else ""
        raise DataError(
            f"{shown}{more}\n{len(problems)} data row(s) cannot be scored; `grpo-tools check-data {path}` lists every"
            " problem"
        )
    if not index.rows:
        raise DataError(f"{path}: no data rows")
    return index


def _index_row(index: DataIndex, codes: dict[str, int], line: bytes, offset: int, line_number: int) -> str | None:
    """Add one data line to the index; return a message naming the row and field when it cannot be scored."""
    try:
        row = json.loads(line)
    except ValueError as error:
        return f"{_row_label(index.path, line_number)}: not valid JSON ({error})"
    if not isinstance(row, dict):
        return f"{_row_label(index.path, line_number)}: expected a JSON object"
    row_id = row.get("id")
    if row_id is None:
        return f"{_row_label(index.path, line_number)}: id: missing"
    label = _row_label(index.path, line_number, row_id)
    for required in ("tools", "answers"):
        if required not in row:
            return f"{label}: {required}: missing"
    try:
        gold = make_gold(row["tools"], row["answers"], row.get("possible_answers"), label)
        gold.possible  # noqa: B018 -- read now so that a malformed possible_answers is reported before scoring
        tools = gold.tool_list
    except GoldError as error:
        return str(error)
    key = str(row_id)
    if key in index.rows:
        first = index.line_numbers[index.rows[key]]
        return f"{label}: id: duplicate of row {first}; ids must be unique to join predictions"
    category = row.get("category") or derive_category(gold.calls, tools)
    if category not in codes:
        codes[category] = len(index.category_names)
        index.category_names.append(category)
    index.rows[key] = len(index.offsets)
    index.offsets.append(offset)
    index.line_numbers.append(line_number)
    index.categories.append(codes[category])
    return None


def _score_chunk(task: tuple[str, list[tuple[bytes, Any, str]]]) -> list[tuple[float, tuple[str, ...], str | None]]:
    """Score `(data line, completion, row label)` items under one reward; runs in worker processes."""
    reward, items = task
    results = []
    for data_line, completion, label in items:
        row = json.loads(data_line)
        try:
            # The rewards' own path: the completion is read with the row's tools, which Qwen3-Coder's values need.
            gold = make_gold(row["tools"], row["answers"], row.get("possible_answers"), label)
            verdict = score_completion(reward, completion, gold)
        except GoldError as error:  # a tool list only this scorer reads (e.g. an invalid schema): report, score 0
            results.append((0.0, (), str(error)))
            continue
        results.append((verdict.score, verdict.errors, None))
    return results


@dataclass
class _Tally:
    """Running totals for the report."""

    rows: Counter = field(default_factory=Counter)
    by_category: dict[str, list[float]] = field(default_factory=dict)  # category -> [rows, correct, reward sum]
    errors: Counter = field(default_factory=Counter)
    invalid_data: list[str] = field(default_factory=list)

    def add(self, category: str, score: float, errors: tuple[str, ...] | list[str]) -> None:
        totals = self.by_category.setdefault(category, [0, 0, 0.0])
        totals[0] += 1
        totals[1] += score >= 1.0
        totals[2] += score
        self.errors.update(set(errors))  # rows with each error kind


def _count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


def _predictions(path: Path, index: DataIndex, tally: _Tally, seen: bytearray, notes: list[str]) -> Iterator[tuple]:
    """Readable, joined, first predictions as `(row index, completion)`; the rest are counted and noted."""
    from grpo_tools.data.rows import read_jsonl

    for line_number, row in read_jsonl(path):
        if isinstance(row, DataError):
            tally.rows["unreadable"] += 1
            notes.append(f"{path}: row {line_number}: {row}")
            continue
        if "id" not in row or "completion" not in row:
            tally.rows["unreadable"] += 1
            missing = "id" if "id" not in row else "completion"
            notes.append(f"{path}: row {line_number}: {missing}: missing")
            continue
        tally.rows["predictions"] += 1
        row_index = index.rows.get(str(row["id"]))
        if row_index is None:
            tally.rows["unmatched_prediction"] += 1
            notes.append(f"{path}: row {line_number} (id={row['id']}): no data row has this id")
            continue
        if seen[row_index]:
            tally.rows["duplicate_prediction"] += 1
            notes.append(
                f"{path}: row {line_number} (id={row['id']}): a second prediction for this id; the first is scored"
            )
            continue
        seen[row_index] = 1
        yield row_index, row["completion"]


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
    import multiprocessing

    from tqdm import tqdm

    reward = SCORERS[scorer]
    index = index_data(data)
    predictions = Path(predictions)
    if not predictions.is_file():
        raise DataError(f"{predictions}: no such file")
    total_lines = _count_lines(predictions)
    if workers is None:
        workers = (os.cpu_count() or 1) if total_lines >= _PARALLEL_THRESHOLD else 1
    tally, notes = _Tally(), []
    seen = bytearray(len(index.offsets))
    cleanup = ExitStack()
    try:
        # The ExitStack closes it (with the progress bar and the pool) however scoring ends.
        per_row_handle = cleanup.enter_context(Path(per_row).open("w", encoding="utf-8")) if per_row else None  # noqa: SIM115
    except OSError as error:
        raise DataError(f"{per_row}: cannot be written ({error.strerror or error})") from None
    ids = {row_index: row_id for row_id, row_index in index.rows.items()} if per_row else {}

    def record(row_index: int, score: float, errors: tuple[str, ...] | list[str]) -> None:
        category = index.category_names[index.categories[row_index]]
        tally.add(category, score, errors)
        if per_row_handle:
            verdict = {"id": ids[row_index], "category": category, "score": score, "correct": score >= 1.0}
            per_row_handle.write(json.dumps({**verdict, "errors": list(errors)}) + "\n")

    def chunks() -> Iterator[tuple[list[int], tuple[str, list]]]:
        rows: list[int] = []
        items: list[tuple[bytes, Any, str]] = []
        with index.path.open("rb") as data_handle:
            for row_index, completion in _predictions(predictions, index, tally, seen, notes):
                data_handle.seek(index.offsets[row_index])
                label = f"{index.path}: row {index.line_numbers[row_index]}"
                rows.append(row_index)
                items.append((data_handle.readline(), completion, label))
                if len(rows) == _CHUNK_ROWS:
                    yield rows, (reward, items)
                    rows, items = [], []
        if rows:
            yield rows, (reward, items)

    bar = cleanup.enter_context(
        tqdm(total=total_lines, unit="rows", desc="scoring", disable=not progress or None, file=sys.stderr)
    )
    pool = cleanup.enter_context(multiprocessing.get_context().Pool(workers)) if workers > 1 else None
    with cleanup:
        source = chunks()
        while True:
            # A bounded window of chunks at a time: Pool.imap alone would read the whole file ahead into memory.
            window = list(islice(source, workers * 4))
            if not window:
                break
            tasks = [task for _, task in window]
            results = pool.imap(_score_chunk, tasks) if pool else map(_score_chunk, tasks)
            for (rows, _), chunk_results in zip(window, results, strict=True):
                for row_index, (score, errors, gold_error) in zip(rows, chunk_results, strict=True):
                    if gold_error:
                        tally.invalid_data.append(gold_error)
                    record(row_index, score, errors)
                bar.update(len(rows))
        for row_index in (i for i, done in enumerate(seen) if not done):
            tally.rows["missing_prediction"] += 1
            record(row_index, 0.0, ["missing_prediction"])
    return _report(reward, index, predictions, tally), notes + tally.invalid_data


def _report(reward: str, index: DataIndex, predictions: Path, tally: _Tally) -> dict[str, Any]:
    data_rows = len(index.offsets)
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


def print_report(report: dict[str, Any]) -> None:
    """The report as tables on the terminal."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{report['scorer']} accuracy: {report['predictions']} vs {report['data']}")
    for column in ("category", "rows", "correct", "accuracy", "mean reward"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for category, totals in report["by_category"].items():
        table.add_row(
            category,
            str(totals["rows"]),
            str(totals["correct"]),
            f"{totals['accuracy']:.3f}",
            f"{totals['mean_reward']:.3f}",
        )
    correct = sum(totals["correct"] for totals in report["by_category"].values())
    table.add_row(
        "all", str(report["rows"]["data"]), str(correct), f"{report['accuracy']:.3f}", f"{report['mean_reward']:.3f}",
        style="bold",
    )  # fmt: skip
    console.print(table)
    if report["errors"]:
        errors = Table(title="rows with each error kind")
        errors.add_column("error")
        errors.add_column("rows", justify="right")
        for kind, count in sorted(report["errors"].items(), key=lambda item: -item[1]):
            errors.add_row(kind, str(count))
        console.print(errors)
    if "overall" in report:
        console.print(f"overall (BFCL's multi-turn accuracy: the mean over the categories): {report['overall']:.3f}")
    console.print("rows: " + ", ".join(f"{key} {value}" for key, value in report["rows"].items()))


def main(argv: list[str]) -> int:
    """`grpo-tools score`: score predictions, print the tables, write the report; exit 2 on unusable input."""
    from grpo_tools.evaluation.bfcl_decoding import DECODER_HELP, DECODERS

    parser = argparse.ArgumentParser(
        prog="grpo-tools score", description="Score model outputs against a canonical dataset."
    )
    parser.add_argument("--data", required=True, help="canonical dataset (JSONL)")
    parser.add_argument(
        "--predictions",
        required=True,
        help='JSONL of {"id": ..., "completion": "<raw model text>"}; for BFCL multi-turn rows (`convert --from bfcl '
        'multi_turn_*`), BFCL\'s result file ({"id": ..., "result": [per turn, per step, the response]}), scored by '
        "BFCL's multi-turn verdict",
    )
    parser.add_argument(
        "--scorer",
        choices=list(SCORERS),
        default="bfcl",
        help="reward deciding correctness: "
        + "; ".join(f"{name}: {REWARDS[full].description}" for name, full in SCORERS.items()),
    )
    parser.add_argument("--decoder", choices=list(DECODERS), default="grpo-tools", help=DECODER_HELP)
    parser.add_argument("--output", help="write the report (JSON) here")
    parser.add_argument("--per-row", help="write one verdict per data row (JSONL) here")
    parser.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: all cores for large files)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")

    from grpo_tools.evaluation.bfcl_multi_turn import is_bfcl_multi_turn, score_bfcl_multi_turn

    try:
        if is_bfcl_multi_turn(args.data):  # BFCL's multi-turn rows: BFCL's verdict, whatever --scorer says
            report, notes = score_bfcl_multi_turn(args.data, args.predictions, args.per_row, args.decoder)
        elif args.decoder != "grpo-tools":
            raise DataError(
                f"{args.data}: --decoder reads BFCL multi-turn results; these are not BFCL multi-turn rows"
            )
        else:
            report, notes = score_files(
                args.data, args.predictions, args.scorer, args.workers, args.per_row, not args.quiet
            )
    except DataError as error:
        print(f"grpo-tools score: {error}", file=sys.stderr)
        return 2
    for note in notes[:_MAX_REPORTED]:
        print(note, file=sys.stderr)
    if len(notes) > _MAX_REPORTED:
        print(f"... and {len(notes) - _MAX_REPORTED} more lines like these", file=sys.stderr)
    print_report(report)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.output}")
    return 1 if report["rows"]["invalid_data"] else 0
