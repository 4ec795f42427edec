"""BFCL's AST categories before and after GRPO, laid out as the leaderboard's columns (`make eval-bfcl`).

Two steps around `grpo-tools convert --from bfcl`, `eval` and `score --per-row`:
- `select`: from converted BFCL category files, a capped, evenly spaced sample of each category's rows into one eval
  file. Rows keep BFCL's ids (`live_simple_12-3-1`), which name their source category: converted rows carry only the
  canonical category (`live_simple` becomes `simple`), so the id is what tells live from non-live.
- `table`: from two `score --per-row` files (before and after), accuracy per BFCL category, the leaderboard's
  overall columns, and the number of rows each figure covers; with `--summary`, `bfcl_summary.json`, whose every
  change carries its 95% interval, the rows paired by id, and calls, irrelevance and usable (`usable`) for the base
  model (`--base`), the warm start and after GRPO.

The overall columns follow bfcl-eval's `eval_runner_helper`: non-live is the unweighted mean of its four categories,
live the mean weighted by rows. Here `simple` is `simple_python` only (the leaderboard's averages Java and
JavaScript in too), and an overall covers the categories that have rows.

    python -m grpo_tools.evaluation.leaderboard select --rows 10 --output bfcl.jsonl converted/*.jsonl
    python -m grpo_tools.evaluation.leaderboard table before_rows.jsonl after_rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grpo_tools.data.rows import DataError, JsonlWriter, check_rows, read_jsonl
from grpo_tools.evaluation.eval_cache import cache_note


__all__ = [
    "BFCL_COLUMNS",
    "PUBLISHED",
    "PUBLISHED_SOURCE",
    "Column",
    "Tally",
    "bfcl_summary",
    "format_summary",
    "format_table",
    "is_bfcl",
    "leaderboard_cells",
    "main",
    "paired_changes",
    "read_verdicts",
    "select_rows",
    "source_category",
    "tally_verdicts",
]

# BFCL's categories by leaderboard group; the converted files and the row ids use the names on the right.
NON_LIVE = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
}
LIVE = {name: f"live_{name}" for name in NON_LIVE}


@dataclass(frozen=True)
class Column:
    """A leaderboard column: its group, its name, the BFCL categories behind it, and how an overall combines them."""

    group: str
    name: str
    categories: tuple[str, ...]
    combine: Literal["unweighted", "weighted"] | None = None  # None: a single category


BFCL_COLUMNS: list[Column] = [
    *(Column("Non-live", name, (category,)) for name, category in NON_LIVE.items()),
    Column("Non-live", "overall", tuple(NON_LIVE.values()), "unweighted"),
    *(Column("Live", name, (category,)) for name, category in LIVE.items()),
    Column("Live", "overall", tuple(LIVE.values()), "weighted"),
    Column("Hallucination", "irrelevance", ("irrelevance",)),
    Column("Hallucination", "live_irrelevance", ("live_irrelevance",)),
]
CATEGORIES = tuple(column.categories[0] for column in BFCL_COLUMNS if column.combine is None)
MISSING = "–"  # a figure with no rows behind it
Z_95 = statistics.NormalDist().inv_cdf(0.975)  # 1.96: a 95% interval is the estimate plus or minus Z_95 errors

# Published BFCL v4 figures (%) of small models, for scale beside ours. The leaderboard's `simple` averages Python,
# Java and JavaScript; ours is simple_python only.
PUBLISHED_SOURCE = "BFCL v4 leaderboard (gorilla.cs.berkeley.edu/leaderboard.html), as of 2026-04-12"
PUBLISHED = {
    "Llama-3.2-1B-Instruct (FC)": {"simple": 44.0, "multiple": 50.5, "irrelevance": 51.6},
    "Granite-4.0-350m": {"simple": 61.7, "multiple": 84.5, "irrelevance": 60.8},
    "Hammer2.1-0.5b": {"simple": 62.4, "multiple": 81.0, "irrelevance": 80.8},
    "Qwen3-0.6B": {"simple": 64.2, "multiple": 86.0, "irrelevance": 80.8},
}


@dataclass(frozen=True)
class Tally:
    """Rows scored and rows correct in one BFCL category."""

    rows: int
    correct: int


def source_category(row_id: Any) -> str:
    """The BFCL category a BFCL id names: the id without its trailing `_<number>` part.

    >>> source_category("live_parallel_multiple_3-2-0"), source_category("simple_python_17")
    ('live_parallel_multiple', 'simple_python')
    """
    category = str(row_id).rsplit("_", 1)[0]
    if category not in CATEGORIES:
        raise ValueError(f"id {row_id!r} does not name one of BFCL's AST categories ({', '.join(CATEGORIES)})")
    return category


def select_rows(rows: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], int]:
    """At most `limit` rows spread evenly over the file (so over BFCL's whole file, not only its first functions),
    leaving out rows that `check-data` rejects (`eval` would refuse them); return the rows and how many were left out
    among those looked at. A rejected row at a chosen place gives it to the next sound row, so only the rows looked at
    are checked; when that walk runs off the end, the sound rows of the whole file are spread instead."""
    chosen: list[dict[str, Any]] = []
    passed_over = position = 0
    for slot in range(limit):
        position = max(position, slot * len(rows) // limit)
        while position < len(rows) and check_rows([rows[position]]):
            passed_over += 1
            position += 1
        if position == len(rows):
            sound = [row for row in rows if not check_rows([row])]
            spread = [sound[index * len(sound) // limit] for index in range(limit)] if len(sound) > limit else sound
            return spread, len(rows) - len(sound)
        chosen.append(rows[position])
        position += 1
    return chosen, passed_over


def tally_verdicts(verdicts: list[dict[str, Any]]) -> dict[str, Tally]:
    """Per BFCL category (from each verdict's id), rows and correct rows of `score --per-row` lines."""
    counts: dict[str, list[int]] = {}
    for verdict in verdicts:
        totals = counts.setdefault(source_category(verdict["id"]), [0, 0])
        totals[0] += 1
        totals[1] += bool(verdict["correct"])
    return {category: Tally(rows, correct) for category, (rows, correct) in counts.items()}


def is_bfcl(rows: list[dict[str, Any]]) -> bool:
    """Whether every row carries a BFCL id that names one of BFCL's AST categories."""
    try:
        return bool(rows) and all(source_category(row.get("id")) for row in rows)
    except ValueError:
        return False


def paired_changes(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Per BFCL category (from each verdict's id), each row's change from `before` to `after`: 1 where it became
    correct, -1 where it stopped being correct, 0 otherwise. ValueError where the two cover different rows."""
    later = {verdict["id"]: bool(verdict["correct"]) for verdict in after}
    if len(later) != len(after) or {verdict["id"] for verdict in before} != set(later) or len(before) != len(after):
        raise ValueError("before and after cover different rows")
    changes: dict[str, list[int]] = {}
    for verdict in before:
        change = int(later[verdict["id"]]) - int(bool(verdict["correct"]))
        changes.setdefault(source_category(verdict["id"]), []).append(change)
    return changes


def change_interval(changes: list[list[int]]) -> list[float] | None:
    """The 95% interval of the mean over categories of each one's mean change, rows paired before and after: each
    category's standard error is that of its rows' changes, the categories' errors add as independent ones (a
    normal approximation). None where a category has fewer than two rows to measure it by."""
    if not changes or any(len(rows) < 2 for rows in changes):
        return None
    mean = sum(sum(rows) / len(rows) for rows in changes) / len(changes)
    error = math.sqrt(sum(statistics.variance(rows) / len(rows) for rows in changes)) / len(changes)
    return [round(mean - Z_95 * error, 4), round(mean + Z_95 * error, 4)]


def bfcl_summary(
    before: list[dict[str, Any]], after: list[dict[str, Any]], base: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """`bfcl_summary.json` from two runs' `score --per-row` verdicts: rows and accuracy (a fraction) before and
    after per BFCL category, the 95% interval of each change (`change_95`, rows paired by id), under `calls` the
    same for the mean of the call categories (every one but the irrelevance ones), where there are any, and under
    `usable` the table a user reads (`grpo_tools.evaluation.usable`): calls, irrelevance and usable with their 95%
    intervals for the base model (`base`, the model before any training, when given), the warm start (`before`) and
    after GRPO, the interval of each change, and the published small models."""
    from grpo_tools.evaluation import usable

    changes = paired_changes(before, after)
    if base is not None:
        paired_changes(base, before)  # the same rows, or ValueError
    tallies = {"before": tally_verdicts(before), "after": tally_verdicts(after)}
    categories = {
        category: {
            "rows": tally.rows,
            "before": tally.correct / tally.rows,
            "after": tallies["after"][category].correct / tally.rows,
            "change_95": change_interval([changes[category]]),
        }
        for category, tally in tallies["before"].items()
    }
    summary: dict[str, Any] = {"categories": categories}
    calls = [category for category in categories if "irrelevance" not in category]
    if calls:
        summary["calls"] = {
            "categories": calls,
            **{key: sum(categories[name][key] for name in calls) / len(calls) for key in ("before", "after")},
            "change_95": change_interval([changes[name] for name in calls]),
        }
    runs = {"base model": base, "warm start": before, "after GRPO": after}
    summary["usable"] = usable.usable_summary(runs, PUBLISHED, PUBLISHED_SOURCE)
    return summary


def format_summary(summary: dict[str, Any], published: bool = False) -> str:
    """`bfcl_summary`'s figures as a plain table in %, the mean of the call categories (every one but the
    irrelevance ones) under `calls`, half the width of each change's 95% interval, and with `published` the rows of
    `PUBLISHED` below ours."""
    categories = summary["categories"]
    names = list(categories)
    calls = [name for name in names if "irrelevance" not in name]
    heads = [*names, "calls"] if calls else names
    width = max(8, *map(len, heads))
    label_width = max([len("after GRPO"), *(map(len, PUBLISHED) if published else [])])

    def line(label: str, values: list[float | None]) -> str:
        cells = (MISSING if value is None else f"{value:.1f}" for value in values)
        return label.ljust(label_width) + "".join(f"  {cell:>{width}}" for cell in cells)

    def figures(key: str) -> list[float | None]:
        values = [100 * categories[name][key] for name in names]
        return values + ([sum(100 * categories[name][key] for name in calls) / len(calls)] if calls else [])

    lines = [" " * label_width + "".join(f"  {head:>{width}}" for head in heads)]
    lines += [line("warm start", figures("before")), line("after GRPO", figures("after"))]
    lines.append(line("change", [a - b for a, b in zip(figures("after"), figures("before"), strict=True)]))
    # Half the width of each change's 95% interval, in points: `change` plus or minus this covers the true change.
    intervals = [categories[name].get("change_95") for name in names]
    intervals += [summary.get("calls", {}).get("change_95")] if calls else []
    if any(intervals):
        halves = [None if interval is None else 50 * (interval[1] - interval[0]) for interval in intervals]
        lines.append(line("95% ±", halves))
    lines.append("rows".ljust(label_width) + "".join(f"  {categories[name]['rows']:>{width}}" for name in names))
    if published:
        lines.append(f"published ({PUBLISHED_SOURCE}; their simple averages Python, Java and JavaScript):")
        leaderboard_names = {"simple_python": "simple", "multiple": "multiple", "irrelevance": "irrelevance"}
        for model, row in PUBLISHED.items():
            values = [row.get(leaderboard_names.get(name, name)) for name in names]
            known = [value for name, value in zip(names, values, strict=True) if name in calls and value is not None]
            lines.append(line(model, values + ([sum(known) / len(known)] if calls and known else [])))
    if "usable" in summary:
        from grpo_tools.evaluation.usable import format_measures

        lines += ["", format_measures(summary["usable"] if published else {**summary["usable"], "published": {}})]
    return "\n".join(line.rstrip() for line in lines)


def _figure(tallies: dict[str, Tally], column: Column) -> tuple[float | None, int]:
    """A column's accuracy (None without rows) and the rows behind it."""
    present = [tallies[category] for category in column.categories if tallies.get(category, Tally(0, 0)).rows]
    rows = sum(tally.rows for tally in present)
    if not present:
        return None, 0
    if column.combine == "unweighted":  # bfcl-eval's calculate_unweighted_accuracy: each category counts once
        return sum(tally.correct / tally.rows for tally in present) / len(present), rows
    return sum(tally.correct for tally in present) / rows, rows  # one category, or weighted by rows


def leaderboard_cells(runs: dict[str, dict[str, Tally]]) -> list[list[str]]:
    """The table as text cells: one line per run (accuracy in %, `–` without rows), then a `rows` line saying how
    many rows each figure covers. Runs must cover the same rows: they are figures for the same eval file."""
    lines, row_counts = [], None
    for label, tallies in runs.items():
        figures = [_figure(tallies, column) for column in BFCL_COLUMNS]
        counts = [rows for _, rows in figures]
        if row_counts is not None and counts != row_counts:
            raise ValueError(f"{label}: rows per category {counts} differ from the first run's {row_counts}")
        row_counts = counts
        lines.append([label, *(MISSING if accuracy is None else f"{100 * accuracy:.1f}" for accuracy, _ in figures)])
    return [*lines, ["rows", *(str(count) for count in row_counts or [])]]


def format_table(runs: dict[str, dict[str, Tally]]) -> str:
    """`leaderboard_cells` as plain text under the leaderboard's column groups, about 125 characters wide (rich would
    cut the headers short in an 80-column pipe)."""
    cells = leaderboard_cells(runs)
    heads = [column.name.split("_", 1) for column in BFCL_COLUMNS]
    widths = [max(*map(len, head), *(len(line[index + 1]) for line in cells)) for index, head in enumerate(heads)]
    label_width = max(len(line[0]) for line in cells)
    groups = ""
    for group in dict.fromkeys(column.group for column in BFCL_COLUMNS):
        span = sum(width + 2 for width, column in zip(widths, BFCL_COLUMNS, strict=True) if column.group == group) - 2
        groups += "  " + (f" {group} ".center(span, "-") if group != "Hallucination" else f"{group} ".ljust(span))
    lines = [" " * label_width + groups]
    for depth in range(max(map(len, heads))):
        parts = [
            (head[depth] if depth < len(head) else "").rjust(width) for head, width in zip(heads, widths, strict=True)
        ]
        lines.append(" " * label_width + "".join("  " + part for part in parts))
    for line in cells:
        values = [value.rjust(width) for value, width in zip(line[1:], widths, strict=True)]
        lines.append(line[0].ljust(label_width) + "".join("  " + value for value in values))
    return "\n".join(line.rstrip() for line in lines)


def _read(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    for number, row in read_jsonl(path):
        if isinstance(row, DataError):
            raise DataError(f"{path}: row {number}: {row}")
        rows.append(row)
    return rows


def read_verdicts(path: str | Path) -> list[dict[str, Any]]:
    """The verdicts of a `score --per-row` file; `DataError` names the file and row of a bad line."""
    verdicts = _read(path)
    for number, verdict in enumerate(verdicts, start=1):
        if "id" not in verdict or "correct" not in verdict:
            raise DataError(f"{path}: row {number}: not a `grpo-tools score --per-row` verdict (needs id and correct)")
        try:
            source_category(verdict["id"])
        except ValueError as error:
            raise DataError(f"{path}: row {number}: {error}") from None
    return verdicts


def _select_main(args: argparse.Namespace) -> int:
    with JsonlWriter(args.output) as writer:
        for path in args.converted:
            rows = _read(path)
            for number, row in enumerate(rows, start=1):
                try:  # a file of another dataset stops here, before it is evaluated
                    source_category(row.get("id"))
                except ValueError as error:
                    raise DataError(f"{path}: row {number}: {error}") from None
            chosen, skipped = select_rows(rows, args.rows)
            for row in chosen:
                writer.write(row)
            note = f" ({skipped} with check-data problems passed over)" if skipped else ""
            print(f"{path}: {len(chosen)} of {len(rows)} rows{note}")
    print(f"wrote {args.output}")
    return 0


def _table_main(args: argparse.Namespace) -> int:
    verdicts = {"before": read_verdicts(args.before), "after": read_verdicts(args.after)}
    runs = {label: tally_verdicts(rows) for label, rows in verdicts.items()}
    print(f"BFCL AST accuracy (%, tool_bfcl): before = {args.before}, after = {args.after}")
    if args.summary:
        base = read_verdicts(args.base) if args.base else None
        summary = bfcl_summary(verdicts["before"], verdicts["after"], base)
        if note := args.base and cache_note(args.base):  # the base model's completions: computed or reused
            summary["base_model_cache"] = note
        Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        print(format_summary(summary, published=True))
        if note:
            print(f"base model: completions {note['status']} (cache key {note['key']}, {note['cache_dir']})")
        print(f"wrote {args.summary}")
    else:
        print(format_table(runs))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m grpo_tools.evaluation.leaderboard select|table ...`; exit 2 with one message on unusable input."""
    parser = argparse.ArgumentParser(
        prog="python -m grpo_tools.evaluation.leaderboard",
        description="BFCL's AST categories in the leaderboard's columns.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    select = commands.add_parser("select", help="a capped, evenly spaced sample of converted BFCL categories")
    select.add_argument("converted", nargs="+", help="canonical rows from `grpo-tools convert --from bfcl CATEGORY`")
    select.add_argument("--rows", type=int, required=True, help="at most this many rows per category")
    select.add_argument("--output", required=True, help="the eval file (JSONL) to write")
    table = commands.add_parser("table", help="the leaderboard table from two `grpo-tools score --per-row` files")
    table.add_argument("before", help="per-row verdicts before GRPO")
    table.add_argument("after", help="per-row verdicts after GRPO")
    table.add_argument("--base", help="with --summary: per-row verdicts of the model before any training, a first row")
    table.add_argument(
        "--summary",
        help="write bfcl_summary.json here and print accuracy per category beside published small models, instead of "
        "the leaderboard's columns",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "select" and args.rows < 1:
        parser.error(f"--rows must be at least 1, got {args.rows}")
    try:
        return _select_main(args) if args.command == "select" else _table_main(args)
    except (DataError, ValueError) as error:  # ValueError: before and after cover different rows
        print(f"{parser.prog} {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
