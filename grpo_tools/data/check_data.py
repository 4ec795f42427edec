"""`grpo-tools check-data DATA.jsonl`: the linter `grpo_tools.data.rows.check_rows` on a file, one line per problem."""

from __future__ import annotations

import argparse
import sys

from grpo_tools.data.rows import DataError, check_rows, read_jsonl


__all__ = ["check_data_main"]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def check_data_main(argv: list[str]) -> int:
    """`grpo-tools check-data DATA.jsonl`: print one line per problem and a summary; exit 1 on problems, 2 on a
    missing or unreadable file."""
    parser = argparse.ArgumentParser(
        prog="grpo-tools check-data",
        description="Lint a canonical tool-calling dataset (JSONL): ids, messages, tools, gold answers against "
        "their tool schemas, possible_answers and categories, and what BFCL's multi-turn APIs start from. Exits 1 "
        "when it finds a problem.",
    )
    parser.add_argument("data", help="canonical dataset, one JSON object per line")
    args = parser.parse_args(argv)

    try:
        numbered = read_jsonl(args.data)
    except DataError as error:
        print(f"grpo-tools check-data: {error}", file=sys.stderr)
        return 2
    rows = list(numbered)
    problems = check_rows(rows)

    for problem in problems:
        print(f"{args.data}: {problem}")
    if not rows:
        print(f"{args.data}: no rows")
        return 1
    if problems:
        bad_rows = len({problem.row for problem in problems})
        print(f"{_plural(len(rows), 'row')}, {_plural(len(problems), 'problem')} in {_plural(bad_rows, 'row')}")
        return 1
    print(f"{_plural(len(rows), 'row')}, no problems")
    return 0
