"""`grpo-tools score`: the command line, and the report as tables on the terminal (the scoring is `scoring`'s)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grpo_tools.data.rows import DataError
from grpo_tools.evaluation.scoring import _MAX_REPORTED, SCORERS, score_files
from grpo_tools.rewards import REWARDS


__all__ = ["main", "print_report"]


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
