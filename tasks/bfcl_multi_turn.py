"""BFCL's multi-turn set as per-turn training rows, split by scenario.

`python -m tasks.bfcl_multi_turn --out outputs/bfcl-multi-turn` converts BFCL's four multi-turn categories (read from
the installed bfcl-eval) into per-turn rows (`grpo-tools convert --from bfcl ... --per-turn`, one row per user turn)
and writes `train.jsonl` and `eval.jsonl`. The four categories ask about the same 200 scenarios (`env.scenario`), so
the split goes by scenario, never by category: every scenario whose number is a multiple of `--eval-every` (5: 40 of
200) is held out with all its rows in every category. `--categories` keeps fewer categories (the CPU recipe trains on
`multi_turn_base` alone).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpo_tools.data.converters import bfcl_files, convert_rows, load_ground_truth, read_source
from grpo_tools.data.converters.bfcl_multi_turn import MULTI_TURN_CATEGORIES
from grpo_tools.data.rows import write_jsonl
from grpo_tools.tools.bfcl_turns import per_turn_rows


def held_out(row: dict, eval_every: int) -> bool:
    """Whether a per-turn row's scenario (`bfcl-<number>`) is held out."""
    return int(row["env"]["scenario"].rsplit("-", 1)[1]) % eval_every == 0


def main(argv: list[str] | None = None) -> int:
    """Convert, split by scenario, write `train.jsonl` and `eval.jsonl`; print what each holds."""
    parser = argparse.ArgumentParser(prog="python -m tasks.bfcl_multi_turn", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder to write train.jsonl and eval.jsonl into")
    parser.add_argument("--categories", nargs="+", default=list(MULTI_TURN_CATEGORIES), choices=MULTI_TURN_CATEGORIES)
    parser.add_argument("--eval-every", type=int, default=5, help="hold out scenarios numbered 0, N, 2N, ... (5)")
    args = parser.parse_args(argv)
    rows = []
    for category in args.categories:
        source, answers = bfcl_files(category, None)
        result = convert_rows(
            "bfcl",
            read_source(source),
            ground_truth=load_ground_truth(answers),
            category="multi_turn",
            expand=per_turn_rows,
        )
        if result.failures:
            print("\n".join(f"{category}: row {f.row}: {f.reason}" for f in result.failures), file=sys.stderr)
            return 1
        rows += result.rows
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train = [row for row in rows if not held_out(row, args.eval_every)]
    evaluation = [row for row in rows if held_out(row, args.eval_every)]
    write_jsonl(out / "train.jsonl", train)
    write_jsonl(out / "eval.jsonl", evaluation)
    scenarios = len({row["env"]["scenario"] for row in evaluation})
    print(
        f"{out / 'train.jsonl'}: {len(train)} rows; {out / 'eval.jsonl'}: {len(evaluation)} rows ({scenarios} scenarios)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
