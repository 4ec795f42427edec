"""Keep the rows of a canonical JSONL file that a model gets right on some of its samples but not on all of them,
to test GRPO without the gold turn on rows where its own samples hold something to rank.

The samples are `grpo-tools eval --num-samples N`'s (`base_samples.jsonl`, or `adapter_samples.jsonl` with
`--adapter`), each scored by `--scorer` (BFCL's rules by default) against its row's gold. A row is within reach when
between 1 and N - 1 of its samples are right. Every call row within reach is kept, and `--no-call-rows K` of the
no-call rows within reach (every (n // K)-th of the n there are, the first K of those), so that abstaining does not
take over the split (docs/findings.md). Rows keep their order. A row that is not JSON, has no samples or a gold the
scorer cannot read, and a sample naming a row the file does not hold, are refused with the file, row and field.
What docs/findings.md ran on the BFCL task's GRPO split, from the recipe's warm start on dev:

    .venv/bin/grpo-tools eval --model RUN/warmup --data outputs/bfcl-task/train.jsonl --scorer bfcl \\
        --num-samples 8 --temperature 0.7 --max-new-tokens 96 --batch-size 40 --seed 0 --output-dir outputs/samples
    .venv/bin/python -m experiments.in_reach outputs/bfcl-task/train.jsonl outputs/samples/base_samples.jsonl \\
        outputs/train_reach.jsonl --no-call-rows 5
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from experiments.restyle_names import read_rows


def samples_by_row(samples: Path, ids: set[str]) -> dict[str, list[str]]:
    """Each row id's sampled completions, in the file's order; SystemExit naming the file, row and field where a
    sample is not one of `grpo-tools eval`'s or names a row outside `ids`."""
    found: dict[str, list[str]] = {}
    for number, sample in read_rows(samples):
        if not isinstance(sample, dict) or not isinstance(sample.get("completion"), str):
            raise SystemExit(f"{samples}: row {number}: field completion: not a sample of grpo-tools eval")
        if sample.get("id") not in ids:
            raise SystemExit(f"{samples}: row {number}: field id: no row {sample.get('id')!r} in the data file")
        found.setdefault(sample["id"], []).append(sample["completion"])
    return found


def right_counts(source: Path, samples: Path, scorer: str) -> list[tuple[dict[str, Any], int, int]]:
    """Each row of `source` with how many of its samples are right and how many there are."""
    from grpo_tools.evaluation.scoring import SCORERS
    from grpo_tools.rewards import make_gold, score_completion

    rows = read_rows(source)
    ids = {row.get("id") for _, row in rows if isinstance(row, dict)}
    found = samples_by_row(samples, ids)
    counted = []
    for number, row in rows:
        if not isinstance(row, dict) or row.get("id") not in found:
            raise SystemExit(f"{source}: row {number}: field id: no samples for this row in {samples}")
        label = f"row {number}"
        try:
            gold = make_gold(row.get("tools"), row.get("answers"), row.get("possible_answers"), label)
            right = sum(score_completion(SCORERS[scorer], text, gold).score >= 1.0 for text in found[row["id"]])
        except ValueError as error:  # the gold's errors name the row already
            where = "" if str(error).startswith(label) else f"{label}: "
            raise SystemExit(f"{source}: {where}{error}") from None
        counted.append((row, right, len(found[row["id"]])))
    return counted


def within_reach(counted: list[tuple[dict[str, Any], int, int]], no_call_rows: int) -> list[dict[str, Any]]:
    """The call rows within reach and `no_call_rows` of the no-call rows within reach, evenly spaced, in order."""
    reach = [row for row, right, total in counted if 0 < right < total]
    no_call = [row for row in reach if not row.get("answers")]
    kept = no_call[:: max(1, len(no_call) // no_call_rows)][:no_call_rows] if no_call_rows > 0 else []
    kept_ids = {id(row) for row in kept}
    return [row for row in reach if row.get("answers") or id(row) in kept_ids]


def main(argv: list[str] | None = None) -> None:
    from grpo_tools.evaluation.scoring import SCORERS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="canonical JSONL rows, the file the samples were drawn for")
    parser.add_argument("samples", type=Path, help="grpo-tools eval's *_samples.jsonl (--num-samples above 1)")
    parser.add_argument("target", type=Path, help="where the rows within reach go")
    parser.add_argument("--scorer", choices=sorted(SCORERS), default="bfcl", help="what makes a sample right")
    parser.add_argument("--no-call-rows", type=int, default=5, help="no-call rows within reach to keep (default 5)")
    args = parser.parse_args(argv)
    if args.no_call_rows < 0:
        parser.error(f"--no-call-rows must be 0 or more, got {args.no_call_rows}")
    counted = right_counts(args.source, args.samples, args.scorer)
    kept = within_reach(counted, args.no_call_rows)
    try:
        args.target.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
    except OSError as error:
        raise SystemExit(f"{args.target}: cannot be written ({error})") from None
    calls = [(right, total) for row, right, total in counted if row.get("answers")]
    reach_calls = sum(0 < right < total for right, total in calls)
    reach_no_call = sum(0 < right < total for row, right, total in counted if not row.get("answers"))
    share = sum(right for _, right, _ in counted) / sum(total for _, _, total in counted)
    print(
        f"{args.target}: {len(kept)} rows: {reach_calls} of {len(calls)} call rows within reach, "
        f"{len(kept) - reach_calls} of the {reach_no_call} no-call rows within reach; "
        f"{share:.1%} of the samples right"
    )


if __name__ == "__main__":
    main()
