"""How fast `tool_bfcl` scores BFCL's own rows, against BFCL's own checker on the same outputs, at the number of outputs
a row that users score: 1 (`grpo-tools score`, one prediction a row) and 4 and 16 (GRPO groups).

Every case of the AST categories of the installed bfcl-eval, each with model outputs of `bfcl_reference.model_outputs`
(the gold answer, every acceptable value, wrong types, string variants, dropped and extra parameters and calls). For
each group size k, every case gets k of its outputs (drawn with a fixed seed, repeated where it has fewer), so each
row's preparation is spread over k outputs. BFCL's `ast_checker` checks the decoded calls, as its evaluation does after
its decoder, against the case's function descriptions as its evaluation reads them from its data file (parsed JSON);
`tool_bfcl` reads each output as Hermes text through the trl reward function, parsing included (BFCL's decoder is not
timed), in batches as `GRPOTrainer` passes them: the completions of one prompt together.

The row's columns reach `tool_bfcl` in the form each way of scoring hands them over:
- `rows`: parsed, as `grpo-tools score` reads each data line with `json.loads` before scoring it, and as BFCL's
  checker gets its function descriptions and possible answers. Measured at one output a row, where scoring runs.
- `json`: each completion with its own copy of the row's JSON strings, as trl fetches the dataset columns
  (`prompts.prompt_dataset` stores them as JSON); `tool_bfcl` parses them itself. Measured at every group size.

Both sides are treated alike: each is warmed once, then timed three times, interleaved so that a busy machine slows
both alike, and the best pass counts. Before each of our passes the caches `tool_bfcl` reads are emptied (prepared rows,
standardised strings) and the row columns are new objects (new strings, or freshly parsed rows), so every pass
prepares every row again, as a fresh process reads them; BFCL's checker keeps nothing between calls.

    .venv/bin/python -m benchmarks.bench_bfcl [--groups 1 4 16] [--repeats 3] [--batch 64]
        [--output benchmarks/results/bfcl.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import bfcl_reference
from grpo_tools.rewards import bfcl, gold, tool_bfcl_reward


# tool_bfcl at least as fast as BFCL's checker at one output a row, rows as `grpo-tools score` reads them (issue 39)
TARGET_RATIO = 1.0
COLUMNS = ("tools", "answers", "possible_answers")


def _copy(text: str | None) -> str | None:
    """A new string object with the same text, as each row trl fetches from the dataset is."""
    return None if text is None else "".join([text[:1], text[1:]])


def empty_caches() -> None:
    """Forget what `tool_bfcl` prepared or memoised, so that the next pass prepares every row again (the normalised
    tools `tool_schema` caches are never read by it)."""
    gold.GOLD_CACHE.clear()
    bfcl._STANDARDIZED.clear()


def load_cases(categories: tuple[str, ...]) -> list[tuple[Any, dict[str, str | None], list]]:
    """Per BFCL case: the case, its JSON columns, and the outputs its decoder accepts (the checker sees no other)."""
    loaded = []
    for category in categories:
        for case in bfcl_reference.cases(category):
            row = case.row
            columns = {
                "tools": json.dumps(row["tools"]),
                "answers": json.dumps(row["answers"]),
                "possible_answers": json.dumps(row["possible_answers"]) if "possible_answers" in row else None,
            }
            outputs = [decoded for decoded in bfcl_reference.model_outputs(case) if decoded is not None]
            loaded.append((case, columns, outputs))
    return loaded


def grouped(loaded: list, group: int, seed: int = 0) -> tuple[list, dict[str, list]]:
    """`group` outputs of every case, its rows consecutive: BFCL's inputs and the reward function's columns."""
    rng = random.Random(seed)
    reference, columns = [], {"completions": [], **{key: [] for key in COLUMNS}}
    for case, row_columns, outputs in loaded:
        drawn = []
        while len(drawn) < group:
            drawn += rng.sample(outputs, min(len(outputs), group - len(drawn)))
        for decoded in drawn:
            reference.append((case, decoded))
            columns["completions"].append(bfcl_reference.hermes(decoded))
            for key in COLUMNS:
                columns[key].append(_copy(row_columns[key]))
    return reference, columns


def _parsed(text: str | None) -> Any:
    """A row column as `grpo-tools score` hands it over: read from its JSON."""
    return None if text is None else json.loads(text)


def measure(loaded: list, group: int, form: str, checker: Any, batch: int, repeats: int) -> dict[str, Any]:
    """Checks a second on each side (best of `repeats`, after one warm-up pass each) and the verdicts that differ;
    `form` is how the row columns reach `tool_bfcl`: "rows" (parsed) or "json" (JSON strings)."""
    reference, columns = grouped(loaded, group)
    size = len(reference)
    texts = {key: columns[key] for key in COLUMNS}
    fresh = _parsed if form == "rows" else _copy

    def run_bfcl() -> list[bool]:
        return [bfcl_reference.bfcl_verdict(checker, case, decoded) for case, decoded in reference]

    def run_ours() -> list[float]:
        scores: list[float] = []
        for start in range(0, size, batch):
            scores += tool_bfcl_reward(**{key: values[start : start + batch] for key, values in columns.items()})
        return scores

    def prepare_ours() -> None:
        empty_caches()
        for key in COLUMNS:
            columns[key] = [fresh(text) for text in texts[key]]

    sides: dict[str, tuple[Callable[[], None] | None, Callable[[], list]]] = {
        "bfcl": (None, run_bfcl),
        "tool_bfcl": (prepare_ours, run_ours),
    }
    gc.collect()
    gc.freeze()  # the benchmark's own inputs are not garbage: no collection on either side walks them
    verdicts = {}
    for name, (prepare, run) in sides.items():  # warm both, and check they agree on what is timed
        if prepare:
            prepare()
        verdicts[name] = run()
    disagreements = sum(
        (score == 1.0) != verdict for score, verdict in zip(verdicts["tool_bfcl"], verdicts["bfcl"], strict=True)
    )
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, (prepare, run) in sides.items():
            if prepare:
                prepare()
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
    gc.unfreeze()
    rates = {name: size / min(values) for name, values in seconds.items()}
    return {
        "outputs_per_row": group,
        "form": form,
        "outputs": size,
        "checks_per_second": rates,
        "seconds": seconds,
        "ratio": rates["tool_bfcl"] / rates["bfcl"],
        "disagreements": disagreements,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 4, 16], help="outputs a row")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes a side; the best counts")
    parser.add_argument("--batch", type=int, default=64, help="completions per reward call, as trl's batch")
    parser.add_argument("--every", type=int, default=1, help="take every n-th case (1: all; more for a smoke run)")
    parser.add_argument("--output", default="benchmarks/results/bfcl.json")
    args = parser.parse_args()

    checker = bfcl_reference.load_ast_checker()
    loaded = load_cases(bfcl_reference.AST_CATEGORIES)[:: args.every]
    # One output a row is scoring's case: measured with the rows parsed, as `grpo-tools score` hands them, and with
    # trl's JSON columns; groups are trl's case.
    runs = [(group, form) for group in args.groups for form in (("rows", "json") if group == 1 else ("json",))]
    results = [measure(loaded, group, form, checker, args.batch, args.repeats) for group, form in runs]

    print(
        f"BFCL: {len(loaded):,} cases of {len(bfcl_reference.AST_CATEGORIES)} AST categories; "
        f"best of {args.repeats} passes a side"
    )
    print(
        f"{'outputs a row':>14}{'columns':>8}{'outputs':>9}{'BFCL checks/s':>15}{'tool_bfcl checks/s':>20}"
        f"{'ratio':>8}{'differ':>8}"
    )
    for result in results:
        rates = result["checks_per_second"]
        print(
            f"{result['outputs_per_row']:>14}{result['form']:>8}{result['outputs']:>9,}{rates['bfcl']:>15,.0f}"
            f"{rates['tool_bfcl']:>20,.0f}{result['ratio']:>7.2f}x{result['disagreements']:>8}"
        )
    print(
        "BFCL: ast_checker on decoded calls and parsed function descriptions; tool_bfcl: Hermes text through the trl "
        "reward function, rows parsed (as `grpo-tools score`) or JSON columns (as trl), prepared afresh each pass"
    )
    single = next((result for result in results if (result["outputs_per_row"], result["form"]) == (1, "rows")), None)
    if single is not None:
        verdict = "ok" if single["ratio"] >= TARGET_RATIO else "BELOW TARGET"
        print(f"target: ratio at 1 output a row, rows as `grpo-tools score` reads them, >= {TARGET_RATIO}x: {verdict}")

    summary = {
        "cases": len(loaded),
        "categories": list(bfcl_reference.AST_CATEGORIES),
        "batch": args.batch,
        "repeats": args.repeats,
        "groups": results,
        "target_ratio_at_one": TARGET_RATIO,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {args.output}")
    # A verdict that differs from BFCL's is a bug: exit 1. A ratio under the target is a figure, printed above: a
    # timing swings with the machine's load, and failing here would stop `make bench` before the benchmarks after it.
    if any(result["disagreements"] for result in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
