"""Shuffle the order of each row's tools in a canonical JSONL file, to test whether training on rows whose right
function is not where a model expects it teaches the model to choose by the request rather than by position.

SmolLM2's warm start on the BFCL task calls the first offered function on most rows that offer more than one, right
or not. Each row's tools are shuffled, drawn by `--seed`; its gold answers and possible answers name functions, not
positions, so every row scores as it did. `--distractor` also gives each call row that offers one function a second
one, drawn from the functions the file's other rows offer (so a function offered by many rows is drawn more often),
and makes the row's category the one BFCL gives a row with more than one function (`simple` -> `multiple`). A row
without a list of tools, each with a function name, is refused with its file, row and field.
What docs/findings.md ran on the BFCL task's splits:

    .venv/bin/python -m experiments.reorder_tools outputs/bfcl-task/train.jsonl outputs/train_shuffle.jsonl
    .venv/bin/python -m experiments.reorder_tools outputs/bfcl-task/train.jsonl outputs/train_distract.jsonl \\
        --distractor
    .venv/bin/python -m experiments.reorder_tools outputs/bfcl-task/warmup.jsonl outputs/warmup_distract.jsonl \\
        --distractor
"""

from __future__ import annotations

import json
import random
from typing import Any

from experiments.restyle_names import offered_names, probe_parser, read_rows, rewrite_rows


MORE_THAN_ONE = {"simple": "multiple", "parallel": "parallel_multiple"}  # BFCL's category once a row offers two


def reorder_row(row: Any, rng: random.Random, pool: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`row` with its tools in an order drawn by `rng`; with a `pool` of functions, a call row that offers one
    function first gets one more from the pool, of another name. ValueError naming the field where the row offers no
    function names."""
    names = offered_names(row)
    reordered = json.loads(json.dumps(row))  # a deep copy of plain JSON
    if pool is not None and reordered.get("answers") and len(reordered["tools"]) == 1:
        others = [tool for tool in pool if tool["function"]["name"] not in names]
        if others:
            reordered["tools"].append(json.loads(json.dumps(rng.choice(others))))
            category = reordered.get("category")
            reordered["category"] = MORE_THAN_ONE.get(category, category)
    rng.shuffle(reordered["tools"])
    return reordered


def main(argv: list[str] | None = None) -> None:
    parser = probe_parser(__doc__, "the order each row's tools get, and the distractors")
    parser.add_argument(
        "--distractor",
        action="store_true",
        help="give each call row that offers one function another, from the file's other rows",
    )
    args = parser.parse_args(argv)
    pool = None
    if args.distractor:  # every row is checked before any is drawn from
        pool = []
        for number, row in read_rows(args.source):
            try:
                offered_names(row)
            except ValueError as error:
                raise SystemExit(f"{args.source}: row {number}: {error}") from None
            pool.extend(row["tools"])
    rng = random.Random(args.seed)
    count = rewrite_rows(args.source, args.target, lambda row: reorder_row(row, rng, pool))
    added = " and a distractor on one-function call rows" if args.distractor else ""
    print(f"{args.target}: {count} rows, tools shuffled{added}")


if __name__ == "__main__":
    main()
